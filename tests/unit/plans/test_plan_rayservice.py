"""RayService plans: every shape of SPEC §3, one row per situation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from gitray.core.config import Config, RayServiceSettings
from gitray.core.model import LiveState, ObjectKey, Workload
from gitray.plans.names import service_cluster_name
from gitray.plans.plan import Action, Plan, WorkloadPlan
from gitray.plans.planner import compute_plan
from gitray.plans.rayservice.context import MIN_DELETION_DELAY_S
from gitray.plans.steptypes import StepType
from testenv.manifests import serve_config
from tests.unit.builders import (
    CONFIG,
    NOW,
    cluster_for,
    live,
    point_services,
    rayservice,
    replace_object,
    with_objects,
)

T = StepType
OLD = rayservice(image="rayproject/ray:2.59.0")
NEW = rayservice(image="rayproject/ray:2.60.0")
NEWER = rayservice(image="rayproject/ray:2.61.0")
NEW_SERVE = rayservice(image="rayproject/ray:2.59.0",
                       serve=serve_config(("greeter", "/greet"), ("calc", "/calc")))
AUTO = rayservice(image="rayproject/ray:2.59.0", autoscaling=True)
KEY = ObjectKey("RayService", "ray", "svc")


def cname(w: Workload) -> str:
    return service_cluster_name(w.key.name, w.spec["rayClusterConfig"])


A, B, C = cname(OLD), cname(NEW), cname(NEWER)
FUTURE, PAST = "2026-11-30T12:05:00Z", "2026-11-30T11:59:00Z"


def upgrading(pending: Workload) -> LiveState:
    """OLD is active; a pending cluster for ``pending``'s spec exists (an upgrade in flight)."""
    return with_objects(live(OLD), cluster_for(pending))


def after_switch(delete_after: str) -> LiveState:
    """NEW is active; OLD awaits deletion at ``delete_after``."""
    return with_objects(live(NEW), cluster_for(OLD, delete_after=delete_after, running=True))


@dataclass(frozen=True)
class Case:
    situation: str
    desired: tuple[Workload, ...]
    live: Callable[[], LiveState]
    steps: list[tuple[StepType, str]]
    action: Action
    config: Config = CONFIG


BLUE_GREEN_NEW = [
    (T.CREATE_CLUSTER, B), (T.WAIT_CLUSTER_READY, B), (T.DEPLOY_SERVE, B),
    (T.WAIT_SERVE_RUNNING, B), (T.SWITCH_SERVICE, "svc-head-svc"),
    (T.SWITCH_SERVICE, "svc-serve-svc"), (T.SCHEDULE_CLUSTER_DELETION, A),
]

CASES = [
    Case("first rollout creates the cluster, deploys Serve, then both Services",
         (OLD,), LiveState,
         [(T.CREATE_CLUSTER, A), (T.WAIT_CLUSTER_READY, A), (T.DEPLOY_SERVE, A),
          (T.WAIT_SERVE_RUNNING, A), (T.CREATE_SERVICE, "svc-head-svc"),
          (T.CREATE_SERVICE, "svc-serve-svc")], Action.CREATE),
    Case("unchanged service has nothing to do", (OLD,), lambda: live(OLD), [], Action.NOOP),
    Case("head image change is a blue-green upgrade in 7 steps",
         (NEW,), lambda: live(OLD), BLUE_GREEN_NEW, Action.REPLACE),
    Case("serve-only change deploys to the active cluster and nothing else",
         (NEW_SERVE,), lambda: live(OLD),
         [(T.DEPLOY_SERVE, A), (T.WAIT_SERVE_RUNNING, A)], Action.UPDATE),
    Case("replica-only change updates the active cluster in place",
         (rayservice(image="rayproject/ray:2.59.0", replicas=3),), lambda: live(OLD),
         [(T.UPDATE_CLUSTER, A)], Action.UPDATE),
    Case("replica-only change under in-tree autoscaling does nothing",
         (rayservice(image="rayproject/ray:2.59.0", replicas=3, autoscaling=True),),
         lambda: live(rayservice(image="rayproject/ray:2.59.0", autoscaling=True)),
         [], Action.NOOP),
    Case("autoscaler bounds change updates in place, no new cluster",
         (rayservice(image="rayproject/ray:2.59.0", autoscaling=True, max_replicas=9),),
         lambda: live(rayservice(image="rayproject/ray:2.59.0", autoscaling=True)),
         [(T.UPDATE_CLUSTER, cname(AUTO))], Action.UPDATE),
    Case("removed from Git deletes the Services, then the clusters",
         (), lambda: with_objects(live(OLD), cluster_for(NEW, delete_after=FUTURE)),
         [(T.DELETE_SERVICE, "svc-head-svc"), (T.DELETE_SERVICE, "svc-serve-svc"),
          *[(T.DELETE_CLUSTER, n) for n in sorted([A, B])]], Action.DELETE,
         replace(CONFIG, allow_empty=True)),
    Case("a new commit mid-upgrade abandons the stale pending cluster",
         (NEWER,), lambda: upgrading(NEW),
         [(T.DELETE_CLUSTER, B), (T.CREATE_CLUSTER, C), (T.WAIT_CLUSTER_READY, C),
          (T.DEPLOY_SERVE, C), (T.WAIT_SERVE_RUNNING, C), (T.SWITCH_SERVICE, "svc-head-svc"),
          (T.SWITCH_SERVICE, "svc-serve-svc"), (T.SCHEDULE_CLUSTER_DELETION, A)],
         Action.REPLACE),
    Case("a revert to the active spec mid-upgrade cancels it, never a third cluster",
         (OLD,), lambda: upgrading(NEW), [(T.CANCEL_UPGRADE, B)], Action.UPDATE),
    Case("resuming an upgrade whose pending cluster exists skips create-cluster",
         (NEW,), lambda: upgrading(NEW), BLUE_GREEN_NEW[1:], Action.REPLACE),
    Case("resuming after the head switch only switches the serve Service",
         (NEW,), lambda: point_services(upgrading(NEW), head=B, serve=A),
         [(T.WAIT_CLUSTER_READY, B), (T.DEPLOY_SERVE, B), (T.WAIT_SERVE_RUNNING, B),
          (T.SWITCH_SERVICE, "svc-serve-svc"), (T.SCHEDULE_CLUSTER_DELETION, A)],
         Action.REPLACE),
    Case("instant rollback to a cluster awaiting deletion switches back without building",
         (OLD,), lambda: with_objects(live(NEW), cluster_for(OLD, delete_after=FUTURE)),
         [(T.DEPLOY_SERVE, A), (T.WAIT_SERVE_RUNNING, A), (T.SWITCH_SERVICE, "svc-head-svc"),
          (T.SWITCH_SERVICE, "svc-serve-svc"), (T.CANCEL_CLUSTER_DELETION, A),
          (T.SCHEDULE_CLUSTER_DELETION, B)], Action.REPLACE),
    Case("instant rollback with Serve config unchanged only checks Serve is RUNNING there",
         (OLD,), lambda: after_switch(FUTURE),
         [(T.WAIT_SERVE_RUNNING, A), (T.SWITCH_SERVICE, "svc-head-svc"),
          (T.SWITCH_SERVICE, "svc-serve-svc"), (T.CANCEL_CLUSTER_DELETION, A),
          (T.SCHEDULE_CLUSTER_DELETION, B)], Action.REPLACE),
    Case("a due scheduled deletion deletes the old cluster",
         (NEW,), lambda: after_switch(PAST), [(T.DELETE_CLUSTER, A)], Action.UPDATE),
    Case("a scheduled deletion not yet due waits (a later pass deletes)",
         (NEW,), lambda: after_switch(FUTURE), [], Action.NOOP),
    Case("a kept failed pending cluster for the same spec is rebuilt",
         (NEW,), lambda: with_objects(live(OLD), cluster_for(NEW, failed="timeout")),
         [(T.DELETE_CLUSTER, B), *BLUE_GREEN_NEW], Action.REPLACE),
    Case("Services pointing at a deleted cluster are a fresh rollout that switches them",
         (NEW,), lambda: LiveState(tuple(o for o in live(OLD).objects if o.kind == "Service")),
         [(T.CREATE_CLUSTER, B), (T.WAIT_CLUSTER_READY, B), (T.DEPLOY_SERVE, B),
          (T.WAIT_SERVE_RUNNING, B), (T.SWITCH_SERVICE, "svc-head-svc"),
          (T.SWITCH_SERVICE, "svc-serve-svc")], Action.CREATE),
    Case("a missing serve Service is recreated on the active cluster",
         (OLD,), lambda: LiveState(tuple(o for o in live(OLD).objects
                                         if o.name != "svc-serve-svc")),
         [(T.CREATE_SERVICE, "svc-serve-svc")], Action.UPDATE),
]


def plan_for(case: Case) -> WorkloadPlan:
    plan = compute_plan(case.desired, case.live(), case.config, revision="abc123",
                        against="live", now=NOW)
    found = plan.workload(KEY)
    assert found is not None, f"no plan for {KEY}: {plan}"
    return found


@pytest.mark.parametrize("case", CASES, ids=[c.situation for c in CASES])
def test_rayservice_plan(case: Case) -> None:
    wp = plan_for(case)
    assert [(s.type, s.target) for s in wp.steps] == case.steps
    assert wp.action is case.action


def test_blue_green_sends_the_new_serve_config_only_to_the_new_cluster() -> None:
    both = rayservice(image="rayproject/ray:2.60.0",
                      serve=serve_config(("greeter", "/greet"), ("calc", "/calc")))
    wp = plan_for(Case("", (both,), lambda: live(OLD), [], Action.REPLACE))
    deploys = [s for s in wp.steps if s.type is T.DEPLOY_SERVE]
    assert [s.target for s in deploys] == [B]
    apps = [a["name"] for a in deploys[0].params["serveConfig"]["applications"]]
    assert apps == ["greeter", "calc"]


def test_switches_come_after_serve_running_and_head_before_serve() -> None:
    wp = plan_for(Case("", (NEW,), lambda: live(OLD), [], Action.REPLACE))
    types = [s.type for s in wp.steps]
    running = types.index(T.WAIT_SERVE_RUNNING)
    switches = [i for i, s in enumerate(wp.steps) if s.type is T.SWITCH_SERVICE]
    assert all(i > running for i in switches)
    assert [wp.steps[i].params["role"] for i in switches] == ["head", "serve"]
    assert wp.steps[switches[1]].params["selector"] == {"ray.io/cluster": B,
                                                        "gitray.io/serve": "true"}


def test_the_cluster_name_ignores_autoscaler_owned_fields() -> None:
    base = rayservice(replicas=1, min_replicas=1, max_replicas=3)
    scaled = rayservice(replicas=5, min_replicas=2, max_replicas=8)
    assert cname(base) == cname(scaled)
    assert cname(base) != cname(rayservice(image="other:1"))
    assert len(cname(rayservice(name="x" * 47))) == 53


def test_deletion_delay_comes_from_config_or_the_manifest() -> None:
    cfg = replace(CONFIG, rayservice=RayServiceSettings(deletion_delay_s=300))
    wp = plan_for(Case("", (NEW,), lambda: live(OLD), [], Action.REPLACE, cfg))
    assert wp.steps[-1].params["delaySeconds"] == 300
    own = rayservice(image="rayproject/ray:2.60.0", deletion_delay=25)
    wp = plan_for(Case("", (own,), lambda: live(OLD), [], Action.REPLACE, cfg))
    assert wp.steps[-1].params["delaySeconds"] == 25


def test_the_old_cluster_outlives_the_switch_by_the_drain_floor_at_least() -> None:
    """A delay shorter than the floor (0, KubeRay's field, or gitray's config) is raised to it:
    proxies need time to stop sending to the old pods after the selector moved."""
    for cfg_delay, own_delay in ((2, None), (300, 0), (300, 3)):
        cfg = replace(CONFIG, rayservice=RayServiceSettings(deletion_delay_s=cfg_delay))
        svc = (NEW if own_delay is None
               else rayservice(image="rayproject/ray:2.60.0", deletion_delay=own_delay))
        wp = plan_for(Case("", (svc,), lambda: live(OLD), [], Action.REPLACE, cfg))
        assert wp.steps[-1].params["delaySeconds"] == MIN_DELETION_DELAY_S == 10
        assert "10 s after the switch" in wp.steps[-1].reason


def test_timeouts_come_from_config() -> None:
    cfg = replace(CONFIG, rayservice=RayServiceSettings(cluster_ready_timeout_s=11,
                                                        serve_ready_timeout_s=22))
    wp = plan_for(Case("", (NEW,), lambda: live(OLD), [], Action.REPLACE, cfg))
    by_type = {s.type: s for s in wp.steps}
    assert by_type[T.WAIT_CLUSTER_READY].params["timeoutSeconds"] == 11
    assert by_type[T.WAIT_SERVE_RUNNING].params["timeoutSeconds"] == 22


def test_server_defaulted_fields_on_the_active_cluster_are_not_a_diff() -> None:
    state = replace_object(live(OLD), A, spec={
        "headGroupSpec": {"serviceType": "ClusterIP", "template": {"spec": {
            "restartPolicy": "Always"}}},
        "rayVersion": "2.59.0"})
    wp = plan_for(Case("", (OLD,), lambda: state, [], Action.NOOP))
    assert wp.steps == ()


def test_created_cluster_has_no_kuberay_rayservice_labels() -> None:
    wp = plan_for(Case("", (NEW,), lambda: live(OLD), [], Action.REPLACE))
    manifest = wp.steps[0].params["manifest"]
    labels = manifest["metadata"]["labels"]
    assert not [k for k in labels if k.startswith("ray.io/originated-from")]
    assert labels["app.kubernetes.io/managed-by"] == "gitray"
    assert manifest["metadata"]["annotations"]["gitray.io/workload-key"] == "ray/RayService/svc"


def test_replace_shows_the_image_change() -> None:
    wp = plan_for(Case("", (NEW,), lambda: live(OLD), [], Action.REPLACE))
    paths = {c.path: (c.before, c.after) for c in wp.changes}
    image = "spec.rayClusterConfig.headGroupSpec.template.spec.containers[ray-head].image"
    assert paths[image] == ("rayproject/ray:2.59.0", "rayproject/ray:2.60.0")


def test_plan_is_deterministic() -> None:
    def once() -> Plan:
        return compute_plan((NEW,), live(OLD), CONFIG, revision="r", against="live", now=NOW)

    assert once() == once()
    assert [s.id for w in once().workloads for s in w.steps] == [
        "01-create-cluster", "02-wait-cluster-ready", "03-deploy-serve",
        "04-wait-serve-running", "05-switch-service", "06-switch-service",
        "07-schedule-cluster-deletion"]
