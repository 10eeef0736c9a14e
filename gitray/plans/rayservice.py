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
from dataclasses import dataclass, field
from datetime import datetime

from gitray.core.config import Config
from gitray.core.errors import ValidationError
from gitray.core.model import (
    ANN_DELETE_AFTER,
    ANN_FAILED,
    ANN_SERVE_CONFIG_HASH,
    ANN_SPEC_HASH,
    Diagnostic,
    Kind,
    LiveObject,
    ObjectKey,
    Role,
    Workload,
)
from gitray.core.timefmt import parse_timestamp
from gitray.plans.diff import full_changes, subset_changes
from gitray.plans.fields import UPGRADE_NONE, foreign_manager, upgrade_type
from gitray.plans.incremental import (
    drop_cluster_service,
    ensure_routing,
    incremental,
    incremental_rollback,
    incremental_upgrade,
    restore_traffic,
)
from gitray.plans.inplace import InPlace, judge_in_place, live_cluster_hash, refusal_message
from gitray.plans.manifests import (
    serves_from_workers_only,
    service_cluster_manifest,
    service_manifest,
    service_selector,
)
from gitray.plans.names import (
    autoscaling_enabled,
    cluster_hash,
    cluster_spec_hash,
    head_service_name,
    parse_serve_config,
    serve_config_hash,
    service_cluster_name,
)
from gitray.plans.plan import Action, FieldChange, StepType, WorkloadPlan
from gitray.plans.serveservice import serve_service_hash, wanted_serve_service_name
from gitray.plans.steps import StepList, delete_params, live_wave

__all__ = ["RayServiceLive", "plan_rayservice", "read_rayservice_live"]


@dataclass(frozen=True)
class RayServiceLive:
    """What the cluster holds for one RayService, with roles resolved."""

    clusters: Mapping[str, LiveObject] = field(default_factory=dict)
    head_service: LiveObject | None = None
    serve_service: LiveObject | None = None
    active: str | None = None
    # every serve Service: two while one named by spec.serveService replaces another
    serve_services: tuple[LiveObject, ...] = ()
    # incremental upgrade: per-cluster serve Services, Gateway, HTTPRoute (gitray.plans.gateway)
    extras: tuple[LiveObject, ...] = ()

    def previous(self) -> dict[str, LiveObject]:
        return {n: c for n, c in self.clusters.items()
                if n != self.active and ANN_DELETE_AFTER in c.annotations}

    def pending(self) -> dict[str, LiveObject]:
        return {n: c for n, c in self.clusters.items()
                if n != self.active and ANN_DELETE_AFTER not in c.annotations}


def _selected_cluster(svc: LiveObject | None) -> str | None:
    if svc is None:
        return None
    selector = svc.spec.get("selector") or {}
    value = selector.get("ray.io/cluster")
    return value if isinstance(value, str) else None


def read_rayservice_live(owned: tuple[LiveObject, ...]) -> RayServiceLive:
    clusters = {o.name: o for o in owned if o.kind == Kind.RAY_CLUSTER}
    head = next((o for o in owned if o.kind == "Service" and o.role == Role.HEAD_SERVICE), None)
    serves = tuple(o for o in owned if o.kind == "Service" and o.role == Role.SERVE_SERVICE)
    serve = next(iter(serves), None)
    active = _selected_cluster(serve) or _selected_cluster(head)
    if active not in clusters:
        active = None  # a Service pointing at a cluster that is gone: nothing is serving
    extras = tuple(o for o in owned if o.role in _EXTRA_ROLES)
    return RayServiceLive(clusters=clusters, head_service=head, serve_service=serve,
                          active=active, serve_services=serves, extras=extras)


_EXTRA_ROLES = frozenset({Role.CLUSTER_SERVE_SERVICE.value, Role.GATEWAY.value,
                          Role.ROUTE.value})


def _due(cluster: LiveObject, now: datetime) -> bool:
    deadline = parse_timestamp(cluster.annotations.get(ANN_DELETE_AFTER, ""))
    # An unreadable deadline is treated as due: the cluster is not serving and was scheduled.
    return deadline is None or deadline <= now


@dataclass
class _Ctx:
    workload: Workload
    live: RayServiceLive
    config: Config
    now: datetime
    exact: bool
    steps: StepList = field(default_factory=StepList)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.workload.key.name

    def cleanup_previous(self, keep: str | None = None) -> None:
        """Delete previous clusters whose deadline passed; note the others."""
        for name, cluster in sorted(self.live.previous().items()):
            if name == keep:
                continue
            when = cluster.annotations.get(ANN_DELETE_AFTER, "?")
            if _due(cluster, self.now):
                self.steps.add(StepType.DELETE_CLUSTER, name, {"cluster": name},
                               f"deletion of old cluster {name} was due at {when}")
                drop_cluster_service(self, name)
            else:
                self.notes.append(f"old cluster {name} is scheduled for deletion at {when}")

    def abandon_pending(self, keep: str | None, revert: bool) -> None:
        dropped = sorted(n for n in self.live.pending() if n != keep)
        if dropped and incremental(self):  # it may be taking traffic: take it back first
            restore_traffic(self)
        for name in dropped:
            if revert:
                self.steps.add(StepType.CANCEL_UPGRADE, name, {"cluster": name},
                               f"Git reverted to the active spec: cancel the upgrade to {name}")
            else:
                self.steps.add(StepType.DELETE_CLUSTER, name, {"cluster": name},
                               f"pending cluster {name} no longer matches Git: abandon it")
            drop_cluster_service(self, name)

    def point_services(self, target: str, *, switch_only: bool = False) -> None:
        """Create or switch head then serve Service to ``target`` (head first, always); then
        bring the serve Service to its ``spec.serveService`` template."""
        serve_name = wanted_serve_service_name(self.name, self.workload.spec)
        serve_svc = next((s for s in self.live.serve_services if s.name == serve_name), None)
        for role, svc, svc_name in (
            (Role.HEAD_SERVICE, self.live.head_service, head_service_name(self.name)),
            (Role.SERVE_SERVICE, serve_svc, serve_name),
        ):
            label = "head" if role is Role.HEAD_SERVICE else "serve"
            selector = service_selector(role, target,
                                        workers_only=serves_from_workers_only(self.workload))
            templated = role is Role.SERVE_SERVICE and serve_service_hash(self.workload.spec)
            if svc is None and (not switch_only or templated):
                manifest = service_manifest(self.workload, role, target, self.config.instance)
                params: dict[str, object] = {"role": label, "cluster": target,
                                             "manifest": manifest}
                if templated:  # applied, so a later template change can remove what it drops
                    params["serverSideApply"] = True
                self.steps.add(StepType.CREATE_SERVICE, svc_name, params,
                               f"create the {label} Service pointing at {target}")
            elif svc is None or _selected_cluster(svc) != target:
                self.steps.add(
                    StepType.SWITCH_SERVICE, svc_name,
                    {"role": label, "cluster": target, "from": _selected_cluster(svc),
                     "selector": selector},
                    f"switch the {label} Service to {target}",
                )
            elif dict(svc.spec.get("selector") or {}) != selector:  # excludeHeadPodFromServeSvc
                self.steps.add(
                    StepType.SWITCH_SERVICE, svc_name,
                    {"role": label, "cluster": target, "from": target, "selector": selector},
                    f"the {label} Service's pods changed (excludeHeadPodFromServeSvc)",
                )
        self.follow_serve_template(serve_svc, serve_name, target)

    def follow_serve_template(self, svc: LiveObject | None, name: str, target: str) -> None:
        """Apply a changed ``spec.serveService`` in place; retire a serve Service renamed."""
        wanted = serve_service_hash(self.workload.spec)
        if svc is not None and svc.annotations.get(ANN_SPEC_HASH) != wanted and (
                wanted is not None or ANN_SPEC_HASH in svc.annotations):
            manifest = service_manifest(self.workload, Role.SERVE_SERVICE, target,
                                        self.config.instance)
            self.steps.add(StepType.APPLY_OBJECT, name, {"manifest": manifest},
                           "spec.serveService changed: update the serve Service in place")
        for old in self.live.serve_services:
            if old.name != name:
                self.steps.add(StepType.DELETE_SERVICE, old.name,
                               delete_params(StepType.DELETE_SERVICE, old),
                               f"the serve Service is now {name} (spec.serveService)")

    def deploy_and_wait(self, cluster: str, serve: Mapping[str, object], serve_hash: str,
                        why: str, target_capacity: int | None = None) -> None:
        params: dict[str, object] = {
            "cluster": cluster, "serveConfig": dict(serve), "serveConfigHash": serve_hash,
            "timeoutSeconds": self.config.rayservice.serve_ready_timeout_s}
        if target_capacity is not None:  # Serve's target_capacity (incremental upgrade)
            params["targetCapacity"] = target_capacity
        self.steps.add(StepType.DEPLOY_SERVE, cluster, params, why)
        self.wait_running(cluster, serve, serve_hash,
                          "wait until every Serve application is RUNNING")

    def go_back_to(self, target: str, serve: Mapping[str, object], serve_hash: str) -> bool:
        """The start of going back to a cluster that still exists (Git reverted before its
        deletion was due): no pending cluster, no other previous one, and the Serve config
        sent to it again if it differs. True when it was sent (and waited for)."""
        previous = self.live.clusters[target]
        self.abandon_pending(keep=None, revert=False)
        self.cleanup_previous(keep=target)
        if previous.annotations.get(ANN_SERVE_CONFIG_HASH) == serve_hash:
            return False
        self.deploy_and_wait(target, serve, serve_hash,
                             f"send the Serve config to {target} before switching back")
        return True

    def wait_running(self, cluster: str, serve: Mapping[str, object], serve_hash: str,
                     why: str) -> None:
        self.steps.add(StepType.WAIT_SERVE_RUNNING, cluster,
                       {"cluster": cluster, "serveConfig": dict(serve),
                        "serveConfigHash": serve_hash,
                        "timeoutSeconds": self.config.rayservice.serve_ready_timeout_s}, why)

    def schedule_deletion(self, cluster: str) -> None:
        delay = _deletion_delay(self.workload, self.config)
        self.steps.add(StepType.SCHEDULE_CLUSTER_DELETION, cluster,
                       {"cluster": cluster, "delaySeconds": delay},
                       f"delete old cluster {cluster} {delay} s after the switch")

    def changes(self, desired: Mapping[str, object], live: LiveObject | None,
                prefix: str) -> tuple[FieldChange, ...]:
        if live is None:
            return ()
        compare = full_changes if self.exact else subset_changes
        return compare(desired, live.spec, prefix)


def _deletion_delay(workload: Workload, config: Config) -> int:
    value = workload.spec.get("rayClusterDeletionDelaySeconds")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return config.rayservice.deletion_delay_s


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
    ctx = _Ctx(workload, live, config, now, exact)
    cluster_config = dict(workload.spec.get("rayClusterConfig") or {})
    serve = parse_serve_config(str(workload.spec.get("serveConfigV2") or ""))
    serve_hash = serve_config_hash(serve)
    target = service_cluster_name(key.name, cluster_config)
    desired_hash = f"{cluster_hash(cluster_config)[:16]}.{serve_hash}"
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
        upgrade = incremental_upgrade if incremental(ctx) else _blue_green
        action = upgrade(ctx, target, serve, serve_hash)
    changes: tuple[FieldChange, ...] = ()
    if running is not None and live_cluster_hash(running) != cluster_hash(cluster_config):
        changes = ctx.changes(cluster_config, running, "spec.rayClusterConfig")
    return WorkloadPlan(
        key=key, action=action if ctx.steps else Action.NOOP, wave=workload.wave,
        steps=ctx.steps.build(), source=workload.source, desired_hash=desired_hash,
        notes=tuple(ctx.notes), changes=changes,
    )


def _build_new_cluster(ctx: _Ctx, target: str, serve: Mapping[str, object],
                       serve_hash: str, target_capacity: int | None = None) -> None:
    """Steps 1-4 of a rollout: create (unless it exists), wait ready, deploy, wait RUNNING."""
    existing = ctx.live.clusters.get(target)
    if existing is not None and ANN_FAILED in existing.annotations:
        ctx.steps.add(StepType.DELETE_CLUSTER, target, {"cluster": target},
                      f"cluster {target} failed before ({existing.annotations[ANN_FAILED]}):"
                      " rebuild it")
        existing = None
    if existing is None:
        manifest = service_cluster_manifest(ctx.workload, ctx.config.instance)
        ctx.steps.add(StepType.CREATE_CLUSTER, target, {"manifest": manifest},
                      f"create cluster {target} for the new spec")
    ctx.steps.add(StepType.WAIT_CLUSTER_READY, target,
                  {"cluster": target,
                   "timeoutSeconds": ctx.config.rayservice.cluster_ready_timeout_s},
                  "wait until the head pod is ready")
    ctx.deploy_and_wait(target, serve, serve_hash,
                        f"send the Serve config to the new cluster {target}"
                        + (f" at {target_capacity} % capacity (maxSurgePercent)"
                           if target_capacity is not None else ""), target_capacity)


def _first_rollout(ctx: _Ctx, target: str, serve: Mapping[str, object],
                   serve_hash: str) -> Action:
    """First rollout (or resuming one): build the cluster, then create both Services."""
    ctx.abandon_pending(keep=target, revert=False)
    ctx.cleanup_previous(keep=target)
    if target in ctx.live.previous():
        ctx.wait_running(target, serve, serve_hash, f"check Serve is RUNNING on {target}")
        ctx.steps.add(StepType.CANCEL_CLUSTER_DELETION, target, {"cluster": target},
                      f"keep {target}: it serves again")
    else:
        _build_new_cluster(ctx, target, serve, serve_hash)
    ctx.point_services(target)
    if incremental(ctx):
        ensure_routing(ctx, target)
    return Action.CREATE if not ctx.live.clusters else Action.UPDATE


def _same_cluster(ctx: _Ctx, target: str, cluster_config: Mapping[str, object],
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


def _in_place_only(ctx: _Ctx, running: LiveObject, cluster_config: Mapping[str, object],
                   serve: Mapping[str, object], serve_hash: str) -> Action:
    """``upgradeStrategy.type: None``: the active cluster is the only one, changed in place as
    KubeRay would change it (gitray.plans.inplace); any other cluster change is refused."""
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


def _blue_green(ctx: _Ctx, target: str, serve: Mapping[str, object],
                serve_hash: str) -> Action:
    """Cluster spec changed: build a pending cluster, switch traffic, retire the old one."""
    old = ctx.live.active
    assert old is not None
    ctx.abandon_pending(keep=target, revert=False)
    ctx.cleanup_previous()
    _build_new_cluster(ctx, target, serve, serve_hash)
    ctx.point_services(target)
    ctx.schedule_deletion(old)
    ctx.notes.append(f"blue-green upgrade: {old} -> {target}")
    return Action.REPLACE


def _instant_rollback(ctx: _Ctx, target: str, serve: Mapping[str, object],
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



