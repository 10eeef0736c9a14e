"""Blue-green RayService upgrades (``upgradeStrategy.type: NewCluster``) with gates: plans.

A ``gitray.io/analysis`` annotation puts an analysis of the new cluster before the switch
(through its own serve Service), an approval gate before the switch, and the analysis again
after it while the old cluster still exists (``gitray.plans.rayservice.bluegreen``). Inputs
are plain planner values (tests/unit/builders.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from gitray.core.model import ObjectKey, Workload
from gitray.plans.names import service_cluster_name
from gitray.plans.plan import Action, plan_from_json
from gitray.plans.render import Format, render
from gitray.plans.steptypes import StepType, describe_step
from tests.unit.builders import live, rayservice
from tests.unit.plans.test_plan_incremental import one, plan_of

T = StepType
KEY = ObjectKey("RayService", "ray", "svc")
SCHEMA = json.loads((Path(__file__).parents[3] / "schemas" / "plan.schema.json").read_text())
GATES = """\
checks:
  - {type: serve-health}
  - {type: success-rate, min: 99, minRequests: 10}
  - {type: latency, percentile: 90, maxMs: 500}
probe: {path: /hello, requests: 40}
window: 1m
failureLimit: 2
"""


def blue_green(image: str, analysis: str | None = None) -> Workload:
    w = rayservice(image=image)
    if analysis is None:
        return w
    manifest = copy.deepcopy(dict(w.manifest))
    manifest["metadata"]["annotations"] = {"gitray.io/analysis": analysis}
    return Workload(w.key, w.api_version, manifest, w.source, w.wave)


OLD = blue_green("ray:old")
A = service_cluster_name("svc", OLD.spec["rayClusterConfig"])
B = service_cluster_name("svc", blue_green("ray:new").spec["rayClusterConfig"])


def shape(analysis: str | None) -> list[tuple[StepType, str, str | None]]:
    plan = one(plan_of(blue_green("ray:new", analysis), live(OLD)))
    return [(s.type, s.target, s.params.get("gate")) for s in plan.steps]


BUILD = [(T.CREATE_CLUSTER, B, None), (T.WAIT_CLUSTER_READY, B, None),
         (T.DEPLOY_SERVE, B, None), (T.WAIT_SERVE_RUNNING, B, None)]
SWITCH = [(T.SWITCH_SERVICE, "svc-head-svc", None), (T.SWITCH_SERVICE, "svc-serve-svc", None)]


def test_without_an_annotation_the_upgrade_is_the_plain_switch() -> None:
    assert shape(None) == [*BUILD, *SWITCH, (T.SCHEDULE_CLUSTER_DELETION, A, None)]


def test_checks_gate_the_switch_before_and_after() -> None:
    assert shape(GATES) == [
        *BUILD, (T.APPLY_OBJECT, f"{B}-serve-svc", None), (T.RUN_ANALYSIS, B, "before-switch"),
        *SWITCH, (T.RUN_ANALYSIS, B, "after-switch"), (T.SCHEDULE_CLUSTER_DELETION, A, None)]


def test_approve_holds_the_switch_after_the_analysis() -> None:
    assert shape(GATES + "approve: true\n") == [
        *BUILD, (T.APPLY_OBJECT, f"{B}-serve-svc", None), (T.RUN_ANALYSIS, B, "before-switch"),
        (T.AWAIT_APPROVAL, B, None), *SWITCH, (T.RUN_ANALYSIS, B, "after-switch"),
        (T.SCHEDULE_CLUSTER_DELETION, A, None)]


def test_approve_alone_adds_only_the_gate() -> None:
    assert shape("approve: true") == [*BUILD, (T.AWAIT_APPROVAL, B, None), *SWITCH,
                                      (T.SCHEDULE_CLUSTER_DELETION, A, None)]


def gate(analysis: str, which: str) -> dict[str, object]:
    plan = one(plan_of(blue_green("ray:new", analysis), live(OLD)))
    return dict(next(s for s in plan.steps if s.params.get("gate") == which).params)


def test_the_gates_analyse_the_new_cluster_through_its_own_serve_service() -> None:
    before = gate(GATES, "before-switch")
    assert before == {
        "cluster": B, "previous": A, "percent": 0, "gate": "before-switch",
        "windowSeconds": 60, "failureLimit": 2,
        "checks": [{"name": "serve-health", "type": "serve-health"},
                   {"name": "success-rate", "type": "success-rate", "min": 99,
                    "minRequests": 10},
                   {"name": "latency", "type": "latency", "percentile": 90, "maxMs": 500,
                    "minRequests": 10}],
        "backend": {"namespace": "ray", "service": f"{B}-serve-svc", "port": 8000},
        "probe": {"path": "/hello", "requests": 40, "port": 8000},
        "onFailure": {"trafficTo": A, "keepFailedCluster": False}}
    after = gate(GATES + "keepFailedClusters: true\n", "after-switch")
    assert (after["percent"], after["onFailure"]) == (
        100, {"trafficTo": A, "keepFailedCluster": True, "switchBack": True})


def test_the_own_serve_service_selects_the_new_clusters_healthy_serve_pods() -> None:
    plan = one(plan_of(blue_green("ray:new", GATES), live(OLD)))
    svc = next(s for s in plan.steps if s.type is T.APPLY_OBJECT)
    assert svc.params["gateServe"] == B
    assert svc.params["manifest"]["spec"]["selector"] == {
        "ray.io/cluster": B, "gitray.io/serve": "true"}


def test_the_approval_gate_names_its_command() -> None:
    plan = one(plan_of(blue_green("ray:new", "approve: true"), live(OLD)))
    step = next(s for s in plan.steps if s.type is T.AWAIT_APPROVAL)
    assert step.params == {"cluster": B, "previous": A,
                           "approve": "gitray approve ray/RayService/svc"}
    assert describe_step(step) == (f"hold before switching to {B} until `gitray approve "
                                   f"ray/RayService/svc` ({A} serves meanwhile)")


def test_the_plan_shows_the_gates_and_says_so_in_its_notes() -> None:
    plan = plan_of(blue_green("ray:new", GATES + "approve: true\n"), live(OLD))
    text = render(plan, Format.TEXT)
    assert "await-approval" in text or "gitray approve ray/RayService/svc" in text, text
    assert "before the switch" in text and "after the switch" in text, text
    assert one(plan).notes[-1] == (f"blue-green upgrade: {A} -> {B} (analysed before and "
                                   "after the switch, approved by hand)")
    assert one(plan).action is Action.REPLACE


@pytest.mark.parametrize("analysis", [GATES, GATES + "approve: true\n", "approve: true",
                                      "checks: [{type: serve-health}]"])
def test_gated_plans_fit_the_plan_schema_and_read_back(analysis: str) -> None:
    plan = plan_of(blue_green("ray:new", analysis), live(OLD))
    document = json.loads(render(plan, Format.JSON))
    jsonschema.validate(document, SCHEMA)
    assert plan_from_json(document) == plan


def test_a_gated_service_without_a_change_has_nothing_to_do() -> None:
    same = blue_green("ray:old", GATES + "approve: true\n")
    assert one(plan_of(same, live(OLD))).steps == ()


def test_a_first_rollout_is_not_gated() -> None:
    from gitray.core.model import LiveState
    types = {s.type for s in one(plan_of(blue_green("ray:new", GATES + "approve: true\n"),
                                         LiveState())).steps}
    assert not types & {T.RUN_ANALYSIS, T.AWAIT_APPROVAL}
