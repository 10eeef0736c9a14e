"""RayCluster, RayJob and supporting-object plans, and the planner's global rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from gitray.core.config import Config, RayJobSettings
from gitray.core.model import LiveObject, LiveState, ObjectKey, Workload
from gitray.plans.manifests import job_manifest
from gitray.plans.materialize import as_live
from gitray.plans.names import job_run_name
from gitray.plans.plan import Action
from gitray.plans.planner import compute_plan
from gitray.plans.steptypes import StepType
from tests.unit.builders import (
    CONFIG,
    NOW,
    configmap,
    live,
    raycluster,
    rayjob,
    rayservice,
    replace_object,
)

T = StepType
CL = raycluster()
CL_AUTO = raycluster(autoscaling=True)
JOB = rayjob()
JOB2 = rayjob(entrypoint="python /code/job.py --v2")
RUN1, RUN2 = job_run_name("job", JOB.spec), job_run_name("job", JOB2.spec)
CM = configmap()


def job_run(w: Workload, status: str | None, created: str, rv: str = "") -> LiveObject:
    manifest = job_manifest(w, CONFIG.instance)
    manifest["metadata"]["creationTimestamp"] = created
    return as_live(manifest, {"jobDeploymentStatus": status} if status else {}, rv)


def old_runs(n: int) -> tuple[LiveObject, ...]:
    return tuple(job_run(rayjob(entrypoint=f"python old{i}.py"), "Complete",
                         f"2026-11-0{i + 1}T00:00:00Z") for i in range(n))


@dataclass(frozen=True)
class Case:
    situation: str
    desired: tuple[Workload, ...]
    live: Callable[[], LiveState]
    key: ObjectKey
    steps: list[tuple[StepType, str]]
    action: Action
    config: Config = CONFIG


CASES = [
    Case("new RayCluster is created", (CL,), LiveState, CL.key,
         [(T.CREATE_CLUSTER, "cl")], Action.CREATE),
    Case("unchanged RayCluster has nothing to do", (CL,), lambda: live(CL), CL.key, [],
         Action.NOOP),
    Case("server-defaulted fields on a RayCluster are not a diff", (CL,),
         lambda: replace_object(live(CL), "cl", spec={"rayVersion": "2.60.0",
                                                      "headGroupSpec": {"serviceType": "X"}}),
         CL.key, [], Action.NOOP),
    Case("RayCluster image change updates in place", (raycluster(image="ray:next"),),
         lambda: live(CL), CL.key, [(T.UPDATE_CLUSTER, "cl")], Action.UPDATE),
    Case("RayCluster drift in a field Git sets is healed", (CL,),
         lambda: replace_object(live(CL), "cl", spec={"headGroupSpec": {"rayStartParams": {
             "dashboard-host": "127.0.0.1"}}}),
         CL.key, [(T.UPDATE_CLUSTER, "cl")], Action.UPDATE),
    Case("RayCluster replicas set by the autoscaler are not a diff", (CL_AUTO,),
         lambda: replace_object(live(CL_AUTO), "cl", spec={"workerGroupSpecs": [{
             **CL_AUTO.spec["workerGroupSpecs"][0], "replicas": 7}]}),
         CL.key, [], Action.NOOP),
    Case("RayCluster replicas without autoscaling are Git's", (CL,),
         lambda: replace_object(live(CL), "cl", spec={"workerGroupSpecs": [{
             **CL.spec["workerGroupSpecs"][0], "replicas": 7}]}),
         CL.key, [(T.UPDATE_CLUSTER, "cl")], Action.UPDATE),
    Case("RayCluster removed from Git is pruned", (CM,), lambda: live(CL, CM), CL.key,
         [(T.DELETE_CLUSTER, "cl")], Action.DELETE),
    Case("first RayJob spec starts a run and waits for it", (JOB,), LiveState, JOB.key,
         [(T.CREATE_JOB, RUN1), (T.WAIT_JOB, RUN1)], Action.CREATE),
    Case("a finished run is never re-run", (JOB,), lambda: live(JOB), JOB.key, [],
         Action.NOOP),
    Case("a finished run that drifted is still not re-run", (JOB,),
         lambda: replace_object(live(JOB), RUN1, spec={"entrypoint": "edited"}),
         JOB.key, [], Action.NOOP),
    Case("a run in progress is waited for", (JOB,),
         lambda: LiveState((job_run(JOB, "Running", "2026-11-30T00:00:00Z"),)),
         JOB.key, [(T.WAIT_JOB, RUN1)], Action.UPDATE),
    Case("a changed RayJob spec is a new run", (JOB2,), lambda: live(JOB), JOB.key,
         [(T.CREATE_JOB, RUN2), (T.WAIT_JOB, RUN2)], Action.CREATE),
    Case("retention deletes the oldest superseded runs", (JOB,),
         lambda: LiveState((*old_runs(5), job_run(JOB, "Complete", "2026-11-30T00:00:00Z"))),
         JOB.key, [(T.DELETE_JOB, o.name) for o in old_runs(5)[:3]], Action.UPDATE,
         replace(CONFIG, rayjob=RayJobSettings(retention=2))),
    Case("a superseded run still going is left alone", (JOB2,),
         lambda: LiveState((job_run(JOB, "Running", "2026-11-29T00:00:00Z"),)),
         JOB.key, [(T.CREATE_JOB, RUN2), (T.WAIT_JOB, RUN2)], Action.CREATE,
         replace(CONFIG, rayjob=RayJobSettings(retention=0))),
    Case("RayJob removed from Git deletes every run", (CM,),
         lambda: LiveState((*old_runs(2), *live(CM).objects)), JOB.key,
         [(T.DELETE_JOB, o.name) for o in old_runs(2)], Action.DELETE),
    Case("a new ConfigMap is applied", (CM,), LiveState, CM.key, [(T.APPLY_OBJECT, "code")],
         Action.CREATE),
    Case("an unchanged ConfigMap has nothing to do", (CM,), lambda: live(CM), CM.key, [],
         Action.NOOP),
    Case("a changed ConfigMap is applied again", (configmap(data={"job.py": "v2"}),),
         lambda: live(CM), CM.key, [(T.APPLY_OBJECT, "code")], Action.UPDATE),
    Case("a ConfigMap removed from Git is pruned", (CL,), lambda: live(CL, CM), CM.key,
         [(T.DELETE_OBJECT, "code")], Action.DELETE),
]


@pytest.mark.parametrize("case", CASES, ids=[c.situation for c in CASES])
def test_workload_plan(case: Case) -> None:
    plan = compute_plan(case.desired, case.live(), case.config, revision="r", against="live",
                        now=NOW)
    wp = plan.workload(case.key)
    assert wp is not None
    assert [(s.type, s.target) for s in wp.steps] == case.steps
    assert wp.action is case.action


def test_autoscaled_cluster_update_keeps_the_live_replicas() -> None:
    desired = raycluster(autoscaling=True, image="ray:next")
    plan = compute_plan((desired,), live(CL_AUTO), CONFIG, revision="r", against="live",
                        now=NOW)
    (step,) = plan.workloads[0].steps
    assert step.params["preserveLiveReplicas"] is True


def test_an_empty_revision_never_prunes() -> None:
    plan = compute_plan((), live(CL, JOB, CM), CONFIG, revision="r", against="live", now=NOW)
    assert not plan.has_changes
    assert "no workloads" in plan.notes[0]


def test_an_empty_revision_prunes_everything_with_allow_empty() -> None:
    cfg = replace(CONFIG, allow_empty=True)
    plan = compute_plan((), live(CL, JOB, CM), cfg, revision="r", against="live", now=NOW)
    assert {w.key for w in plan.workloads} == {CL.key, JOB.key, CM.key}
    assert all(w.action is Action.DELETE for w in plan.workloads)


def test_prune_off_keeps_removed_workloads() -> None:
    cfg = replace(CONFIG, prune=False)
    plan = compute_plan((CM,), live(CL, CM), cfg, revision="r", against="live", now=NOW)
    assert plan.workload(CL.key) is None
    assert "prune is off" in plan.notes[0]


def test_objects_outside_allowed_namespaces_are_never_pruned() -> None:
    cfg = replace(CONFIG, allowed_namespaces=("ray",))
    stranger = raycluster(ns="prod")
    plan = compute_plan((CL,), live(CL, stranger), cfg, revision="r", against="live", now=NOW)
    assert plan.workload(stranger.key) is None
    assert any("outside allowedNamespaces" in n for n in plan.notes)


def test_waves_order_workloads_supporting_objects_first_and_prunes_last() -> None:
    late = rayservice(name="late", wave=2)
    early_cl = raycluster(name="early", wave=-1)
    gone = raycluster(name="gone")
    desired = (late, early_cl, JOB, CM, CL)
    plan = compute_plan(desired, live(gone), CONFIG, revision="r", against="live", now=NOW)
    order = [(w.key.kind, w.key.name) for w in plan.workloads]
    assert order == [("RayCluster", "early"), ("ConfigMap", "code"), ("RayCluster", "cl"),
                     ("RayJob", "job"), ("RayCluster", "gone"), ("RayService", "late")]


def test_the_plan_records_the_live_objects_it_was_computed_against() -> None:
    state = replace_object(live(CL), "cl")
    obj = state.objects[0]
    state = LiveState((LiveObject(obj.kind, obj.namespace, obj.name, "4711", obj.body),))
    plan = compute_plan((CL,), state, CONFIG, revision="r", against="live", now=NOW)
    assert [(b.kind, b.name, b.resource_version) for b in plan.basis] == [
        ("RayCluster", "cl", "4711")]
