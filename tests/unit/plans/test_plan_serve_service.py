"""RayService ``spec.serveService``: the serve Service follows the user's template (name,
labels, annotations, type, ports) and gitray owns its selector."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from gitray.core.model import LiveState, Workload
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.plans.load import load_snapshot
from gitray.plans.names import service_cluster_name
from gitray.plans.plan import Action, Step, WorkloadPlan
from gitray.plans.planner import compute_plan
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, live, point_services, rayservice, with_objects

T = StepType
TEMPLATE: dict[str, Any] = {
    "metadata": {"name": "fruit", "labels": {"team": "ml"},
                 "annotations": {"lb.example/internal": "true"}},
    "spec": {"type": "LoadBalancer",
             "ports": [{"name": "serve", "port": 80, "targetPort": 8000}]},
}


def templated(w: Workload, template: dict[str, Any] | None = TEMPLATE) -> Workload:
    spec = {k: v for k, v in w.spec.items() if k != "serveService"}
    if template is not None:
        spec["serveService"] = template
    return Workload(w.key, w.api_version, {**w.manifest, "spec": spec}, w.source, w.wave)


PLAIN = rayservice(image="rayproject/ray:2.60.0")
FRUIT = templated(PLAIN)
CLUSTER = service_cluster_name("svc", PLAIN.spec["rayClusterConfig"])


def plan_of(w: Workload, state: LiveState) -> WorkloadPlan:
    return compute_plan((w,), state, CONFIG, revision="r", against="live",
                        now=NOW).workloads[0]


def shape(wp: WorkloadPlan) -> list[tuple[StepType, str]]:
    return [(s.type, s.target) for s in wp.steps]


def step(wp: WorkloadPlan, kind: StepType, target: str) -> Step:
    return next(s for s in wp.steps if s.type is kind and s.target == target)


def test_a_first_rollout_creates_the_serve_service_from_the_template() -> None:
    wp = plan_of(FRUIT, LiveState())
    assert shape(wp)[-2:] == [(T.CREATE_SERVICE, "svc-head-svc"), (T.CREATE_SERVICE, "fruit")]
    create = step(wp, T.CREATE_SERVICE, "fruit")
    assert create.params["serverSideApply"] is True
    manifest = create.params["manifest"]
    meta, spec = manifest["metadata"], manifest["spec"]
    assert meta["name"] == "fruit" and meta["namespace"] == "ray"
    assert meta["labels"]["team"] == "ml"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "gitray"
    assert meta["labels"]["gitray.io/role"] == "serve-service"
    assert meta["annotations"]["lb.example/internal"] == "true"
    assert spec["type"] == "LoadBalancer"
    assert spec["ports"] == [{"name": "serve", "port": 80, "targetPort": 8000}]
    assert spec["selector"] == {"ray.io/cluster": CLUSTER, "gitray.io/serve": "true"}


def test_without_ports_the_template_gets_the_serve_port() -> None:
    wp = plan_of(templated(PLAIN, {"metadata": {"labels": {"a": "b"}}}), LiveState())
    spec = step(wp, T.CREATE_SERVICE, "svc-serve-svc").params["manifest"]["spec"]
    assert spec["ports"] == [{"name": "serve", "port": 8000, "targetPort": 8000,
                              "protocol": "TCP"}]
    assert spec["type"] == "ClusterIP"
    head = {**PLAIN.spec["rayClusterConfig"]["headGroupSpec"], "serviceType": "NodePort"}
    cluster = {**PLAIN.spec["rayClusterConfig"], "headGroupSpec": head}
    w = templated(Workload(PLAIN.key, PLAIN.api_version, {**PLAIN.manifest, "spec": {
        **PLAIN.spec, "rayClusterConfig": cluster}}, PLAIN.source), {"metadata": {}})
    wp = plan_of(w, LiveState())
    assert step(wp, T.CREATE_SERVICE, "svc-serve-svc").params["manifest"]["spec"]["type"] == \
        "NodePort", "without a type, the head's serviceType (as KubeRay)"


def test_an_applied_template_is_stable() -> None:
    wp = plan_of(FRUIT, live(FRUIT))
    assert wp.action is Action.NOOP and wp.steps == ()


def test_a_template_change_is_applied_in_place() -> None:
    changed = templated(PLAIN, {**TEMPLATE, "metadata": {**TEMPLATE["metadata"],
                                                         "labels": {"team": "serving"}}})
    wp = plan_of(changed, live(FRUIT))
    assert shape(wp) == [(T.APPLY_OBJECT, "fruit")]
    manifest = wp.steps[0].params["manifest"]
    assert manifest["metadata"]["labels"]["team"] == "serving"
    assert manifest["spec"]["selector"]["ray.io/cluster"] == CLUSTER, "selector unchanged"


def test_a_new_name_creates_the_new_service_then_deletes_the_old_one() -> None:
    renamed = templated(PLAIN, {**TEMPLATE, "metadata": {"name": "fruit-v2"}})
    wp = plan_of(renamed, live(FRUIT))
    assert shape(wp) == [(T.CREATE_SERVICE, "fruit-v2"), (T.DELETE_SERVICE, "fruit")]
    assert step(wp, T.CREATE_SERVICE, "fruit-v2").params["cluster"] == CLUSTER


def test_adding_a_template_to_a_default_serve_service() -> None:
    wp = plan_of(FRUIT, live(PLAIN))
    assert shape(wp) == [(T.CREATE_SERVICE, "fruit"), (T.DELETE_SERVICE, "svc-serve-svc")]
    unnamed = templated(PLAIN, {"spec": {"type": "NodePort"}})
    wp = plan_of(unnamed, live(PLAIN))
    assert shape(wp) == [(T.APPLY_OBJECT, "svc-serve-svc")]


def test_removing_the_template_goes_back_to_the_default_service() -> None:
    wp = plan_of(PLAIN, live(FRUIT))
    assert shape(wp) == [(T.CREATE_SERVICE, "svc-serve-svc"), (T.DELETE_SERVICE, "fruit")]
    unnamed = templated(PLAIN, {"spec": {"type": "NodePort"}})
    wp = plan_of(PLAIN, live(unnamed))
    assert shape(wp) == [(T.APPLY_OBJECT, "svc-serve-svc")]
    assert wp.steps[0].params["manifest"]["spec"]["type"] == "ClusterIP"


def test_a_blue_green_upgrade_keeps_the_template_and_only_switches_the_selector() -> None:
    newer = templated(rayservice(image="rayproject/ray:2.61.0"))
    target = service_cluster_name("svc", newer.spec["rayClusterConfig"])
    wp = plan_of(newer, live(FRUIT))
    assert wp.action is Action.REPLACE
    switch = step(wp, T.SWITCH_SERVICE, "fruit")
    assert switch.params["selector"]["ray.io/cluster"] == target
    assert not [s for s in wp.steps if s.type in (T.APPLY_OBJECT, T.DELETE_SERVICE)]


def test_a_half_done_rename_finishes() -> None:
    # the new Service was created, gitray stopped before deleting the old one
    renamed = templated(PLAIN, {**TEMPLATE, "metadata": {"name": "fruit-v2"}})
    state = with_objects(live(FRUIT), *[o for o in live(renamed).objects
                                        if o.name == "fruit-v2"])
    state = point_services(state, CLUSTER, CLUSTER)
    assert shape(plan_of(renamed, state)) == [(T.DELETE_SERVICE, "fruit")]


def test_removing_the_rayservice_deletes_every_serve_service() -> None:
    renamed = templated(PLAIN, {**TEMPLATE, "metadata": {"name": "fruit-v2"}})
    state = with_objects(live(FRUIT), *[o for o in live(renamed).objects
                                        if o.name == "fruit-v2"])
    plan = compute_plan((), state, CONFIG.__class__(allow_empty=True), revision="r",
                        against="live", now=NOW)
    deleted = [s.target for s in plan.workloads[0].steps if s.type is T.DELETE_SERVICE]
    assert sorted(deleted) == ["fruit", "fruit-v2", "svc-head-svc"]


HEAD = """\
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: svc
  namespace: ray
spec:
  serveConfigV2: |
    applications:
      - import_path: apps.fruit:app
  rayClusterConfig:
    headGroupSpec:
      rayStartParams: {}
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray:2.60.0
  serveService:
"""


@pytest.mark.parametrize(("template", "expected"), [
    ("spec:\n  selector: {app: fruit}\n",
     "svc.yaml:20:7: spec.serveService.spec.selector is gitray's"),
    ("metadata:\n  name: Fruit_Svc\n",
     "svc.yaml:20:7: spec.serveService.metadata.name 'Fruit_Svc' is not a valid Service name"),
    ("metadata:\n  name: svc-head-svc\n",
     "svc.yaml:20:7: spec.serveService.metadata.name 'svc-head-svc' is the head Service's"),
    ("metadata:\n  namespace: other\n",
     "svc.yaml:20:7: spec.serveService.metadata.namespace 'other' is not the RayService's own "
     "namespace (ray)"),
    ("spec:\n  type: ExternalName\n",
     "svc.yaml:20:7: spec.serveService.spec.type ExternalName cannot select pods"),
], ids=["selector", "bad name", "head name", "namespace", "ExternalName"])
def test_a_template_gitray_cannot_follow_is_refused(template: str, expected: str) -> None:
    text = HEAD + textwrap.indent(template, "    ")
    result = load_snapshot(Snapshot("worktree", "t", (RepoFile("svc.yaml", text.encode()),)))
    found = [str(d) for d in result.diagnostics]
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_template_port_that_is_not_a_serving_port_is_a_warning() -> None:
    text = HEAD + textwrap.indent(
        "spec:\n  type: LoadBalancer\n  ports:\n    - {name: web, port: 12345}\n", "    ")
    result = load_snapshot(Snapshot("worktree", "t", (RepoFile("svc.yaml", text.encode()),)))
    assert result.diagnostics == ()
    assert [str(w) for w in result.warnings] == [
        "svc.yaml:22:11: spec.serveService.spec.ports[0] (web) is not used: as with KubeRay, the "
        "serve Service has the head's serving ports (serve); name it after one of them to "
        "change that port"]
    plan = compute_plan(result.workloads, LiveState(), CONFIG, revision="r", against="empty",
                        now=NOW)
    create = step(plan.workloads[0], T.CREATE_SERVICE, "svc-serve-svc")
    assert create.params["manifest"]["spec"]["ports"] == [
        {"name": "serve", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]
    assert create.params["manifest"]["spec"]["type"] == "LoadBalancer"
