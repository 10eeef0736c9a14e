"""RayService ``excludeHeadPodFromServeSvc``: the serve Service selects only worker pods with a
healthy Serve proxy, as KubeRay does; the head Service is unchanged."""

from __future__ import annotations

from typing import Any

from gitray.core.model import LiveState, Workload
from gitray.plans.names import service_cluster_name
from gitray.plans.plan import Action, Step, WorkloadPlan
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, live, rayservice

DEFAULT = rayservice(image="rayproject/ray:2.60.0")


def excluding(w: Workload, value: bool = True) -> Workload:
    manifest: dict[str, Any] = {**w.manifest, "spec": {**w.spec,
                                                       "excludeHeadPodFromServeSvc": value}}
    return Workload(w.key, w.api_version, manifest, w.source, w.wave)


EXCLUDING = excluding(DEFAULT)
NEW_IMAGE = excluding(rayservice(image="rayproject/ray:2.61.0"))
CLUSTER = service_cluster_name("svc", DEFAULT.spec["rayClusterConfig"])
WORKERS = {"ray.io/cluster": CLUSTER, "gitray.io/serve": "true", "ray.io/node-type": "worker"}


def plan_of(w: Workload, state: LiveState) -> WorkloadPlan:
    plan = compute_plan((w,), state, CONFIG, revision="r", against="live", now=NOW)
    return plan.workloads[0]


def serve_steps(wp: WorkloadPlan) -> list[Step]:
    return [s for s in wp.steps if s.target == "svc-serve-svc"]


def test_a_first_rollout_creates_a_serve_service_of_workers_only() -> None:
    wp = plan_of(EXCLUDING, LiveState())
    (create,) = serve_steps(wp)
    assert create.type is StepType.CREATE_SERVICE
    assert create.params["manifest"]["spec"]["selector"] == WORKERS
    head = next(s for s in wp.steps if s.target == "svc-head-svc")
    assert head.params["manifest"]["spec"]["selector"] == {
        "ray.io/cluster": CLUSTER, "ray.io/node-type": "head"}


def test_turning_it_on_reselects_the_serve_service_in_place() -> None:
    wp = plan_of(EXCLUDING, live(DEFAULT))
    assert wp.action is Action.UPDATE
    assert [(s.type, s.target) for s in wp.steps] == [(StepType.SWITCH_SERVICE, "svc-serve-svc")]
    step = wp.steps[0]
    assert step.params["selector"] == WORKERS
    assert step.params["cluster"] == step.params["from"] == CLUSTER
    assert f"change which pods of {CLUSTER} Service svc-serve-svc selects" in render(
        compute_plan((EXCLUDING,), live(DEFAULT), CONFIG, revision="r", against="live",
                     now=NOW), Format.TEXT)


def test_turning_it_off_selects_the_head_again() -> None:
    (step,) = plan_of(excluding(DEFAULT, False), live(EXCLUDING)).steps
    assert step.type is StepType.SWITCH_SERVICE
    assert step.params["selector"] == {"ray.io/cluster": CLUSTER, "gitray.io/serve": "true"}


def test_it_is_stable_once_applied() -> None:
    wp = plan_of(EXCLUDING, live(EXCLUDING))
    assert wp.action is Action.NOOP and wp.steps == ()


def test_a_blue_green_switch_selects_the_new_clusters_workers() -> None:
    wp = plan_of(NEW_IMAGE, live(EXCLUDING))
    assert wp.action is Action.REPLACE
    switch = next(s for s in serve_steps(wp) if s.type is StepType.SWITCH_SERVICE)
    target = service_cluster_name("svc", NEW_IMAGE.spec["rayClusterConfig"])
    assert switch.params["selector"] == {**WORKERS, "ray.io/cluster": target}
    assert switch.params["from"] == CLUSTER
