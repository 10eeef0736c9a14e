"""RayService ``upgradeStrategy.type: None`` and ``managedBy`` another controller: plans.

None never builds a new cluster: what KubeRay changes in place (replicas, worker groups
appended at the end, Serve config) is planned in place on the active cluster; anything else
is refused by name and nothing is planned. A RayService managed by another controller is
left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gitray.core.errors import ValidationError
from gitray.core.model import ANN_CLUSTER_HASH, LiveObject, LiveState, ObjectKey, Workload
from gitray.plans.materialize import as_live, materialize
from gitray.plans.names import cluster_hash, service_cluster_name
from gitray.plans.plan import Action, Plan, WorkloadPlan
from gitray.plans.planner import compute_plan
from gitray.plans.steptypes import StepType
from testenv.manifests import serve_config
from tests.unit.builders import CONFIG, NOW, cluster_for, live, rayservice, with_objects

T = StepType
IMAGE, OTHER_IMAGE = "rayproject/ray:2.60.0", "rayproject/ray:2.61.0"
BASE = rayservice(image=IMAGE, upgrade="None")
OTHER_SERVE = serve_config(("greeter", "/greet"), ("calc", "/calc"))
KEY = ObjectKey("RayService", "ray", "svc")


def cname(w: Workload) -> str:
    return service_cluster_name(w.key.name, w.spec["rayClusterConfig"])


A = cname(BASE)


def plan_of(desired: tuple[Workload, ...], state: LiveState, exact: bool = False) -> Plan:
    return compute_plan(desired, state, CONFIG, revision="r", against="live", now=NOW,
                        exact=exact)


def one(plan: Plan, key: ObjectKey = KEY) -> WorkloadPlan:
    return next(w for w in plan.workloads if w.key == key)


def steps(wp: WorkloadPlan) -> list[tuple[StepType, str]]:
    return [(s.type, s.target) for s in wp.steps]


@dataclass(frozen=True)
class Case:
    situation: str
    desired: Workload
    live: Callable[[], LiveState]
    steps: list[tuple[StepType, str]]
    action: Action


CASES = [
    Case("first rollout builds the one cluster, as KubeRay does under None",
         BASE, LiveState,
         [(T.CREATE_CLUSTER, A), (T.WAIT_CLUSTER_READY, A), (T.DEPLOY_SERVE, A),
          (T.WAIT_SERVE_RUNNING, A), (T.CREATE_SERVICE, "svc-head-svc"),
          (T.CREATE_SERVICE, "svc-serve-svc")], Action.CREATE),
    Case("unchanged service has nothing to do", BASE, lambda: live(BASE), [], Action.NOOP),
    Case("serve-only change deploys to the running cluster, no new cluster",
         rayservice(image=IMAGE, upgrade="None", serve=OTHER_SERVE), lambda: live(BASE),
         [(T.DEPLOY_SERVE, A), (T.WAIT_SERVE_RUNNING, A)], Action.UPDATE),
    Case("replica-only change updates the running cluster in place",
         rayservice(image=IMAGE, upgrade="None", replicas=2), lambda: live(BASE),
         [(T.UPDATE_CLUSTER, A)], Action.UPDATE),
    Case("switching NewCluster -> None alone changes nothing",
         BASE, lambda: live(rayservice(image=IMAGE)), [], Action.NOOP),
    Case("a worker group appended at the end is added in place to the running cluster",
         rayservice(image=IMAGE, upgrade="None", extra_groups=("gpu",)), lambda: live(BASE),
         [(T.UPDATE_CLUSTER, A)], Action.UPDATE),
    Case("an appended group and a Serve change: update in place, then deploy there",
         rayservice(image=IMAGE, upgrade="None", extra_groups=("gpu",), serve=OTHER_SERVE),
         lambda: live(BASE),
         [(T.UPDATE_CLUSTER, A), (T.DEPLOY_SERVE, A), (T.WAIT_SERVE_RUNNING, A)],
         Action.UPDATE),
    Case("an old cluster whose deletion is due is still deleted",
         BASE, lambda: with_objects(live(BASE), cluster_for(
             rayservice(image=OTHER_IMAGE), delete_after="2026-11-30T11:59:00Z")),
         [(T.DELETE_CLUSTER, cname(rayservice(image=OTHER_IMAGE)))], Action.UPDATE),
    Case("under in-tree autoscaling an appended group is added, replicas stay the autoscaler's",
         rayservice(image=IMAGE, upgrade="None", autoscaling=True, extra_groups=("gpu",)),
         lambda: live(rayservice(image=IMAGE, upgrade="None", autoscaling=True)),
         [(T.UPDATE_CLUSTER, cname(rayservice(image=IMAGE, autoscaling=True)))],
         Action.UPDATE),
    Case("a pending cluster from an earlier NewCluster upgrade is abandoned, none is built",
         BASE, lambda: with_objects(live(BASE), cluster_for(rayservice(image=OTHER_IMAGE))),
         [(T.CANCEL_UPGRADE, cname(rayservice(image=OTHER_IMAGE)))], Action.UPDATE),
]


@pytest.mark.parametrize("case", CASES, ids=[c.situation for c in CASES])
def test_upgrade_none_plans(case: Case) -> None:
    wp = one(plan_of((case.desired,), case.live()))
    assert steps(wp) == case.steps
    assert wp.action is case.action
    assert not any(t is T.CREATE_CLUSTER for t, _ in steps(wp)) or case.live().objects == ()
    assert not any(t is T.SWITCH_SERVICE for t, _ in steps(wp))


def test_an_autoscaled_appended_group_keeps_the_live_replicas() -> None:
    grown = rayservice(image=IMAGE, upgrade="None", autoscaling=True, extra_groups=("gpu",))
    (update,) = one(plan_of((grown,), live(rayservice(image=IMAGE, upgrade="None",
                                                      autoscaling=True)))).steps
    assert update.params["preserveLiveReplicas"] is True


def test_the_appended_group_is_applied_under_the_running_clusters_name_and_then_converges(
) -> None:
    grown = rayservice(image=IMAGE, upgrade="None", extra_groups=("gpu",))
    (update,) = one(plan_of((grown,), live(BASE))).steps
    manifest = dict(update.params["manifest"])  # type: ignore[arg-type]
    assert manifest["metadata"]["name"] == A != cname(grown)
    assert [g["groupName"] for g in manifest["spec"]["workerGroupSpecs"]] == ["workers", "gpu"]
    assert manifest["metadata"]["annotations"][ANN_CLUSTER_HASH] == cluster_hash(
        grown.spec["rayClusterConfig"])  # type: ignore[arg-type]
    # once applied, the next plan has nothing to do, under None and under NewCluster alike
    after = LiveState(tuple(
        as_live(manifest, {"state": "ready"}) if o.name == A else o for o in live(BASE).objects))
    after = LiveState(tuple(_with_serve_hash(o, live(BASE)) for o in after.objects))
    assert one(plan_of((grown,), after)).steps == ()
    new_cluster = rayservice(image=IMAGE, extra_groups=("gpu",))
    assert one(plan_of((new_cluster,), after)).steps == ()


def _with_serve_hash(obj: LiveObject, before: LiveState) -> LiveObject:
    """Keep the Serve-config annotation the running cluster had (update-cluster keeps it)."""
    old = next(o for o in before.objects if o.name == obj.name)
    if obj.kind != "RayCluster":
        return obj
    body = dict(obj.body)
    meta = dict(body["metadata"])  # type: ignore[arg-type]
    meta["annotations"] = {**old.annotations, **meta["annotations"]}
    body["metadata"] = meta
    return LiveObject(obj.kind, obj.namespace, obj.name, obj.resource_version, body)


REFUSED = {
    "image change": (rayservice(image=OTHER_IMAGE, upgrade="None"),
                     "spec.rayClusterConfig.headGroupSpec.template.spec.containers[ray-head]"
                     f".image ('{IMAGE}' -> '{OTHER_IMAGE}')"),
    "image change together with a Serve change (nothing is deployed either)": (
        rayservice(image=OTHER_IMAGE, upgrade="None", serve=OTHER_SERVE), ".image ("),
    "a worker group removed": (rayservice(image=IMAGE, upgrade="None", extra_groups=("gpu",)),
                               "spec.rayClusterConfig"),
    "an existing group changed while one is appended": (
        rayservice(image=OTHER_IMAGE, upgrade="None", extra_groups=("gpu",)), ".image ("),
}


@pytest.mark.parametrize("case", REFUSED)
def test_upgrade_none_refuses_other_cluster_changes_naming_the_field(case: str) -> None:
    desired, expected = REFUSED[case]
    running = live(rayservice(image=IMAGE, upgrade="None", extra_groups=("gpu",))
                   if case == "a worker group removed" else BASE)
    if case == "a worker group removed":
        desired = BASE
    with pytest.raises(ValidationError) as raised:
        plan_of((desired,), running)
    (problem,) = raised.value.diagnostics
    assert str(problem).startswith("ray/svc.yaml:1:1: spec.upgradeStrategy.type: None: ")
    assert expected in problem.message
    assert "cannot be applied in place to the running cluster svc-" in problem.message
    assert "remove upgradeStrategy (NewCluster) for a blue-green upgrade" in problem.message


def test_a_refusal_stops_the_whole_plan_and_lists_every_refused_workload() -> None:
    first = rayservice("one", image=IMAGE, upgrade="None")
    second = rayservice("two", image=IMAGE, upgrade="None")
    fine = rayservice("three", image=IMAGE)
    state = live(first, second, fine)
    changed = (rayservice("one", image=OTHER_IMAGE, upgrade="None"),
               rayservice("two", image=OTHER_IMAGE, upgrade="None"),
               rayservice("three", image=OTHER_IMAGE))
    with pytest.raises(ValidationError) as raised:
        plan_of(changed, state)
    assert [d.location.path for d in raised.value.diagnostics] == ["ray/one.yaml",
                                                                    "ray/two.yaml"]


def test_an_offline_preview_names_the_field_too() -> None:
    with pytest.raises(ValidationError) as raised:
        plan_of((rayservice(image=OTHER_IMAGE, upgrade="None"),), live(BASE), exact=True)
    assert ".image (" in raised.value.diagnostics[0].message


# --- spec.managedBy another controller ------------------------------------------------------

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def test_a_rayservice_managed_by_another_controller_is_left_alone() -> None:
    theirs = rayservice(image=IMAGE, managed_by=MULTIKUEUE)
    wp = one(plan_of((theirs,), LiveState()))
    assert wp.action is Action.NOOP and wp.steps == ()
    assert wp.notes == (f"spec.managedBy is '{MULTIKUEUE}': managed by another controller, so "
                        "gitray leaves it alone: nothing is created, changed or deleted",)


def test_objects_gitray_made_before_the_handover_are_neither_changed_nor_pruned() -> None:
    theirs = rayservice(image=OTHER_IMAGE, managed_by=MULTIKUEUE, serve=OTHER_SERVE)
    wp = one(plan_of((theirs,), live(rayservice(image=IMAGE))))
    assert wp.steps == () and "3 object(s) gitray made before are kept" in wp.notes[0]


def test_kuberays_own_manager_name_is_gitrays_job() -> None:
    ours = rayservice(image=IMAGE, managed_by="ray.io/kuberay-operator")
    assert one(plan_of((ours,), LiveState())).action is Action.CREATE


def test_an_offline_preview_has_no_objects_for_another_managers_rayservice() -> None:
    assert materialize([rayservice(image=IMAGE, managed_by=MULTIKUEUE)], CONFIG).objects == ()
