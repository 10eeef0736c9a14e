"""A run that failed at this revision stands (``gitray.plans.filters.skip_failed``): its
workload's steps are left out and its key returned, so the commit is not said in sync and the
waves after it do not start. A workload whose failed run left nothing to do (a RayJob whose
job ran and failed: its object is what Git says) counts too: before, a later pass of the same
commit found nothing to do and posted "success, in sync" over the failure (seen in a
clean-clone run: `test_health_notices.py`'s failed RayJob was said failed for 0.19 s)."""

from __future__ import annotations

from gitray.core.model import ObjectKey
from gitray.plans.filters import in_sync, skip_failed
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

JOB = ObjectKey("RayJob", "team-a", "broken")
SVC = ObjectKey("RayService", "team-a", "web")
STEP = Step("s1", StepType.CREATE_JOB, "broken-1")


def plan(*workloads: WorkloadPlan) -> Plan:
    return Plan("c0ffee", "live", workloads=workloads)


def test_a_failed_run_with_steps_left_is_left_out_and_stands() -> None:
    skipped, keys = skip_failed(plan(WorkloadPlan(JOB, Action.UPDATE, 0, (STEP,),
                                                  desired_hash="h1")), {JOB: "h1"})
    assert keys == [JOB]
    assert skipped.workloads[0].steps == ()


def test_a_failed_run_that_left_nothing_to_do_stands_too() -> None:
    _, keys = skip_failed(plan(WorkloadPlan(JOB, Action.NOOP, 0, desired_hash="h1"),
                               WorkloadPlan(SVC, Action.NOOP, 1, desired_hash="h9")),
                          {JOB: "h1"})
    assert keys == [JOB]


def test_a_failure_for_another_spec_or_no_failure_does_not_stand() -> None:
    wp = WorkloadPlan(JOB, Action.UPDATE, 0, (STEP,), desired_hash="h2")
    skipped, keys = skip_failed(plan(wp), {JOB: "h1"})  # (Git changed the spec since)
    assert keys == [] and skipped.workloads == (wp,)
    assert skip_failed(plan(wp), {}) == (plan(wp), [])


# ---- in_sync: what a pass leaves in sync at its commit (the health watch's while it waits) ----

JOB2 = ObjectKey("RayJob", "team-a", "nightly")
CM = ObjectKey("ConfigMap", "team-a", "settings")


def test_in_sync_is_what_has_no_steps_and_is_not_set_aside() -> None:
    """A workload whose steps a filter took out (failed at this commit, held back, paused) or
    whose run goes on has no steps in the plan, and is not in sync for all that."""
    p = plan(WorkloadPlan(JOB, Action.UPDATE, 0, (STEP,)),  # to change: not in sync
             WorkloadPlan(SVC, Action.NOOP, 0),  # in sync
             WorkloadPlan(JOB2, Action.NOOP, 0),  # its run goes on
             WorkloadPlan(CM, Action.NOOP, 0))  # failed at this commit (steps taken out)
    assert in_sync(p) == {SVC, JOB2, CM}
    assert in_sync(p, {JOB2: None}, [CM]) == {SVC}
    assert in_sync(p, [], (), {SVC, JOB2, CM}) == frozenset()
    assert in_sync(plan()) == frozenset()
