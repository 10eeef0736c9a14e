"""``gitray apply``'s run of a plan: the per-workload engine of ``gitray sync`` (the
``Fleet``, ``dispatchable``) driven in the foreground until every workload of the plan has
ended. I/O (threads).

Each workload whose turn has come (``dispatchable``: waves in order; in a wave, supporting
objects before Ray workloads) runs on the fleet's bounded pool (``maxParallel`` workers) with
its own run record, exactly as a sync pass starts it. The differences are the foreground's: a
wait holds its worker (apply stays to the end and shows progress where ``gitray sync`` parks the
run), and the next wave is started as soon as the runs before it ended, not by a later pass.

A workload that fails or is superseded stops its commit's later workloads: they end
``SKIPPED``, saying which wave stopped them. An error that ends the apply (the Lease lost, a
bug) lets the runs in flight end at their next progress point or fence, starts nothing more,
and is raised.
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Collection
from dataclasses import replace

from gitray.core.model import ObjectKey
from gitray.engine.executor import Outcome, WorkloadOutcome
from gitray.engine.fleet import Fleet, dispatchable, order_of
from gitray.plans.plan import Plan, WorkloadPlan

__all__ = ["run_to_end"]

STOP_GRACE_S = 60.0  # how long an interrupted apply waits for its runs to stop
_STOPPING = {Outcome.FAILED: "failed", Outcome.SUPERSEDED: "was superseded by a newer commit"}


def run_to_end(plan: Plan, run: Callable[[WorkloadPlan], WorkloadOutcome], workers: int,
               resume: Collection[ObjectKey] = (),
               interrupt: Callable[[], None] = lambda: None) -> list[WorkloadOutcome]:
    """Run every workload of ``plan`` with work (steps, or a run in ``resume``) with ``run``,
    on ``workers`` workers, in order; their outcomes, in the plan's order.

    Interrupted (Ctrl-C), it calls ``interrupt`` (the runs' waits end at once, their records
    left at their steps for the next apply to resume), starts nothing more, and returns only
    once the runs in flight stopped (at most ``STOP_GRACE_S``): whoever holds the Lease for
    them releases it after their last mutation."""
    ended: queue.SimpleQueue[tuple[ObjectKey, WorkloadOutcome | None]] = queue.SimpleQueue()
    fleet = Fleet(workers, lambda key, _flight, outcome: ended.put((key, outcome)))
    errors: list[Exception] = []
    outcomes: dict[ObjectKey, WorkloadOutcome] = {}
    stopped: dict[ObjectKey, str] = {}  # the failed or superseded: why later ones are skipped

    def guarded(wp: WorkloadPlan) -> Callable[[], WorkloadOutcome]:
        def go() -> WorkloadOutcome:
            try:
                outcome = run(wp)
                if outcome.outcome is Outcome.WAITING:  # the fleet would park it: none ends it
                    raise RuntimeError(f"the run of {wp.key} parked at a wait in the "
                                       "foreground (its executor must hold waits)")
                return outcome
            except Exception as e:  # raised again below, once the runs in flight ended
                errors.append(e)
                return WorkloadOutcome(wp.key, Outcome.FAILED, str(e), 0, len(wp.steps))
        return go

    def left() -> Plan:  # (the failed stay: ``dispatchable`` starts nothing after them)
        return replace(plan, workloads=tuple(w for w in plan.workloads
                                             if w.key not in outcomes or w.key in stopped))

    # The runs started whose outcomes have not been taken from ``ended`` yet. (Not the fleet's
    # in-flight runs: a run leaves those before its outcome is queued, and a run that ended at
    # once would be neither counted nor started again.)
    running: set[ObjectKey] = set()
    try:
        while True:
            if not errors:
                for wp in dispatchable(left(), running, stopped, resume):
                    running.add(wp.key)  # (first: a Ctrl-C may land as it starts)
                    if not fleet.dispatch(wp, plan.revision, "apply", guarded(wp)):
                        running.discard(wp.key)
            if not running:
                break
            key, outcome = _next(ended)
            assert outcome is not None  # ``guarded`` always returns one
            running.discard(key)
            outcomes[key] = outcome
            if outcome.outcome in _STOPPING:
                stopped[key] = _STOPPING[outcome.outcome]
    except BaseException:
        interrupt()
        fleet.stop()
        until = time.monotonic() + STOP_GRACE_S
        while running and time.monotonic() < until:
            with contextlib.suppress(queue.Empty):
                running.discard(ended.get(timeout=0.5)[0])
        raise
    finally:
        fleet.shutdown()
    if errors:
        raise errors[0]
    return _in_plan_order(plan, outcomes, stopped, resume)


def _next(ended: queue.SimpleQueue[tuple[ObjectKey, WorkloadOutcome | None]]
          ) -> tuple[ObjectKey, WorkloadOutcome | None]:
    """The next run to end. (A wait with no timeout would hold off Ctrl-C until it ends.)"""
    while True:
        try:
            return ended.get(timeout=0.5)
        except queue.Empty:
            continue


def _in_plan_order(plan: Plan, outcomes: dict[ObjectKey, WorkloadOutcome],
                   stopped: dict[ObjectKey, str],
                   resume: Collection[ObjectKey]) -> list[WorkloadOutcome]:
    """The outcomes in the plan's order (waves, supporting objects first), and for each
    workload with work that never started, ``SKIPPED`` with the first wave that stopped it."""
    waves = {w.key: w.wave for w in plan.workloads}
    first = min(stopped, key=lambda k: (waves.get(k, 0), str(k)), default=None)
    why = (f"wave {waves.get(first, 0)} {stopped[first]}" if first is not None
           else "not started")
    result: list[WorkloadOutcome] = []
    for w in sorted(plan.workloads, key=order_of):
        if w.key in outcomes:
            result.append(outcomes[w.key])
        elif w.steps or w.key in resume:
            result.append(WorkloadOutcome(w.key, Outcome.SKIPPED, why, 0, len(w.steps)))
    return result
