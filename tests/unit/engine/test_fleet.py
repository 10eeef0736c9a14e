"""The fleet controller's dispatch decision (pure, exhaustively) and its worker bookkeeping."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import replace

import pytest

from gitray.core.errors import Interrupted, LeaseLostError
from gitray.core.model import ObjectKey
from gitray.daemon.dispatch import Dispatcher
from gitray.engine.executor import Outcome, Waiting, WorkloadOutcome
from gitray.engine.fleet import (
    RECHECK_CAP_S,
    RECHECK_FIRST_S,
    Fleet,
    Flight,
    Parked,
    checks_at,
    dispatchable,
    due,
    order_of,
    recheck_delay,
)
from gitray.engine.record import Record, RunState
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType
from tests.clock import ManualClock

STEP = (Step("s1", StepType.APPLY_OBJECT, "x"),)


def key(kind: str, name: str) -> ObjectKey:
    return ObjectKey(kind, "ns", name)


def wp(k: ObjectKey, wave: int, work: bool, h: str = "h1") -> WorkloadPlan:
    return WorkloadPlan(k, Action.UPDATE, wave, STEP if work else (), desired_hash=h)


# Four workloads spanning every ordering relation: two waves, and in wave 0 a supporting
# object (ConfigMap) before Ray workloads; two Ray workloads share a place (wave 0).
CM0 = key("ConfigMap", "cm0")
RC0 = key("RayCluster", "rc0")
RJ0 = key("RayJob", "rj0")
RS1 = key("RayService", "rs1")
WAVES = {CM0: 0, RC0: 0, RJ0: 0, RS1: 1}
# each workload's state in a pass: no work, steps, an interrupted run to resume, its run in
# flight (with steps left in the live plan, or none), failed at this commit
STATES = ("idle", "steps", "resume", "flying-steps", "flying-idle", "failed")


def scenario(states: dict[ObjectKey, str]
             ) -> tuple[Plan, set[ObjectKey], set[ObjectKey], set[ObjectKey]]:
    workloads = tuple(wp(k, WAVES[k], states[k] in {"steps", "flying-steps"}) for k in WAVES)
    flying = {k for k, s in states.items() if s.startswith("flying")}
    failed = {k for k, s in states.items() if s == "failed"}
    resume = {k for k, s in states.items() if s == "resume"}
    return Plan("sha", "live", workloads=workloads), flying, failed, resume


def test_order_puts_supporting_objects_first_within_a_wave() -> None:
    assert order_of(wp(CM0, 0, True)) < order_of(wp(RC0, 0, True)) < order_of(wp(RS1, 1, True))
    assert order_of(wp(RC0, 0, True)) == order_of(wp(RJ0, 0, True))
    assert order_of(wp(key("ConfigMap", "late"), 1, True)) > order_of(wp(RJ0, 0, True))


@pytest.mark.parametrize("combo", list(itertools.product(STATES, repeat=len(WAVES))),
                         ids="-".join)
def test_dispatch_over_every_combination_of_states(combo: tuple[str, ...]) -> None:
    states = dict(zip(WAVES, combo, strict=True))
    plan, flying, failed, resume = scenario(states)
    chosen = {w.key for w in dispatchable(plan, flying, failed, resume)}
    for w in plan.workloads:
        has_work = states[w.key] in {"steps", "resume"}
        earlier_busy = any(order_of(o) < order_of(w) and states[o.key] != "idle"
                           for o in plan.workloads)
        # started exactly when it has work, no run holds it, and nothing before it in its
        # commit has work, is in flight or failed
        assert (w.key in chosen) == (has_work and not earlier_busy), (w.key, states)


def test_a_workload_in_flight_is_never_started_again_whatever_its_spec() -> None:
    plan = Plan("sha", "live", workloads=(wp(RS1, 0, True, h="new"),))
    assert dispatchable(plan, {RS1}, set()) == []
    assert dispatchable(plan, set(), set()) == [plan.workloads[0]]


def test_a_later_wave_waits_for_the_earlier_one_in_flight_then_starts() -> None:
    plan = Plan("sha", "live", workloads=(wp(RJ0, 0, False), wp(RS1, 1, True)))
    assert dispatchable(plan, {RJ0}, set()) == []
    assert [w.key for w in dispatchable(plan, set(), set())] == [RS1]


def test_a_failed_wave_stops_the_waves_after_it_but_not_its_peers() -> None:
    plan = Plan("sha", "live", workloads=(wp(RC0, 0, False), wp(RJ0, 0, True),
                                          wp(RS1, 1, True)))
    assert [w.key for w in dispatchable(plan, set(), {RC0})] == [RJ0]
    assert dispatchable(plan, set(), {RC0, RJ0}) == []


def test_a_workload_in_flight_that_left_git_blocks_nothing() -> None:
    plan = Plan("sha", "live", workloads=(wp(RS1, 1, True),))
    assert [w.key for w in dispatchable(plan, {RC0}, {RJ0})] == [RS1]


def test_nothing_to_do_dispatches_nothing() -> None:
    assert dispatchable(Plan("sha", "live"), set(), set()) == []
    assert dispatchable(Plan("sha", "live", workloads=(wp(RC0, 0, False),)), set(), set()) == []


# ---- the pool ------------------------------------------------------------------------------


class Ends:
    def __init__(self) -> None:
        self.seen: list[tuple[ObjectKey, Flight, WorkloadOutcome | None]] = []
        self.event = threading.Event()

    def __call__(self, k: ObjectKey, flight: Flight, outcome: WorkloadOutcome | None) -> None:
        self.seen.append((k, flight, outcome))
        self.event.set()


def test_a_run_is_in_flight_until_it_ends_and_its_end_is_heard() -> None:
    ends = Ends()
    fleet = Fleet(2, ends)
    release = threading.Event()
    done = WorkloadOutcome(RJ0, Outcome.SUCCEEDED, "", 1, 1)

    def run() -> WorkloadOutcome:
        assert release.wait(30)
        return done

    try:
        assert fleet.dispatch(wp(RJ0, 0, True), "abc", "commit", run)
        assert not fleet.dispatch(wp(RJ0, 0, True, h="other"), "def", "commit", run)
        fleet.stepped(RJ0, "1/1 apply-object x")
        (flight,) = fleet.in_flight().values()
        assert (flight.sha, flight.desired_hash, flight.step) == ("abc", "h1", "1/1 apply-object x")
        assert fleet.detail()[0]["step"] == "1/1 apply-object x"
        assert not fleet.wait(0.01)
        release.set()
        assert fleet.wait(30) and ends.event.wait(30)
        assert fleet.in_flight() == {}
        assert [(k, f.sha, o) for k, f, o in ends.seen] == [(RJ0, "abc", done)]
    finally:
        release.set()
        fleet.shutdown()


@pytest.mark.parametrize("error", [Interrupted("shutting down"), LeaseLostError("lost"),
                                   RuntimeError("a bug")])
def test_a_run_stopped_without_an_outcome_is_forgotten(error: Exception) -> None:
    ends = Ends()
    fleet = Fleet(1, ends)

    def run() -> WorkloadOutcome:
        raise error

    try:
        assert fleet.dispatch(wp(RC0, 0, True), "abc", "commit", run)
        assert ends.event.wait(30)
        assert fleet.in_flight() == {}
        assert [(k, o) for k, _, o in ends.seen] == [(RC0, None)]
    finally:
        fleet.shutdown()


def test_after_stop_a_queued_run_never_starts() -> None:
    ends = Ends()
    fleet = Fleet(1, ends)
    started: list[ObjectKey] = []

    def run() -> WorkloadOutcome:
        started.append(RC0)
        return WorkloadOutcome(RC0, Outcome.SUCCEEDED)

    try:
        fleet.stop()
        assert fleet.dispatch(wp(RC0, 0, True), "abc", "commit", run)
        assert ends.event.wait(30)
        assert started == [] and [(k, o) for k, _, o in ends.seen] == [(RC0, None)]
    finally:
        fleet.shutdown()


# ---- parked waits: which are due, when next -------------------------------------------------

WAIT = Step("w", StepType.WAIT_JOB, "job-1")


def parked_at(due_at: float, *, released: bool = False, deadline: float | None = None,
              checks: int = 0) -> Parked:
    flight = Flight("abc", "h1", 0, 0.0, checks=checks)
    return Parked(flight, Waiting(WAIT, "run is Running", None), due_at, deadline, released)


def test_the_recheck_delay_doubles_up_to_its_cap_and_never_passes_the_deadline() -> None:
    assert [recheck_delay(n, None) for n in range(6)] == [2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert recheck_delay(10_000, None) == RECHECK_CAP_S  # (no overflow)
    assert recheck_delay(-1, None) == RECHECK_FIRST_S
    assert recheck_delay(3, 5.0) == 5.0  # checked when its timeout runs out
    assert recheck_delay(0, 0.5) == 0.5
    assert recheck_delay(0, -3.0) == 0.0  # already out: at once


@pytest.mark.parametrize("now", [0.0, 4.9, 5.0, 10.0, 99.0])
def test_due_are_the_parked_waits_whose_time_has_come_and_not_released(now: float) -> None:
    parked = {RJ0: parked_at(5.0), RC0: parked_at(10.0), RS1: parked_at(1.0, released=True),
              CM0: parked_at(0.0)}
    expected = sorted(k for k, at in ((RJ0, 5.0), (RC0, 10.0), (CM0, 0.0)) if now >= at)
    assert due(parked, now) == expected
    assert due({}, now) == []


def park(fleet: Fleet, k: ObjectKey, ends: Ends, left: float | None = 600.0) -> None:
    done = threading.Event()
    waiting = WorkloadOutcome(k, Outcome.WAITING, "run is Running", 1, 3,
                              waiting=Waiting(WAIT, "run is Running", left))

    def run() -> WorkloadOutcome:
        done.set()
        return waiting

    assert fleet.dispatch(wp(k, 0, True), "abc", "commit", run)
    assert done.wait(30)
    for _ in range(3000):  # (its worker parks it right after the run returns)
        if k in fleet.parked():
            break
        threading.Event().wait(0.01)


def test_a_waiting_run_parks_holds_no_worker_and_stays_in_flight_unheard() -> None:
    ends, clock = Ends(), ManualClock(100.0)
    fleet = Fleet(1, ends, monotonic=clock)
    try:
        park(fleet, RJ0, ends)
        assert fleet.wait(30)  # no worker holds it
        assert set(fleet.in_flight()) == {RJ0} and ends.seen == []
        p = fleet.parked()[RJ0]
        assert (p.due, p.deadline, p.released) == (102.0, 700.0, False)
        assert fleet.detail()[0]["state"] == "waiting"
        # the one worker is free: another workload runs at once
        other = WorkloadOutcome(RC0, Outcome.SUCCEEDED)
        assert fleet.dispatch(wp(RC0, 0, True), "abc", "commit", lambda: other)
        assert ends.event.wait(30) and [o for _, _, o in ends.seen] == [other]
        # a pass never starts it again while it waits
        assert not fleet.dispatch(wp(RJ0, 0, True), "def", "commit", lambda: other)
    finally:
        fleet.shutdown()


def test_a_recheck_backs_off_or_releases_and_the_release_resumes_with_its_own_flight() -> None:
    ends, clock = Ends(), ManualClock(100.0)
    fleet = Fleet(1, ends, monotonic=clock)
    try:
        park(fleet, RJ0, ends)
        clock.now = 103.0
        fleet.rechecked([], [RJ0])  # not ended yet: later, and later
        p = fleet.parked()[RJ0]
        assert (p.flight.checks, p.due) == (1, 107.0)
        fleet.rechecked([], [RJ0])
        assert fleet.parked()[RJ0].due == 111.0
        assert fleet.released() == {}
        fleet.rechecked([RJ0], [])
        assert set(fleet.released()) == {RJ0} and RJ0 not in fleet.in_flight()
        fleet.rechecked([], [RJ0])  # (a released one stays released)
        assert set(fleet.released()) == {RJ0}
        done = WorkloadOutcome(RJ0, Outcome.SUCCEEDED)
        # resumed by a pass of a newer commit: the run keeps its commit and trigger
        assert fleet.dispatch(wp(RJ0, 0, True, h="other"), "newer", "run", lambda: done)
        assert ends.event.wait(30)
        (k, flight, outcome), = ends.seen
        assert (k, flight.sha, flight.trigger, flight.checks, outcome) == \
            (RJ0, "abc", "commit", 2, done)
        assert fleet.parked() == {} and fleet.in_flight() == {}
    finally:
        fleet.shutdown()


def test_forgotten_parked_runs_leave_the_fleet() -> None:
    ends = Ends()
    fleet = Fleet(1, ends, monotonic=ManualClock(100.0))
    try:
        park(fleet, RJ0, ends)
        fleet.forget([RJ0, RC0])
        assert fleet.parked() == {} and fleet.in_flight() == {} and ends.seen == []
    finally:
        fleet.shutdown()


def test_a_run_that_parks_while_stopping_is_left_for_the_next_leader(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gitray.sync")
    ends = Ends()
    fleet = Fleet(1, ends, monotonic=ManualClock(100.0))
    try:
        gate = threading.Event()
        waiting = WorkloadOutcome(RJ0, Outcome.WAITING, "x",
                                  waiting=Waiting(WAIT, "x", None))

        def run() -> WorkloadOutcome:
            assert gate.wait(30)
            return waiting

        assert fleet.dispatch(wp(RJ0, 0, True), "abc", "commit", run)
        fleet.stepped(RJ0, "2/3 wait-job job-1")
        fleet.stop()
        gate.set()
        assert fleet.wait(30)
        assert fleet.parked() == {} and fleet.in_flight() == {} and ends.seen == []
        assert "sync of abc interrupted: the next leader resumes ns/RayJob/rj0 at 2/3 " \
            "wait-job job-1" in caplog.messages
    finally:
        fleet.shutdown()


def test_shutdown_hands_the_parked_runs_over_saying_so_as_for_a_run_on_a_worker(
        caplog: pytest.LogCaptureFixture) -> None:
    """A parked run holds no worker, so no step is interrupted at shutdown: the hand-over
    still says, for each, that the next leader resumes it (SIGTERM's contract)."""
    caplog.set_level(logging.INFO, logger="gitray.sync")
    ends = Ends()
    fleet = Fleet(1, ends, monotonic=ManualClock(100.0))
    try:
        park(fleet, RJ0, ends)
        park(fleet, RC0, ends)
        fleet.rechecked([RC0], [])  # (released for a pass that will not come now)
        caplog.clear()
        fleet.stop()
        assert fleet.hand_over() == [RC0, RJ0]
        assert [m for m in caplog.messages if m.startswith("sync of")] == [
            "sync of abc interrupted: the next leader resumes ns/RayCluster/rc0",
            "sync of abc interrupted: the next leader resumes ns/RayJob/rj0"]
        assert fleet.parked() == {} and fleet.in_flight() == {} and ends.seen == []
        assert fleet.hand_over() == []  # (once)
    finally:
        fleet.shutdown()


def test_a_queued_or_interrupted_run_says_it_is_left_for_the_next_leader(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gitray.sync")
    ends = Ends()
    fleet = Fleet(1, ends, monotonic=ManualClock(100.0))
    gate = threading.Event()

    def run() -> WorkloadOutcome:
        assert gate.wait(30)
        raise Interrupted("shutting down")

    try:
        assert fleet.dispatch(wp(RJ0, 0, True), "abc", "commit", run)
        fleet.stepped(RJ0, "2/3 wait-job job-1")
        gate.set()
        assert ends.event.wait(30)
        assert "sync of abc interrupted: the next leader resumes ns/RayJob/rj0 at 2/3 " \
            "wait-job job-1" in caplog.messages
    finally:
        gate.set()
        fleet.shutdown()


def test_a_parked_wait_resumed_at_the_same_step_is_not_announced_again() -> None:
    ends = Ends()
    fleet = Fleet(1, ends, monotonic=ManualClock(100.0))
    gate = threading.Event()
    try:
        assert fleet.dispatch(wp(RJ0, 0, True), "abc", "commit",
                              lambda: (gate.wait(30), WorkloadOutcome(RJ0, Outcome.SUCCEEDED))[1])
        assert fleet.stepped(RJ0, "2/3 wait-job job-1")
        assert not fleet.stepped(RJ0, "2/3 wait-job job-1")
        assert fleet.stepped(RJ0, "3/3 delete-job job-1")
        assert fleet.stepped(RC0, "1/1 x")  # (not in flight: nothing to compare with)
    finally:
        gate.set()
        fleet.shutdown()


SERVE_WAIT = Step("w4", StepType.WAIT_SERVE_RUNNING, "svc-1")
NEXT_WAIT = Step("w6", StepType.PAUSE, "svc-2")


def test_checks_at_count_on_at_the_same_wait_step_and_start_over_at_a_new_one() -> None:
    flight = Flight("abc", "h1", 0, 0.0)
    assert checks_at(flight, "w4") == 0  # (never parked)
    assert checks_at(replace(flight, checks=3, parked_at="w4"), "w4") == 4
    assert checks_at(replace(flight, checks=3, parked_at="w2"), "w4") == 0


def test_a_wait_its_run_checks_itself_is_rechecked_later_and_later_too() -> None:
    """A wait no LIST settles (Serve RUNNING, a pause until promoted) is released whenever it
    is due and checked by its run, which parks again: each such check counts, so it is
    checked after 2, 4, 8, then every 15 s — not by a whole pass every 2 s for as long as it
    waits (a pause until promoted may wait for hours). A new wait step starts over."""
    ends, clock = Ends(), ManualClock(100.0)
    fleet = Fleet(1, ends, monotonic=clock)

    def waits_at(step: Step) -> Callable[[], WorkloadOutcome]:
        return lambda: WorkloadOutcome(RS1, Outcome.WAITING, "x", 3, 6,
                                       waiting=Waiting(step, "x", None))

    def parked_again(step: Step) -> Parked:
        fleet.rechecked([RS1], [])  # (a round releases it: its run checks it)
        assert fleet.dispatch(wp(RS1, 0, True), "abc", "run", waits_at(step))
        for _ in range(3000):
            if RS1 in fleet.parked():
                return fleet.parked()[RS1]
            threading.Event().wait(0.01)
        raise AssertionError("not parked again")

    try:
        assert fleet.dispatch(wp(RS1, 0, True), "abc", "commit", waits_at(SERVE_WAIT))
        assert fleet.wait(30)
        delays = [fleet.parked()[RS1].due - clock.now]
        for _ in range(4):
            delays.append(parked_again(SERVE_WAIT).due - clock.now)
        assert delays == [2.0, 4.0, 8.0, 15.0, 15.0]
        assert parked_again(NEXT_WAIT).due - clock.now == 2.0
        assert ends.seen == []
    finally:
        fleet.shutdown()


def test_only_a_pass_of_the_newest_commit_supersedes_a_parked_upgrade() -> None:
    """A RayService's run parked at a wait for the newest commit (spec h2): a deletions pass
    of the commit before (spec h1; its sha read before it waited for the pass lock) leaves it
    parked; a pass of a commit that wants another spec releases it (superseded then)."""
    ends, clock = Ends(), ManualClock(100.0)
    fleet = Fleet(1, ends, monotonic=clock)
    try:
        waiting = WorkloadOutcome(RS1, Outcome.WAITING, "x", 2, 6,
                                  waiting=Waiting(WAIT, "x", None))
        assert fleet.dispatch(wp(RS1, 0, True, h="h2"), "new", "commit", lambda: waiting)
        for _ in range(3000):
            if RS1 in fleet.parked():
                break
            threading.Event().wait(0.01)
        dispatcher = Dispatcher(fleet, None, lambda *_: None, lambda *_: None)  # type: ignore[arg-type]
        older = Plan("old", "live", workloads=(wp(RS1, 0, False, h="h1"),))
        dispatcher.resume_released(older, [], {}, newest=False)
        assert RS1 in fleet.parked() and not fleet.parked()[RS1].released
        dispatcher.resume_released(older, [], {}, newest=True)  # (no record: forgotten)
        assert RS1 not in fleet.parked()
    finally:
        fleet.shutdown()


class Dispatched:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[ObjectKey]]] = []

    def dispatched(self, sha: str, keys: list[ObjectKey], left: bool) -> None:
        self.calls.append((sha, keys))


@pytest.mark.parametrize(("revision", "reports_to"), [
    ("a" * 40, "a" * 40),  # a run of an older commit, resumed from its record: that commit's
    ("b" * 40, "b" * 40),  # the pass's own commit
    ("worktree", "b" * 40),  # a record of an uncommitted tree: the pass's commit
])
def test_a_run_resumed_from_its_record_reports_to_the_records_commit(
        revision: str, reports_to: str) -> None:
    """A new leader (or one that took its Lease back) resumes a RayJob's run of commit A from
    its record while planning the newer commit B (which leaves the job as it is): the run's
    statuses and verdict are A's, not B's — else A's commit status stays pending for good
    (seen in a CI-like run whose leader lost its Lease to a slow API server mid-job)."""
    ends = Ends()
    fleet = Fleet(1, ends)
    verdicts = Dispatched()
    executors: list[str] = []
    done = WorkloadOutcome(RJ0, Outcome.SUCCEEDED, "", 1, 1)

    class Executor:
        def run_workload(self, *_: object) -> WorkloadOutcome:
            return done

    def executor_for(at: str, *_: object) -> Executor:
        executors.append(at)
        return Executor()

    job = wp(RJ0, 0, False)
    rec = Record(RJ0, revision, job.desired_hash, replace(job, steps=STEP), 0, (),
                 RunState.RUNNING, "", 3, "2026-12-05T08:16:17.000Z")
    dispatcher = Dispatcher(fleet, verdicts, lambda *_: None, executor_for)  # type: ignore[arg-type]
    try:
        started = dispatcher("b" * 40, "run", None, Plan("b" * 40, "live", workloads=(job,)),  # type: ignore[arg-type]
                             {RJ0: rec}, {}, [], lambda *_: None)
        assert [w.key for w in started] == [RJ0]
        assert fleet.wait(30) and ends.event.wait(30)
        ((k, flight, outcome),) = ends.seen
        assert (k, flight.sha, outcome) == (RJ0, reports_to, done)
        assert executors == [reports_to]
        # the pass's commit counts the run among its own only when it is its own
        assert verdicts.calls == ([("b" * 40, [RJ0])] if reports_to == "b" * 40 else [])
    finally:
        fleet.shutdown()
