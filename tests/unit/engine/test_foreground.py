"""``gitray apply``'s foreground drive of the fleet: order, bounds, failures, errors, outcomes.

The runs here are plain functions standing for ``Executor.run_workload`` (the executor and its
steps are tested against real components in tests/integration)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest

from gitray.core.errors import LeaseLostError
from gitray.core.model import ObjectKey
from gitray.engine import foreground
from gitray.engine.executor import Outcome, Waiting, WorkloadOutcome
from gitray.engine.fleet import Fleet
from gitray.engine.foreground import run_to_end
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

STEP = (Step("s1", StepType.APPLY_OBJECT, "x"),)


def key(kind: str, name: str) -> ObjectKey:
    return ObjectKey(kind, "ns", name)


def wp(k: ObjectKey, wave: int, work: bool = True) -> WorkloadPlan:
    return WorkloadPlan(k, Action.UPDATE, wave, STEP if work else (), desired_hash="h")


CM0, RC0, RJ0, RS0 = (key("ConfigMap", "cm0"), key("RayCluster", "rc0"), key("RayJob", "rj0"),
                      key("RayService", "rs0"))
CM1, RS1 = key("ConfigMap", "cm1"), key("RayService", "rs1")


class Runs:
    """Records when each run starts and ends; ``outcomes`` says how a workload's run ends."""

    def __init__(self, outcomes: dict[ObjectKey, Outcome] | None = None,
                 seconds: float = 0.05) -> None:
        self.outcomes = outcomes or {}
        self.seconds = seconds
        self.events: list[tuple[str, ObjectKey]] = []
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, w: WorkloadPlan) -> WorkloadOutcome:
        with self._lock:
            self.events.append(("start", w.key))
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.seconds)
        with self._lock:
            self.events.append(("end", w.key))
            self.running -= 1
        outcome = self.outcomes.get(w.key, Outcome.SUCCEEDED)
        return WorkloadOutcome(w.key, outcome, "", len(w.steps), len(w.steps))

    def started(self) -> list[ObjectKey]:
        return [k for e, k in self.events if e == "start"]

    def ended_before_started(self, first: ObjectKey, then: ObjectKey) -> bool:
        return self.events.index(("end", first)) < self.events.index(("start", then))


def test_waves_run_in_order_supporting_objects_first_and_ray_workloads_together() -> None:
    plan = Plan("sha", "live", workloads=(wp(RS1, 1), wp(RC0, 0), wp(CM1, 1), wp(CM0, 0),
                                          wp(RJ0, 0)))
    runs = Runs()
    outcomes = run_to_end(plan, runs, workers=4)
    assert runs.ended_before_started(CM0, RC0) and runs.ended_before_started(CM0, RJ0)
    for earlier in (RC0, RJ0):
        assert runs.ended_before_started(earlier, CM1)
    assert runs.ended_before_started(CM1, RS1)
    assert runs.most == 2  # rc0 and rj0, side by side
    # in the plan's order: waves, supporting objects first, then as listed
    assert [o.key for o in outcomes] == [CM0, RC0, RJ0, CM1, RS1]
    assert {o.outcome for o in outcomes} == {Outcome.SUCCEEDED}


def test_no_more_runs_at_once_than_workers() -> None:
    many = tuple(wp(key("RayCluster", f"rc{i}"), 0) for i in range(7))
    runs = Runs()
    outcomes = run_to_end(Plan("sha", "live", workloads=many), runs, workers=3)
    assert runs.most == 3 and len(outcomes) == 7


def test_workloads_without_work_do_not_run_and_have_no_outcome() -> None:
    plan = Plan("sha", "live", workloads=(wp(CM0, 0, work=False), wp(RC0, 0), wp(RS1, 1, False)))
    runs = Runs()
    assert [o.key for o in run_to_end(plan, runs, workers=2)] == [RC0]
    assert runs.started() == [RC0]


def test_a_run_to_resume_runs_though_the_plan_has_no_steps_for_it() -> None:
    plan = Plan("sha", "live", workloads=(wp(RC0, 0, work=False), wp(RS1, 1)))
    runs = Runs()
    outcomes = run_to_end(plan, runs, workers=2, resume={RC0})
    assert runs.started() == [RC0, RS1]
    assert [o.key for o in outcomes] == [RC0, RS1]


class EndsFirst(Fleet):
    """A fleet whose ``dispatch`` returns only once the run it started has ended: the order
    a run that ends at once (a ConfigMap applied) can take on a busy machine."""

    def dispatch(self, wp: WorkloadPlan, sha: str, trigger: str,
                 run: Callable[[], WorkloadOutcome]) -> bool:
        started = super().dispatch(wp, sha, trigger, run)
        assert self.wait(10)
        return started


def test_a_run_that_ended_before_apply_looked_again_has_its_outcome(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(CI run of 683a26f: ``apply --override-freeze`` applied its ConfigMap, and said "0
    converged, 1 not run: not started", exit 1: the run left the fleet before apply looked.)"""
    monkeypatch.setattr(foreground, "Fleet", EndsFirst)
    plan = Plan("sha", "live", workloads=(wp(CM0, 0), wp(RC0, 0), wp(RS1, 1)))
    runs = Runs(seconds=0)
    outcomes = run_to_end(plan, runs, workers=2)
    assert [(o.key, o.outcome) for o in outcomes] == [(CM0, Outcome.SUCCEEDED),
                                                      (RC0, Outcome.SUCCEEDED),
                                                      (RS1, Outcome.SUCCEEDED)]
    assert runs.started() == [CM0, RC0, RS1]  # each once


@pytest.mark.parametrize(("how", "said"), [(Outcome.FAILED, "wave 0 failed"),
                                           (Outcome.SUPERSEDED,
                                            "wave 0 was superseded by a newer commit")])
def test_a_failed_or_superseded_workload_stops_the_later_ones(how: Outcome, said: str) -> None:
    plan = Plan("sha", "live", workloads=(wp(CM0, 0), wp(RC0, 0), wp(RJ0, 0), wp(CM1, 1),
                                          wp(RS1, 1)))
    runs = Runs({RC0: how})
    outcomes = {o.key: o for o in run_to_end(plan, runs, workers=4)}
    assert set(runs.started()) == {CM0, RC0, RJ0}  # its own place ends, the next never starts
    assert outcomes[RC0].outcome is how and outcomes[RJ0].outcome is Outcome.SUCCEEDED
    for later in (CM1, RS1):
        assert (outcomes[later].outcome, outcomes[later].reason) == (Outcome.SKIPPED, said)


def test_a_failed_supporting_object_stops_the_ray_workloads_of_its_wave() -> None:
    plan = Plan("sha", "live", workloads=(wp(CM0, 0), wp(RC0, 0)))
    outcomes = run_to_end(plan, Runs({CM0: Outcome.FAILED}), workers=2)
    assert [(o.key, o.outcome) for o in outcomes] == [(CM0, Outcome.FAILED),
                                                      (RC0, Outcome.SKIPPED)]


def test_an_error_lets_the_runs_in_flight_end_starts_nothing_more_and_is_raised() -> None:
    plan = Plan("sha", "live", workloads=(wp(RC0, 0), wp(RJ0, 0), wp(RS1, 1)))
    runs = Runs(seconds=0.2)

    def run(w: WorkloadPlan) -> WorkloadOutcome:
        if w.key == RC0:
            raise LeaseLostError("Lease ns/gitray lost: it was deleted")
        return runs(w)

    with pytest.raises(LeaseLostError, match="it was deleted"):
        run_to_end(plan, run, workers=2)
    assert runs.events == [("start", RJ0), ("end", RJ0)]  # rj0 ended; rs1 never started


def test_a_run_that_parks_in_the_foreground_is_an_error_not_a_hang() -> None:
    plan = Plan("sha", "live", workloads=(wp(RC0, 0),))

    def parks(w: WorkloadPlan) -> WorkloadOutcome:
        return WorkloadOutcome(w.key, Outcome.WAITING, "waits", 0, 1,
                               waiting=Waiting(STEP[0], "waits", None))

    with pytest.raises(RuntimeError, match="parked at a wait in the foreground"):
        run_to_end(plan, parks, workers=1)


def test_interrupted_it_stops_the_runs_and_returns_only_once_they_stopped() -> None:
    """Ctrl-C while a run waits: the runs are told (``interrupt``), nothing more starts, and
    the interrupt is raised after the run in flight stopped (the Lease is released after)."""
    plan = Plan("sha", "live", workloads=(wp(RC0, 0), wp(RS1, 1)))
    told = threading.Event()
    ended: list[tuple[ObjectKey, bool]] = []
    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main  # (run_to_end's caller)

    def waits(w: WorkloadPlan) -> WorkloadOutcome:
        # Ctrl-C while it waits. Sent to the main thread, as a terminal's SIGINT reaches a
        # thread that does not block it: `raise_signal` here targets this worker thread, and
        # in one lane of a full run (2026-12-05) the main thread never heard it in 30 s.
        signal.pthread_kill(main, signal.SIGINT)
        was_told = told.wait(30)
        time.sleep(0.1)  # stops at its next progress point
        ended.append((w.key, was_told))
        return WorkloadOutcome(w.key, Outcome.SUCCEEDED, "", 1, 1)

    # Python's own Ctrl-C handler and SIGINT not blocked, whatever an earlier test of this
    # process left behind
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        with pytest.raises(KeyboardInterrupt):
            run_to_end(plan, waits, workers=1, interrupt=told.set)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, previous)
    # rc0 was told, and stopped before it returned; rs1 never began
    assert ended == [(RC0, True)]
