"""A Ray workload's identity includes what its pods use: the ConfigMaps and Secrets of the same
revision it mounts or references (gitray.plans.inputs)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from gitray.core.config import Config
from gitray.core.model import LiveState, Workload
from gitray.plans.inputs import ANN_INPUTS, references
from gitray.plans.plan import Action, Plan
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.plans.steptypes import StepType
from tests.unit.builders import NOW, configmap, live, raycluster, rayjob, rayservice

CONFIG = Config(supporting_kinds=("ConfigMap", "Secret"))
SCRIPT_V1 = {"job.py": "print('pi is about 3.1')"}
SCRIPT_V2 = {"job.py": "print('pi is about 3.14159')"}
MOUNT = {"volumes": [{"name": "code", "configMap": {"name": "code"}}]}


def mounting(w: Workload, volumes: dict[str, Any] | None = None) -> Workload:
    """``w`` whose head pod template mounts ConfigMap ``code`` (or ``volumes``)."""
    manifest = copy.deepcopy(dict(w.manifest))
    spec = manifest["spec"]
    cluster = spec.get("rayClusterConfig") or spec.get("rayClusterSpec") or spec
    cluster["headGroupSpec"]["template"]["spec"].update(volumes or MOUNT)
    return replace(w, manifest=manifest)


def plan(desired: tuple[Workload, ...], before: tuple[Workload, ...]) -> Plan:
    return compute_plan(desired, live(*before, config=CONFIG), CONFIG, revision="b" * 40,
                        against="live", now=NOW)


def steps(p: Plan, kind: str) -> list[StepType]:
    return [s.type for w in p.workloads if w.key.kind == kind for s in w.steps]


JOB, SERVICE, CLUSTER = mounting(rayjob()), mounting(rayservice()), mounting(raycluster())
V1, V2 = configmap(data=SCRIPT_V1), configmap(data=SCRIPT_V2)
OTHER_V1 = configmap(name="other", data={"a": "1"})
OTHER_V2 = configmap(name="other", data={"a": "2"})

# situation -> (workload, configmaps before, configmaps now, expected steps, action)
CASES: dict[str, tuple[Workload, tuple[Workload, ...], tuple[Workload, ...],
                       list[StepType], Action]] = {
    "the RayJob's script changed: a new run": (
        JOB, (V1,), (V2,), [StepType.CREATE_JOB, StepType.WAIT_JOB], Action.CREATE),
    "the RayJob's script is the same: its finished run stays done": (
        JOB, (V1,), (V1,), [], Action.NOOP),
    "a ConfigMap the RayJob does not use changed: the same run": (
        JOB, (V1, OTHER_V1), (V1, OTHER_V2), [], Action.NOOP),
    "a RayService's mounted ConfigMap changed: a new cluster (blue-green)": (
        SERVICE, (V1,), (V2,),
        [StepType.CREATE_CLUSTER, StepType.WAIT_CLUSTER_READY, StepType.DEPLOY_SERVE,
         StepType.WAIT_SERVE_RUNNING, StepType.SWITCH_SERVICE, StepType.SWITCH_SERVICE,
         StepType.SCHEDULE_CLUSTER_DELETION], Action.REPLACE),
    "a RayCluster's mounted ConfigMap changed: its pod template changed": (
        CLUSTER, (V1,), (V2,), [StepType.UPDATE_CLUSTER], Action.UPDATE),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_the_pods_use_is_part_of_the_spec(case: str) -> None:
    workload, before, now, expected, action = CASES[case]
    p = plan((workload, *now), (workload, *before))
    wp = next(w for w in p.workloads if w.key == workload.key)
    assert [s.type for s in wp.steps] == expected
    assert wp.action is action
    text = render(p, Format.TEXT)
    assert ANN_INPUTS not in text  # the digests are never shown
    if expected:
        assert "because ConfigMap code, which its pods use, changed" in text


def test_a_new_run_says_the_spec_changed_when_the_script_did_not() -> None:
    changed = replace(JOB, manifest={**JOB.manifest,
                                     "spec": {**JOB.spec, "entrypoint": "python other.py"}})
    p = plan((changed, V1), (JOB, V1))
    assert "note: a new run because the spec changed" in render(p, Format.TEXT)


def test_objects_the_revision_does_not_define_are_not_followed() -> None:
    p = plan((JOB,), (JOB,))
    assert steps(p, "RayJob") == []


def test_a_first_rollout_of_the_job_and_its_script_is_one_run_previewed_stably() -> None:
    first = compute_plan((JOB, V1), LiveState(), CONFIG, revision="a" * 40, against="empty",
                         now=NOW)
    again = compute_plan((JOB, V1), live(JOB, V1, config=CONFIG), CONFIG, revision="a" * 40,
                         against="revision:" + "a" * 40, now=NOW, exact=True)
    assert steps(first, "RayJob") == [StepType.CREATE_JOB, StepType.WAIT_JOB]
    assert not again.has_changes


@pytest.mark.parametrize(("pod_spec", "expected"), [
    (MOUNT, {("ConfigMap", "code")}),
    ({"volumes": [{"name": "s", "secret": {"secretName": "db"}}]}, {("Secret", "db")}),
    ({"volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "a"}}, {"secret": {"name": "b"}}]}}]},
     {("ConfigMap", "a"), ("Secret", "b")}),
    ({"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "env"}},
                                               {"secretRef": {"name": "creds"}}]}]},
     {("ConfigMap", "env"), ("Secret", "creds")}),
    ({"containers": [{"name": "c", "env": [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "key", "key": "b"}}}]}]},
     {("ConfigMap", "cfg"), ("Secret", "key")}),
], ids=["volume configMap", "volume secret", "projected sources", "envFrom",
        "env valueFrom"])
def test_references_of_a_pod_template(pod_spec: dict[str, Any],
                                      expected: set[tuple[str, str]]) -> None:
    assert references({"template": {"spec": pod_spec}}) == expected


def test_a_submitter_pod_template_counts_too() -> None:
    job = rayjob()
    spec = {**job.spec, "submitterPodTemplate": {"spec": {"containers": [
        {"name": "s", "envFrom": [{"configMapRef": {"name": "code"}}]}]}}}
    job = replace(job, manifest={**job.manifest, "spec": spec})
    p = plan((job, V2), (job, V1))
    assert steps(p, "RayJob") == [StepType.CREATE_JOB, StepType.WAIT_JOB]


def test_under_upgrade_strategy_none_the_refusal_names_the_configmap_not_its_digest() -> None:
    from gitray.core.errors import ValidationError

    svc = mounting(rayservice(upgrade="None"))
    with pytest.raises(ValidationError) as e:
        plan((svc, V2), (svc, V1))
    (message,) = [d.message for d in e.value.diagnostics]
    assert "a change of ConfigMap code (which its pods use) cannot be applied in place" \
        in message
    assert ANN_INPUTS not in message and "=" not in message
