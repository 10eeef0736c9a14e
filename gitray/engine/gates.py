"""The gates of a blue-green RayService upgrade, on the executor's side. Pure, no I/O.

The planner (``gitray.plans.rayservice.bluegreen``) puts a ``run-analysis`` before the switch
(``gate: before-switch``), an ``await-approval`` and a ``run-analysis`` after the switch
(``gate: after-switch``) into the plan. Here:

- :func:`gated`: whether a run needs its signals read (an approval gate waits for ``gitray
  approve``, through ``gitray.engine.incremental.signals``);
- :func:`switch_back_of`: the steps that undo a blue-green switch whose after-switch analysis
  failed while the old cluster still exists — head then serve Service back to the old cluster,
  then the new cluster and its own serve Service deleted (or kept, marked failed, with
  ``keepFailedClusters``);
- :func:`own_service`: the new cluster's own serve Service a plan created (deleted with a
  pending cluster that failed before the switch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gitray.plans.plan import Step, WorkloadPlan
from gitray.plans.rayservice.bluegreen import AFTER_SWITCH
from gitray.plans.rayservice.gateway import cluster_serve_service_name
from gitray.plans.steptypes import StepType

__all__ = ["SwitchBack", "gated", "keep_failed", "own_service", "switch_back_of"]

@dataclass(frozen=True)
class SwitchBack:
    old: str  # the cluster both Services point at again
    new: str  # the cluster the upgrade switched to
    keep: bool  # keep the new cluster (marked failed) instead of deleting it
    steps: tuple[Step, ...]


def gated(plan: WorkloadPlan) -> bool:
    """Whether ``plan`` holds a gate that reads the run's signals (an approval)."""
    return any(s.type is StepType.AWAIT_APPROVAL for s in plan.steps)


def keep_failed(plan: WorkloadPlan, default: bool) -> bool:
    """The gates' ``onFailure.keepFailedCluster`` (the annotation's keepFailedClusters, or
    gitray.yaml's), else ``default``."""
    for s in plan.steps:
        on_failure = s.params.get("onFailure") if s.type is StepType.RUN_ANALYSIS else None
        if isinstance(on_failure, Mapping) and "keepFailedCluster" in on_failure:
            return bool(on_failure["keepFailedCluster"])
    return default


def own_service(plan: WorkloadPlan, cluster: str) -> str | None:
    """``<cluster>-serve-svc`` when ``plan`` applies it (a gated blue-green upgrade)."""
    name = cluster_serve_service_name(cluster)
    return name if any(s.type is StepType.APPLY_OBJECT and s.target == name
                       for s in plan.steps) else None


def switch_back_of(plan: WorkloadPlan, failed_at: int, keep_default: bool
                   ) -> SwitchBack | None:
    """The switch-back of ``plan`` whose step ``failed_at`` failed: only an after-switch
    gate's failure switches back (None otherwise: before the switch nothing moved, the
    pending cluster goes as for any early failure)."""
    failed = plan.steps[failed_at]
    if failed.type is not StepType.RUN_ANALYSIS or failed.params.get("gate") != AFTER_SWITCH:
        return None
    old, new = str(failed.params["previous"]), str(failed.params["cluster"])
    steps: list[Step] = []
    for s in plan.steps[:failed_at]:
        if s.type is not StepType.SWITCH_SERVICE or s.params.get("cluster") != new:
            continue
        role = str(s.params.get("role"))
        selector = dict(s.params.get("selector") or {})
        selector["ray.io/cluster"] = old
        steps.append(Step(f"switch-back-{role}", StepType.SWITCH_SERVICE, s.target,
                          {"role": role, "cluster": old, "from": new, "selector": selector},
                          f"switch back: the {role} Service to {old}"))
    keep = keep_failed(plan, keep_default)
    if not keep:
        service = own_service(plan, new)
        if service is not None:
            steps.append(Step("switch-back-service", StepType.DELETE_SERVICE, service,
                              {"service": service},
                              f"switch back: {new} goes, so does its serve Service"))
        steps.append(Step("switch-back-cluster", StepType.DELETE_CLUSTER, new,
                          {"cluster": new}, f"switch back: delete {new}"))
    return SwitchBack(old, new, keep, tuple(steps))
