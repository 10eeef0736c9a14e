"""Runs that delete themselves stay done: gitray remembers the RayJob runs it started (in the
workload's run record) and the planner takes them as an input."""

from __future__ import annotations

import pytest

from gitray.core.model import LiveState, ObjectKey
from gitray.engine.record import (
    Record,
    RunOutcome,
    RunState,
    record_from_json,
    record_to_json,
    remember_run,
    remembered_runs,
)
from gitray.plans.manifests import job_manifest
from gitray.plans.plan import Action, WorkloadPlan
from gitray.plans.planner import compute_plan
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, rayjob

JOB = rayjob()
RUN = job_manifest(JOB, CONFIG.instance)["metadata"]["name"]
CHANGED = rayjob(entrypoint="python /code/other.py")

# situation -> (desired, runs gitray remembers, expected steps)
CASES = {
    "a remembered run KubeRay deleted is not started again": (
        JOB, {RUN: "run finished: SUCCEEDED (then KubeRay deleted it)"}, []),
    "a remembered failed run KubeRay deleted is not started again": (
        JOB, {RUN: "run failed: the entrypoint exited with 1"}, []),
    "a run gitray never started is started": (
        JOB, {}, [StepType.CREATE_JOB, StepType.WAIT_JOB]),
    "a changed spec is a new run, whatever was remembered": (
        CHANGED, {RUN: "run finished: SUCCEEDED"}, [StepType.CREATE_JOB, StepType.WAIT_JOB]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_planner_remembers_the_runs_gitray_started(case: str) -> None:
    desired, remembered, expected = CASES[case]
    plan = compute_plan((desired,), LiveState(), CONFIG, revision="a" * 40, against="live",
                        now=NOW, remembered={desired.key: remembered})
    wp = plan.workloads[0]
    assert [s.type for s in wp.steps] == expected
    if not expected:
        assert wp.action is Action.NOOP
        assert any("recorded outcome" in n and "not run again" in n for n in wp.notes)


STARTED = (RunOutcome("job-a", "started"),)
# (runs before, step type, target, status, message) -> runs after
REMEMBER = {
    "create-job starts a run": ((), "create-job", "job-a", "ok", "created", STARTED),
    "a failed create-job started nothing": ((), "create-job", "job-a", "failed", "x", ()),
    "wait-job records how it ended": (STARTED, "wait-job", "job-a", "ok",
                                      "run job-a finished: SUCCEEDED",
                                      (RunOutcome("job-a", "run job-a finished: SUCCEEDED"),)),
    "a failed wait-job records the failure": (STARTED, "wait-job", "job-a", "failed",
                                              "run job-a failed: boom",
                                              (RunOutcome("job-a", "run job-a failed: boom"),)),
    "other steps change nothing": (STARTED, "delete-job", "job-a", "ok", "deleted", STARTED),
}


@pytest.mark.parametrize("case", list(REMEMBER))
def test_which_steps_are_remembered(case: str) -> None:
    before, step_type, target, status, message, after = REMEMBER[case]
    assert remember_run(before, step_type, target, status, message) == after


def test_only_the_newest_runs_are_kept() -> None:
    runs: tuple[RunOutcome, ...] = ()
    for i in range(30):
        runs = remember_run(runs, "create-job", f"job-{i}", "ok", "")
    assert [r.name for r in runs] == [f"job-{i}" for i in range(10, 30)]


def test_a_record_keeps_its_runs_through_its_json_form() -> None:
    key = ObjectKey("RayJob", "ray", "job")
    record = Record(key=key, revision="a" * 40, desired_hash="h", plan=WorkloadPlan(
        key, Action.NOOP, 0), cursor=0, steps=(), state=RunState.SUCCEEDED, reason="",
        epoch=1, updated_at="", runs=(RunOutcome("job-a", "run job-a finished: SUCCEEDED"),))
    again = record_from_json(record_to_json(record))
    assert again == record
    assert remembered_runs([again]) == {key: {"job-a": "run job-a finished: SUCCEEDED"}}
    assert "runs" not in record_to_json(Record(**{**record.__dict__, "runs": ()}))
