"""RayService planning: gitray does the RayService controller's job as an explicit plan. Pure.

A RayService in Git becomes a RayCluster ``<service>-<hash>`` plus two stable Services,
``<service>-head-svc`` and ``<service>-serve-svc``, whose selectors point at the *active*
cluster. Roles are read from live state, never stored separately:

- active:   the cluster the serve Service (else the head Service) selects;
- previous: a non-active cluster carrying a deletion deadline (``gitray.io/delete-after``);
- pending:  any other cluster of this service (an upgrade in flight, or a kept failure).

See SPEC §3 for the rules; each branch below names the situation it handles.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gitray.core.config import Config
from gitray.core.errors import ValidationError
from gitray.core.model import (
    ANN_SERVE_CONFIG_HASH,
    ANN_SPEC_HASH,
    Diagnostic,
    Kind,
    LiveObject,
    ObjectKey,
    Workload,
)
from gitray.plans.diff import subset_changes
from gitray.plans.manifests import (
    service_cluster_manifest,
)
from gitray.plans.names import (
    autoscaling_enabled,
    cluster_hash,
    cluster_spec_hash,
    parse_serve_config,
    serve_config_hash,
    service_cluster_name,
)
from gitray.plans.plan import Action, FieldChange, WorkloadPlan
from gitray.plans.rayservice.bluegreen import blue_green
from gitray.plans.rayservice.context import Ctx, RayServiceLive, read_rayservice_live
from gitray.plans.rayservice.fields import UPGRADE_NONE, foreign_manager, upgrade_type
from gitray.plans.rayservice.incremental import incremental_rollback, incremental_upgrade
from gitray.plans.rayservice.inplace import (
    InPlace,
    judge_in_place,
    live_cluster_hash,
    refusal_message,
)
from gitray.plans.rayservice.routing import ensure_routing, incremental
from gitray.plans.steps import StepList, delete_params, live_wave
from gitray.plans.steptypes import StepType

__all__ = ["RayServiceLive", "desired_hash", "plan_rayservice", "read_rayservice_live"]


def desired_hash(spec: Mapping[str, Any]) -> str:
    """What a RayService's run is planned for (``WorkloadPlan.desired_hash``): its cluster
    spec and its Serve config. A run resumes, and is superseded, by this."""
    cluster_config = dict(spec.get("rayClusterConfig") or {})
    serve = parse_serve_config(str(spec.get("serveConfigV2") or ""))
    return _desired_hash(cluster_config, serve_config_hash(serve))


def _desired_hash(cluster_config: dict[str, Any], serve_hash: str) -> str:
    return f"{cluster_hash(cluster_config)[:16]}.{serve_hash}"


def plan_rayservice(
    key: ObjectKey,
    workload: Workload | None,
    owned: tuple[LiveObject, ...],
    config: Config,
    now: datetime,
    exact: bool,
) -> WorkloadPlan:
    live = read_rayservice_live(owned)
    if workload is not None and (manager := foreign_manager(workload.spec)) is not None:
        return _left_alone(key, workload, manager, owned)
    if workload is None:
        return _plan_removal(key, live, owned)
    ctx = Ctx(workload, live, config, now, exact)
    cluster_config = dict(workload.spec.get("rayClusterConfig") or {})
    serve = parse_serve_config(str(workload.spec.get("serveConfigV2") or ""))
    serve_hash = serve_config_hash(serve)
    target = service_cluster_name(key.name, cluster_config)
    desired_hash = _desired_hash(cluster_config, serve_hash)
    running = live.clusters[live.active] if live.active is not None else None

    if running is None:
        action = _first_rollout(ctx, target, serve, serve_hash)
    elif upgrade_type(workload.spec) == UPGRADE_NONE:
        action = _in_place_only(ctx, running, cluster_config, serve, serve_hash)
    elif live.active == target or live_cluster_hash(running) == cluster_hash(cluster_config):
        # (the second: a cluster grown in place under upgradeStrategy None keeps its name)
        action = _same_cluster(ctx, running.name, cluster_config, serve, serve_hash)
    elif target in live.previous():
        rollback = incremental_rollback if incremental(ctx) else _instant_rollback
        action = rollback(ctx, target, serve, serve_hash)
    else:
        upgrade = incremental_upgrade if incremental(ctx) else blue_green
        action = upgrade(ctx, target, serve, serve_hash)
    changes: tuple[FieldChange, ...] = ()
    if running is not None and live_cluster_hash(running) != cluster_hash(cluster_config):
        changes = ctx.changes(cluster_config, running, "spec.rayClusterConfig")
    return WorkloadPlan(
        key=key, action=action if ctx.steps else Action.NOOP, wave=workload.wave,
        steps=ctx.steps.build(), source=workload.source, desired_hash=desired_hash,
        notes=tuple(ctx.notes), changes=changes,
    )


def _first_rollout(ctx: Ctx, target: str, serve: Mapping[str, object],
                   serve_hash: str) -> Action:
    """First rollout (or resuming one): build the cluster, then create both Services."""
    ctx.abandon_pending(keep=target, revert=False)
    ctx.cleanup_previous(keep=target)
    if target in ctx.live.previous():
        ctx.wait_running(target, serve, serve_hash, f"check Serve is RUNNING on {target}")
        ctx.steps.add(StepType.CANCEL_CLUSTER_DELETION, target, {"cluster": target},
                      f"keep {target}: it serves again")
    else:
        ctx.build_new_cluster(target, serve, serve_hash)
    ctx.point_services(target)
    if incremental(ctx):
        ensure_routing(ctx, target)
    return Action.CREATE if not ctx.live.clusters else Action.UPDATE


def _same_cluster(ctx: Ctx, target: str, cluster_config: Mapping[str, object],
                  serve: Mapping[str, object], serve_hash: str,
                  grown: str | None = None) -> Action:
    """The active cluster matches Git's cluster spec (or only ``grown`` by appended worker
    groups): in-place changes only."""
    active = ctx.live.clusters[target]
    ctx.abandon_pending(keep=None, revert=True)
    ctx.cleanup_previous()
    drift = subset_changes(_replica_view(cluster_config), _replica_view(active.spec), "spec")
    if (grown or drift
            or active.annotations.get(ANN_SPEC_HASH) != cluster_spec_hash(cluster_config)):
        manifest = service_cluster_manifest(ctx.workload, ctx.config.instance, target)
        auto = autoscaling_enabled(cluster_config)
        ctx.steps.add(
            StepType.UPDATE_CLUSTER, target,
            {"manifest": manifest, "preserveLiveReplicas": auto},
            (grown or "replicas changed: update the active cluster in place")
            + (" (the autoscaler keeps owning replicas)" if auto else ""),
        )
    if active.annotations.get(ANN_SERVE_CONFIG_HASH) != serve_hash:
        ctx.deploy_and_wait(target, serve, serve_hash,
                            f"Serve config changed: send it to the active cluster {target}")
    ctx.point_services(target)
    if incremental(ctx):
        ensure_routing(ctx, target)
    return Action.UPDATE


def _in_place_only(ctx: Ctx, running: LiveObject, cluster_config: Mapping[str, object],
                   serve: Mapping[str, object], serve_hash: str) -> Action:
    """``upgradeStrategy.type: None``: the active cluster is the only one, changed in place as
    KubeRay would change it (gitray.plans.rayservice.inplace); any other cluster change is
    refused."""
    verdict = judge_in_place(cluster_config, running, ctx.exact)
    if verdict.kind is InPlace.REFUSED:
        raise ValidationError([Diagnostic(ctx.workload.source,
                                          refusal_message(running.name, verdict))])
    ctx.notes.append(f"upgradeStrategy None: no new cluster; {running.name} is changed in place")
    grown = None
    if verdict.kind is InPlace.APPENDED:
        grown = ("worker group(s) appended: " + ", ".join(verdict.appended)
                 + f" (in place on {running.name}, as KubeRay does)")
    return _same_cluster(ctx, running.name, cluster_config, serve, serve_hash, grown)


def _left_alone(key: ObjectKey, workload: Workload, manager: str,
                owned: tuple[LiveObject, ...]) -> WorkloadPlan:
    """``spec.managedBy`` names another controller: gitray never touches this RayService."""
    kept = f" ({len(owned)} object(s) gitray made before are kept as they are)" if owned else ""
    return WorkloadPlan(
        key=key, action=Action.NOOP, wave=workload.wave, source=workload.source,
        notes=(f"spec.managedBy is {manager!r}: managed by another controller, so gitray "
               f"leaves it alone: nothing is created, changed or deleted{kept}",),
    )


def _replica_view(spec: Mapping[str, object]) -> dict[str, object]:
    """The scaling fields gitray owns on a RayService cluster (none under autoscaling)."""
    if autoscaling_enabled(spec):
        return {}
    groups = spec.get("workerGroupSpecs") or []
    return {"workerGroupSpecs": [
        {k: g[k] for k in ("groupName", "replicas", "minReplicas", "maxReplicas") if k in g}
        for g in groups if isinstance(g, dict)
    ]} if isinstance(groups, list) else {}


def _instant_rollback(ctx: Ctx, target: str, serve: Mapping[str, object],
                      serve_hash: str) -> Action:
    """Git went back to a spec whose cluster still exists: switch back, no new cluster."""
    old = ctx.live.active
    assert old is not None
    if not ctx.go_back_to(target, serve, serve_hash):
        ctx.wait_running(target, serve, serve_hash, f"check Serve is RUNNING on {target}")
    ctx.point_services(target, switch_only=True)
    ctx.steps.add(StepType.CANCEL_CLUSTER_DELETION, target, {"cluster": target},
                  f"keep {target}: it serves again")
    ctx.schedule_deletion(old)
    ctx.notes.append(f"instant rollback: {old} -> {target} (still awaiting deletion)")
    return Action.REPLACE


def _plan_removal(key: ObjectKey, live: RayServiceLive,
                  owned: tuple[LiveObject, ...]) -> WorkloadPlan:
    """Removed from Git (prune on): Services first, then clusters, then anything else."""
    steps = StepList()
    services = [svc for svc in (live.head_service, *live.serve_services) if svc is not None]
    services += [o for o in live.extras if o.kind == "Service"]
    others = [o for o in owned if o.kind not in {Kind.RAY_CLUSTER, "Service"}]
    for step_type, objects in ((StepType.DELETE_SERVICE, services),
                               (StepType.DELETE_CLUSTER, [live.clusters[n]
                                                          for n in sorted(live.clusters)]),
                               (StepType.DELETE_OBJECT, others)):
        for obj in objects:
            steps.add(step_type, obj.name, delete_params(step_type, obj),
                      f"{key.name} was removed from Git")
    return WorkloadPlan(key=key, action=Action.DELETE, wave=live_wave(owned),
                        steps=steps.build())



