"""A RayCluster change says what KubeRay will really do with the running pods (README table
"RayCluster changes"): replicas and autoscaling bounds in place; a pod-template change
recreates the pods under ``upgradeStrategy: Recreate``, else one warning line says the running
pods keep the old template."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gitray.core.model import ANN_TEMPLATE_HASH, LiveObject, LiveState, Workload
from gitray.plans.plan import Action, Plan
from gitray.plans.planner import compute_plan
from gitray.plans.raycluster import TEMPLATE_WARNING
from gitray.plans.render import Format, render
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, live, raycluster

IN_PLACE, RECREATE, WARN = "in place", "recreate", "warning"


def cluster(recreate: bool = False, **kw: Any) -> Workload:
    w = raycluster(**kw)
    if recreate:
        manifest = copy.deepcopy(dict(w.manifest))
        manifest["spec"]["upgradeStrategy"] = {"type": "Recreate"}
        return Workload(w.key, w.api_version, manifest, w.source, w.wave)
    return w


def with_tolerations(w: Workload) -> Workload:
    manifest = copy.deepcopy(dict(w.manifest))
    manifest["spec"]["headGroupSpec"]["template"]["spec"]["tolerations"] = [
        {"key": "gpu", "operator": "Exists"}]
    return Workload(w.key, w.api_version, manifest, w.source, w.wave)


def plan(desired: Workload, before: Workload, exact: bool = False) -> Plan:
    return compute_plan((desired,), live(before), CONFIG, revision="b" * 40,
                        against="live", now=NOW, exact=exact)


# situation -> (desired, live as gitray applied it, what happens)
CASES: dict[str, tuple[Workload, Workload, str]] = {
    "worker replicas change in place": (cluster(replicas=3), cluster(), IN_PLACE),
    "autoscaling bounds change in place": (
        cluster(autoscaling=True, max_replicas=9), cluster(autoscaling=True), IN_PLACE),
    "an image change without upgradeStrategy warns that running pods keep the old one": (
        cluster(image="ray:new"), cluster(image="ray:old"), WARN),
    "an image change under upgradeStrategy Recreate recreates the pods": (
        cluster(image="ray:new", recreate=True), cluster(image="ray:old", recreate=True),
        RECREATE),
    "turning in-tree autoscaling on is a template change": (
        cluster(autoscaling=True), cluster(), WARN),
    "tolerations alone never recreate pods (KubeRay leaves them out of its hash)": (
        with_tolerations(cluster(recreate=True)), cluster(recreate=True), IN_PLACE),
    "setting upgradeStrategy alone changes no pod": (cluster(recreate=True), cluster(), IN_PLACE),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_raycluster_change_says_what_happens_to_running_pods(case: str) -> None:
    desired, before, outcome = CASES[case]
    p = plan(desired, before)
    wp = p.workloads[0]
    assert [s.type for s in wp.steps] == [StepType.UPDATE_CLUSTER]
    assert wp.action is Action.UPDATE
    text = render(p, Format.TEXT)
    warnings = [line for line in text.splitlines() if "WARNING" in line]
    assert len(warnings) == (1 if outcome == WARN else 0)
    if outcome == WARN:
        assert TEMPLATE_WARNING in warnings[0] and "upgradeStrategy.type: Recreate" in text
    assert bool(wp.steps[0].params.get("recreatePods")) is (outcome == RECREATE)
    if outcome == RECREATE:
        assert "KubeRay recreates all its pods" in text
    if outcome == IN_PLACE:
        assert "update RayCluster cl in place" in text


def test_a_cluster_applied_before_the_template_hash_compares_its_live_template() -> None:
    old = live(cluster(image="ray:old")).objects[0]
    annotations = {k: v for k, v in old.annotations.items() if k != ANN_TEMPLATE_HASH}
    body = {**old.body, "metadata": {**old.metadata, "annotations": annotations}}
    state = LiveState((LiveObject(old.kind, old.namespace, old.name, "", body),))
    for desired, warned in ((cluster(image="ray:new"), True),
                            (cluster(image="ray:old", replicas=5), False)):
        p = compute_plan((desired,), state, CONFIG, revision="b" * 40, against="live", now=NOW)
        assert ("WARNING" in render(p, Format.TEXT)) is warned
