"""RayService ``upgradeStrategy.type: NewClusterWithIncrementalUpgrade``: plans.

An upgrade is a plan with visible weight steps through the RayService's HTTPRoute, analysed
per ``gitray.io/analysis``; leaving it half-way sends the traffic back to the active cluster
first. Inputs are plain planner values (tests/unit/builders.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gitray.core.model import LiveState, ObjectKey, Workload
from gitray.plans.materialize import as_live
from gitray.plans.names import service_cluster_name
from gitray.plans.plan import Action, Plan, WorkloadPlan, plan_from_json
from gitray.plans.planner import compute_plan
from gitray.plans.rayservice.gateway import cluster_serve_service_manifest, route_manifest
from gitray.plans.render import Format, render
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, cluster_for, live, rayservice, with_objects

T = StepType
KEY = ObjectKey("RayService", "ray", "svc")
SCHEMA = json.loads((Path(__file__).parents[3] / "schemas" / "plan.schema.json").read_text())
ANALYSIS = """\
metrics: {url: "http://traefik-metrics.traefik.svc:9100/metrics"}
checks:
  - {type: serve-health}
  - {type: success-rate, min: 99}
  - {name: gate, type: webhook, url: "https://ci.example.com/gate"}
failureLimit: 2
pauses:
  - {atPercent: 50, duration: 5m}
  - {atPercent: 100}
"""


def incremental(image: str = "ray:old", *, step: int = 25, surge: int | None = None,
                interval: int = 60, analysis: str | None = None, **cluster: Any) -> Workload:
    w = rayservice(image=image, autoscaling=True, **cluster)
    manifest = copy.deepcopy(dict(w.manifest))
    options: dict[str, Any] = {"gatewayClassName": "traefik", "stepSizePercent": step,
                               "intervalSeconds": interval}
    if surge is not None:
        options["maxSurgePercent"] = surge
    manifest["spec"]["upgradeStrategy"] = {"type": "NewClusterWithIncrementalUpgrade",
                                           "clusterUpgradeOptions": options}
    if analysis is not None:
        manifest["metadata"]["annotations"] = {"gitray.io/analysis": analysis}
    return Workload(w.key, w.api_version, manifest, w.source, w.wave)


OLD, NEW = incremental("ray:old"), incremental("ray:new")
A = service_cluster_name("svc", OLD.spec["rayClusterConfig"])
B = service_cluster_name("svc", NEW.spec["rayClusterConfig"])


def plan_of(desired: Workload, state: LiveState) -> Plan:
    return compute_plan((desired,), state, CONFIG, revision="f" * 40, against="live", now=NOW)


def one(plan: Plan) -> WorkloadPlan:
    return next(w for w in plan.workloads if w.key == KEY)


def steps(desired: Workload, state: LiveState) -> list[tuple[StepType, str]]:
    return [(s.type, s.target) for s in one(plan_of(desired, state)).steps]


def brief(desired: Workload, state: LiveState) -> list[str]:
    """Steps as ``type target [percent]``: the shape of an upgrade at a glance."""
    out = []
    for s in one(plan_of(desired, state)).steps:
        extra = s.params.get("percent", s.params.get("targetCapacity"))
        out.append(f"{s.type.value} {s.target}" + (f" {extra}" if extra is not None else ""))
    return out


def test_first_rollout_creates_the_gateway_route_and_per_cluster_service() -> None:
    assert steps(OLD, LiveState()) == [
        (T.CREATE_CLUSTER, A), (T.WAIT_CLUSTER_READY, A), (T.DEPLOY_SERVE, A),
        (T.WAIT_SERVE_RUNNING, A), (T.CREATE_SERVICE, "svc-head-svc"),
        (T.CREATE_SERVICE, "svc-serve-svc"), (T.APPLY_OBJECT, f"{A}-serve-svc"),
        (T.APPLY_OBJECT, "svc-gateway"), (T.APPLY_OBJECT, "svc-httproute")]
    route = one(plan_of(OLD, LiveState())).steps[-1].params["manifest"]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "", "kind": "Service", "name": f"{A}-serve-svc", "namespace": "ray",
         "port": 8000, "weight": 100}]
    assert route["spec"]["parentRefs"][0]["name"] == "svc-gateway"
    # the per-cluster serve Service labels its cluster's healthy Serve pods first (gated, as
    # the stable serve Service): without them it has no endpoints and the gateway answers 503
    cluster_svc = one(plan_of(OLD, LiveState())).steps[6]
    assert cluster_svc.params["gateServe"] == A
    assert cluster_svc.params["manifest"]["spec"]["selector"]["gitray.io/serve"] == "true"


def test_an_unchanged_incremental_service_has_nothing_to_do() -> None:
    plan = one(plan_of(OLD, live(OLD)))
    assert plan.action is Action.NOOP and not plan.steps


def test_switching_an_existing_service_to_incremental_adds_its_routing_only() -> None:
    plain = rayservice(image="ray:old", autoscaling=True)
    assert steps(OLD, live(plain)) == [(T.APPLY_OBJECT, f"{A}-serve-svc"),
                                       (T.APPLY_OBJECT, "svc-gateway"),
                                       (T.APPLY_OBJECT, "svc-httproute")]


@pytest.mark.parametrize(("step", "surge", "expected"), [
    pytest.param(25, None, [
        "shift-traffic svc-httproute 25", "wait-interval {B} 25",
        "shift-traffic svc-httproute 50", "wait-interval {B} 50",
        "shift-traffic svc-httproute 75", "wait-interval {B} 75",
        "shift-traffic svc-httproute 100", "wait-interval {B} 100"],
        id="default surge (100 %): four traffic steps, no capacity moves"),
    pytest.param(100, 100, ["shift-traffic svc-httproute 100", "wait-interval {B} 100"],
                 id="a 100 % step: one traffic step"),
    pytest.param(30, 50, [
        "shift-traffic svc-httproute 30", "wait-interval {B} 30",
        "shift-traffic svc-httproute 50", "wait-interval {B} 50",
        "set-serve-capacity {A} 50", "set-serve-capacity {B} 100", "wait-serve-running {B}",
        "shift-traffic svc-httproute 80", "wait-interval {B} 80",
        "shift-traffic svc-httproute 100", "wait-interval {B} 100"],
        id="surge 50: the old cluster shrinks before the new one grows"),
])
def test_an_upgrade_moves_traffic_in_visible_steps(step: int, surge: int | None,
                                                   expected: list[str]) -> None:
    desired = incremental("ray:new", step=step, surge=surge)
    first = [f"create-cluster {B}", f"wait-cluster-ready {B}",
             f"deploy-serve {B} {surge or 100}", f"wait-serve-running {B}",
             f"apply-object {B}-serve-svc"]
    last = ["switch-service svc-head-svc", "switch-service svc-serve-svc",
            f"schedule-cluster-deletion {A}"]
    got = brief(desired, live(incremental("ray:old", step=step, surge=surge)))
    assert got == first + [e.format(A=A, B=B) for e in expected] + last


def test_switch_steps_name_the_old_and_new_cluster() -> None:
    plan = one(plan_of(NEW, live(OLD)))
    assert plan.action is Action.REPLACE
    switches = [s for s in plan.steps if s.type is T.SWITCH_SERVICE]
    assert [(s.params["from"], s.params["cluster"]) for s in switches] == [(A, B), (A, B)]
    shifts = [s for s in plan.steps if s.type is T.SHIFT_TRAFFIC]
    assert [(s.params["step"], s.params["steps"]) for s in shifts] == [(1, 4), (2, 4), (3, 4),
                                                                       (4, 4)]
    assert [[b["weight"] for b in s.params["backends"]] for s in shifts] == [
        [75, 25], [50, 50], [25, 75], [0, 100]]
    assert [b["name"] for b in shifts[0].params["backends"]] == [f"{A}-serve-svc",
                                                                 f"{B}-serve-svc"]


def test_analysis_and_pauses_are_steps_of_the_plan() -> None:
    desired = incremental("ray:new", analysis=ANALYSIS)
    got = brief(desired, live(incremental("ray:old", analysis=ANALYSIS)))
    middle = got[got.index(f"apply-object {B}-serve-svc") + 1:got.index(
        "switch-service svc-head-svc")]
    assert middle == [
        "shift-traffic svc-httproute 25", f"run-analysis {B} 25",
        "shift-traffic svc-httproute 50", f"run-analysis {B} 50", f"pause {B} 50",
        "shift-traffic svc-httproute 75", f"run-analysis {B} 75",
        "shift-traffic svc-httproute 100", f"run-analysis {B} 100", f"pause {B} 100"]
    plan = one(plan_of(desired, live(OLD)))
    analysis = next(s for s in plan.steps if s.type is T.RUN_ANALYSIS)
    assert analysis.params["checks"] == [
        {"name": "serve-health", "type": "serve-health"},
        {"name": "success-rate", "type": "success-rate", "min": 99, "minRequests": 10},
        {"name": "gate", "type": "webhook", "url": "https://ci.example.com/gate",
         "timeoutSeconds": 10}]
    assert analysis.params["failureLimit"] == 2
    assert analysis.params["windowSeconds"] == 60
    assert analysis.params["backend"] == {"namespace": "ray", "service": f"{B}-serve-svc",
                                          "port": 8000}
    assert analysis.params["onFailure"] == {"trafficTo": A, "restoreCapacity": 100,
                                            "keepFailedCluster": False}
    assert analysis.params["metrics"]["requests"] == "traefik_service_requests_total"
    pauses = [s.params for s in plan.steps if s.type is T.PAUSE]
    assert pauses == [
        {"cluster": B, "percent": 50, "seconds": 300, "promote": "gitray promote ray/svc"},
        {"cluster": B, "percent": 100, "untilPromoted": True,
         "promote": "gitray promote ray/svc"}]


def test_a_pause_lands_on_the_first_step_reaching_it() -> None:
    desired = incremental("ray:new", step=30, analysis="pauses: [{atPercent: 31}]")
    got = brief(desired, live(OLD))
    assert got[got.index(f"pause {B} 60") - 2] == "shift-traffic svc-httproute 60"
    assert not any(g.startswith("run-analysis") for g in got), "no checks: holds only"


def test_keep_failed_clusters_in_the_analysis_wins_over_gitray_yaml() -> None:
    desired = incremental("ray:new", analysis="checks: [{type: serve-health}]\n"
                                              "keepFailedClusters: true\n")
    plan = one(plan_of(desired, live(OLD)))
    analysis = next(s for s in plan.steps if s.type is T.RUN_ANALYSIS)
    assert analysis.params["onFailure"]["keepFailedCluster"] is True


def test_a_new_commit_mid_upgrade_takes_the_traffic_back_before_dropping_the_pending() -> None:
    newer = incremental("ray:newer")
    state = with_objects(live(OLD), cluster_for(NEW))
    got = brief(newer, state)
    assert got[:3] == ["shift-traffic svc-httproute 0", f"set-serve-capacity {A} 100",
                       f"delete-cluster {B}"]
    restore = one(plan_of(newer, state)).steps[0]
    assert [b["name"] for b in restore.params["backends"]] == [f"{A}-serve-svc"]


def test_a_revert_mid_upgrade_cancels_it_after_restoring_the_traffic() -> None:
    state = with_objects(live(OLD), cluster_for(NEW))
    assert brief(OLD, state) == ["shift-traffic svc-httproute 0",
                                 f"set-serve-capacity {A} 100", f"cancel-upgrade {B}"]


def test_instant_rollback_restores_capacity_and_all_traffic_on_the_previous_cluster() -> None:
    state = with_objects(live(NEW), cluster_for(OLD, delete_after="2026-11-30T12:05:00Z",
                                                running=True))
    got = brief(OLD, state)
    assert got == [f"set-serve-capacity {A} 100", f"wait-serve-running {A}",
                   f"apply-object {A}-serve-svc", "shift-traffic svc-httproute 100",
                   "switch-service svc-head-svc", "switch-service svc-serve-svc",
                   f"cancel-cluster-deletion {A}", f"schedule-cluster-deletion {B}"]


def test_removal_deletes_the_route_gateway_and_every_serve_service() -> None:
    other = rayservice(name="other")
    plan = compute_plan((other,), live(OLD, other), CONFIG, revision="r", against="live",
                        now=NOW)
    got = [(s.type, s.target) for s in one(plan).steps]
    assert (T.DELETE_SERVICE, f"{A}-serve-svc") in got
    assert (T.DELETE_OBJECT, "svc-gateway") in got and (T.DELETE_OBJECT, "svc-httproute") in got
    assert got.index((T.DELETE_SERVICE, f"{A}-serve-svc")) < got.index((T.DELETE_CLUSTER, A))


def test_an_old_cluster_due_for_deletion_goes_with_its_serve_service() -> None:
    state = with_objects(live(NEW), cluster_for(OLD, delete_after="2026-11-30T11:00:00Z"))
    state = with_objects(state, as_live(cluster_serve_service_manifest(OLD, A, "gitray")))
    assert steps(NEW, state) == [(T.DELETE_CLUSTER, A), (T.DELETE_SERVICE, f"{A}-serve-svc")]


def test_the_route_stops_naming_an_old_cluster_before_it_is_deleted() -> None:
    """After a promotion the route still names the old cluster at weight 0; with the cluster
    and its serve Service gone, the Gateway controller would report the route's references
    unresolved. The deletion rewrites it first, with the active cluster alone."""
    state = with_objects(live(NEW), cluster_for(OLD, delete_after="2026-11-30T11:00:00Z"))
    state = with_objects(state, as_live(cluster_serve_service_manifest(OLD, A, "gitray")))
    promoted = as_live(route_manifest(NEW, [(A, 0), (B, 100)], "gitray"))
    state = with_objects(LiveState(tuple(o for o in state.objects if o.kind != "HTTPRoute")),
                         promoted)
    plan = one(plan_of(NEW, state))
    assert [(s.type, s.target) for s in plan.steps] == [
        (T.APPLY_OBJECT, "svc-httproute"), (T.DELETE_CLUSTER, A),
        (T.DELETE_SERVICE, f"{A}-serve-svc")]
    refs = plan.steps[0].params["manifest"]["spec"]["rules"][0]["backendRefs"]
    assert [(r["name"], r["weight"]) for r in refs] == [(f"{B}-serve-svc", 100)]
    # a route already without it (live(NEW)'s: B alone): nothing to rewrite
    clean = with_objects(live(NEW), cluster_for(OLD, delete_after="2026-11-30T11:00:00Z"))
    assert steps(NEW, clean) == [(T.DELETE_CLUSTER, A)]


def test_the_json_plan_validates_round_trips_and_is_format_2() -> None:
    plan = plan_of(incremental("ray:new", analysis=ANALYSIS), live(OLD))
    data = json.loads(render(plan, Format.JSON))
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["formatVersion"] == 2
    assert plan_from_json(data) == plan


@pytest.mark.parametrize(("path", "value"), [
    (("type",), "shift-traffic-now"),
    (("params", "percent"), 120),
    (("params", "backends"), []),
], ids=["unknown step type", "weight over 100", "a route without backends"])
def test_the_schema_refuses_a_broken_traffic_step(path: tuple[str, ...], value: Any) -> None:
    data = json.loads(render(plan_of(NEW, live(OLD)), Format.JSON))
    step = next(s for s in data["workloads"][0]["steps"] if s["type"] == "shift-traffic")
    target = step
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(data)


def test_the_schema_refuses_a_pause_both_timed_and_until_promoted() -> None:
    plan = plan_of(incremental("ray:new", analysis="pauses: [{atPercent: 50}]"), live(OLD))
    data = json.loads(render(plan, Format.JSON))
    pause = next(s for s in data["workloads"][0]["steps"] if s["type"] == "pause")
    pause["params"]["seconds"] = 60
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(data)


def test_a_version_1_plan_still_reads() -> None:
    data = json.loads(render(plan_of(rayservice(image="b"), live(rayservice(image="a"))),
                             Format.JSON))
    data["formatVersion"] = 1
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert plan_from_json(data).workloads


@pytest.mark.parametrize("fmt", list(Format))
def test_rendering_is_deterministic(fmt: Format) -> None:
    desired = incremental("ray:new", step=15, surge=20, analysis=ANALYSIS)
    first = render(plan_of(desired, live(OLD)), fmt)
    assert all(render(plan_of(desired, live(OLD)), fmt) == first for _ in range(3))


def test_text_view_shows_the_weight_steps() -> None:
    text = render(plan_of(incremental("ray:new", analysis=ANALYSIS), live(OLD)), Format.TEXT)
    assert "± RayService ray/svc will get a new cluster (incremental: 4 traffic steps)" in text
    assert f"shift traffic step 2/4: 50 % to {B}, 50 % to {A} (HTTPRoute svc-httproute)" in text
    assert (f"analyse {B} at 25 % over 1m: Serve health, success rate >= 99 %, webhook gate "
            "(roll back after 2 failed analyses)") in text
    assert "pause at 50 % for 5m" in text
    assert "pause at 100 % until `gitray promote ray/svc`" in text
    assert f"deploy the Serve config to {B} at target_capacity 100 %" in text
    assert "1 to replace (incremental)" in text


def test_markdown_view_shows_the_weight_steps() -> None:
    text = render(plan_of(incremental("ray:new", step=50, surge=50), live(OLD)),
                  Format.MARKDOWN)
    assert "will get a new cluster (incremental: 2 traffic steps)" in text
    assert f"set Serve target_capacity of {A} to 50 %" in text
    assert f"hold 100 % on {B} for 1m" in text
