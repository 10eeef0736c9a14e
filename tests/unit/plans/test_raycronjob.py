"""RayCronJob (KubeRay v1.6+): validated against its CRD, synced as a definition KubeRay
schedules: created, updated in place and pruned like any applied object, never run by gitray."""

from __future__ import annotations

from typing import Any

import pytest

from gitray.core.model import LiveState, ObjectKey, Workload
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.plans.load import load_snapshot
from gitray.plans.plan import Action
from gitray.plans.planner import compute_plan
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, configmap, live, raycronjob, rayjob

CRONJOB = """\
apiVersion: ray.io/v1
kind: RayCronJob
metadata:
  name: nightly
  namespace: ray
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    entrypoint: python /code/job.py
    shutdownAfterJobFinishes: true
    rayClusterSpec:
      headGroupSpec:
        rayStartParams: {}
        template:
          spec:
            containers:
              - name: ray-head
                image: rayproject/ray:2.60.0
"""


def load(text: str) -> list[str]:
    result = load_snapshot(Snapshot("worktree", "t", (RepoFile("cron.yaml", text.encode()),)))
    return [str(d) for d in result.diagnostics]


def test_a_raycronjob_validates_against_its_crd() -> None:
    assert load(CRONJOB) == []


@pytest.mark.parametrize(("old", "new", "expected"), [
    ('  schedule: "0 3 * * *"\n', "", "cron.yaml:6:1: spec: 'schedule' is a required property"),
    ('  schedule: "0 3 * * *"\n', "  schedule: 3\n",
     "cron.yaml:7:3: spec.schedule: 3 is not of type 'string'"),
    ("    entrypoint: python /code/job.py\n", "    entrypoint: python /code/job.py\n"
     "    entrypiont: typo\n",
     "cron.yaml:10:5: spec.jobTemplate.entrypiont: unknown field 'entrypiont' (did you mean "
     "'entrypoint'?)"),
], ids=["no schedule", "schedule not a string", "unknown field in the job template"])
def test_a_bad_raycronjob_is_reported_at_its_line(old: str, new: str, expected: str) -> None:
    assert expected in load(CRONJOB.replace(old, new))


def plan_for(desired: tuple[Workload, ...], state: LiveState) -> dict[ObjectKey, Any]:
    plan = compute_plan(desired, state, CONFIG, revision="r", against="live", now=NOW)
    return {w.key: w for w in plan.workloads}


@pytest.mark.parametrize(("situation", "desired", "state", "action", "steps"), [
    ("a new RayCronJob is applied", (raycronjob(),), LiveState(), Action.CREATE,
     [StepType.APPLY_OBJECT]),
    ("an unchanged RayCronJob is left alone", (raycronjob(),), live(raycronjob()), Action.NOOP,
     []),
    ("a new schedule updates it in place", (raycronjob(schedule="*/5 * * * *"),),
     live(raycronjob()), Action.UPDATE, [StepType.APPLY_OBJECT]),
    ("a RayCronJob removed from Git is pruned", (configmap(),), live(configmap(), raycronjob()),
     Action.DELETE, [StepType.DELETE_OBJECT]),
])
def test_raycronjob_plans(situation: str, desired: tuple[Workload, ...], state: LiveState,
                          action: Action, steps: list[StepType]) -> None:
    found = plan_for(desired, state)[raycronjob().key]
    assert found.action is action
    assert [s.type for s in found.steps] == steps
    if steps:
        assert all(s.target == "nightly" for s in found.steps)
    if steps == [StepType.APPLY_OBJECT]:
        manifest = found.steps[0].params["manifest"]
        assert manifest["kind"] == "RayCronJob" and manifest["spec"]["schedule"] in {
            "0 3 * * *", "*/5 * * * *"}
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gitray"


def test_a_raycronjob_comes_after_the_jobs_and_is_pruned_before_them() -> None:
    plan = compute_plan((raycronjob(), rayjob(), configmap()), LiveState(), CONFIG, revision="r",
                        against="live", now=NOW)
    assert [w.key.kind for w in plan.workloads] == ["ConfigMap", "RayJob", "RayCronJob"]
    state = live(raycronjob(), configmap(), rayjob())
    pruning = compute_plan((configmap(name="other"),), state, CONFIG, revision="r",
                           against="live", now=NOW)
    removed = [w.key.kind for w in pruning.workloads if w.action is Action.DELETE]
    assert removed == ["RayCronJob", "RayJob", "ConfigMap"]
