"""The fleet controller's dispatch decision (pure, exhaustively) and its worker bookkeeping."""

from __future__ import annotations

import itertools
import threading

import pytest

from gitray.core.errors import Interrupted, LeaseLostError
from gitray.core.model import ObjectKey
from gitray.daemon.fleet import Fleet, Flight, dispatchable, order_of
from gitray.engine.executor import Outcome, WorkloadOutcome
from gitray.plans.plan import Action, Plan, Step, StepType, WorkloadPlan

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
