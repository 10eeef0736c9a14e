"""A run resumed from its record is its commit's run, whatever pass resumes it.

Seen in a clean-clone run of test_monitoring.py: the daemon stepped down mid-upgrade (its
renew deadline passed on a machine 95 % busy), took its Lease back a second later and resumed
the upgrade at step 11/19. The commit had been attempted already, so that pass was a ``drift``
pass, and the upgrade's end was announced as ``drift-healed`` (and counted as healed drift)
instead of ``converged``: the commit's upgrade was never announced. ``run_trigger`` gives such
a run the trigger ``resume``; a resumed run that only deletes old clusters stays housekeeping.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.core.notices import EventKind
from gitray.daemon.dispatch import RESUMED, Dispatcher, run_trigger
from gitray.engine.executor import Outcome, WorkloadOutcome
from gitray.engine.fleet import Fleet, Flight
from gitray.engine.notices import outcome_notices
from gitray.engine.record import Record, RunState
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

SHA = "c" * 40
OLDER = "b" * 40
SVC = ObjectKey("RayService", "team-a", "svc")
OTHER = ObjectKey("RayCluster", "team-b", "drifted")
UPGRADE = (Step("s1", StepType.CREATE_CLUSTER, "svc-new", {}),
           Step("s2", StepType.WAIT_SERVE_RUNNING, "svc-new", {}),
           Step("s3", StepType.DELETE_CLUSTER, "svc-old", {}))
CLEANUP = (Step("d1", StepType.DELETE_CLUSTER, "svc-old", {}),)


def _record(steps: tuple[Step, ...], revision: str = SHA, key: ObjectKey = SVC) -> Record:
    return Record(key=key, revision=revision, desired_hash="h",
                  plan=WorkloadPlan(key, Action.UPDATE, 0, steps, desired_hash="h"),
                  cursor=1, steps=(), state=RunState.RUNNING, reason="", epoch=1,
                  updated_at="")


@pytest.mark.parametrize(("trigger", "steps", "expected"), [
    # a pass that gives no verdict resumes an upgrade: the commit's run
    ("drift", UPGRADE, RESUMED),
    ("deletions", UPGRADE, RESUMED),
    # a resumed run that only deletes old clusters: housekeeping, as a deletions pass's own
    ("drift", CLEANUP, "deletions"),
    ("deletions", CLEANUP, "deletions"),
    # a verdict pass's trigger stands (an older commit's verdict depends on it)
    ("commit", UPGRADE, "commit"),
    ("retry", UPGRADE, "retry"),
    ("run", CLEANUP, "run"),
])
def test_the_trigger_of_a_resumed_run(trigger: str, steps: tuple[Step, ...],
                                      expected: str) -> None:
    assert run_trigger(trigger, _record(steps)) == expected


@pytest.mark.parametrize("trigger", ["commit", "retry", "run", "drift", "deletions"])
def test_a_run_not_resumed_keeps_the_pass_trigger(trigger: str) -> None:
    assert run_trigger(trigger, None) == trigger


class _Executor:
    unparked: frozenset[ObjectKey] = frozenset()

    def run_workload(self, wp: WorkloadPlan, revision: str, resume: Any = None
                     ) -> WorkloadOutcome:
        steps = resume.plan.steps if resume is not None else wp.steps
        return WorkloadOutcome(wp.key, Outcome.SUCCEEDED, "", len(steps), len(steps))


def _ended_flights(trigger: str, plan: Plan, resume: dict[ObjectKey, Record]
                   ) -> dict[ObjectKey, tuple[Flight, WorkloadOutcome]]:
    ended: dict[ObjectKey, tuple[Flight, WorkloadOutcome]] = {}
    done = threading.Event()

    def on_end(key: ObjectKey, flight: Flight, outcome: WorkloadOutcome | None) -> None:
        assert outcome is not None
        ended[key] = (flight, outcome)
        if len(ended) == len(plan.workloads):
            done.set()

    fleet = Fleet(2, on_end)
    try:
        dispatcher = Dispatcher(fleet, None, lambda *_: None,  # type: ignore[arg-type]
                                lambda *_: _Executor())  # type: ignore[arg-type,return-value]
        started = dispatcher(SHA, trigger, None, plan, resume, {}, [],  # type: ignore[arg-type]
                             lambda *_: None)
        assert {w.key for w in started} == {w.key for w in plan.workloads}
        assert done.wait(10)
    finally:
        fleet.shutdown()
    return ended


def test_a_drift_pass_that_resumes_an_upgrade_announces_it_converged() -> None:
    """The Lease taken back mid-upgrade: the next pass is a drift pass. It resumes the
    upgrade from its record (at its older commit) and heals another workload's drift."""
    plan = Plan(SHA, "live", workloads=(
        WorkloadPlan(SVC, Action.UPDATE, 0, UPGRADE, desired_hash="h"),
        WorkloadPlan(OTHER, Action.UPDATE, 0, (Step("p1", StepType.APPLY_OBJECT, "drifted",
                                                    {}),), desired_hash="h2")))
    ended = _ended_flights("drift", plan, {SVC: _record(UPGRADE, revision=OLDER)})

    resumed, healed = ended[SVC], ended[OTHER]
    assert (resumed[0].trigger, resumed[0].sha) == (RESUMED, OLDER)  # its record's commit
    assert (healed[0].trigger, healed[0].sha) == ("drift", SHA)
    notices = [outcome_notices(flight.sha, flight.trigger, [outcome])
               for flight, outcome in (resumed, healed)]
    assert [[(n.event, n.workload, n.revision) for n in group] for group in notices] == [
        [(EventKind.CONVERGED, SVC, OLDER)], [(EventKind.DRIFT_HEALED, OTHER, SHA)]]
    assert notices[0][0].summary == f"RayService team-a/svc: converged at {OLDER[:7]}"


def test_a_deletions_pass_that_resumes_an_interrupted_cleanup_says_nothing() -> None:
    plan = Plan(SHA, "live", workloads=(
        WorkloadPlan(SVC, Action.UPDATE, 0, CLEANUP, desired_hash="h"),))
    ended = _ended_flights("deletions", plan, {SVC: _record(CLEANUP)})
    flight, outcome = ended[SVC]
    assert flight.trigger == "deletions"
    assert outcome_notices(flight.sha, flight.trigger, [outcome]) == []
