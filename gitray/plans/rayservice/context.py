"""The planning context of one RayService: its live objects with roles resolved
(``RayServiceLive``) and the step-building moves every strategy shares (``Ctx``). Pure.

``gitray.plans.rayservice.planner`` decides which strategy a change takes (first rollout, in
place, blue-green, instant rollback; ``gitray.plans.rayservice.incremental`` for weighted
traffic steps); the moves here are what those strategies are made of (the Gateway routing
ones: ``gitray.plans.rayservice.routing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gitray.core.config import Config
from gitray.core.model import (
    ANN_DELETE_AFTER,
    ANN_FAILED,
    ANN_SERVE_CONFIG_HASH,
    ANN_SPEC_HASH,
    Kind,
    LiveObject,
    Role,
    Workload,
)
from gitray.core.timefmt import parse_timestamp
from gitray.plans.diff import full_changes, subset_changes
from gitray.plans.manifests import (
    serves_from_workers_only,
    service_cluster_manifest,
    service_manifest,
    service_selector,
)
from gitray.plans.names import (
    head_service_name,
)
from gitray.plans.plan import FieldChange
from gitray.plans.rayservice.routing import (
    drop_cluster_service,
    forget_backend,
    incremental,
    restore_traffic,
)
from gitray.plans.rayservice.serveservice import serve_service_hash, wanted_serve_service_name
from gitray.plans.steps import StepList, delete_params
from gitray.plans.steptypes import StepType

__all__ = ["Ctx", "RayServiceLive", "read_rayservice_live"]


@dataclass(frozen=True)
class RayServiceLive:
    """What the cluster holds for one RayService, with roles resolved."""

    clusters: Mapping[str, LiveObject] = field(default_factory=dict)
    head_service: LiveObject | None = None
    serve_service: LiveObject | None = None
    active: str | None = None
    # every serve Service: two while one named by spec.serveService replaces another
    serve_services: tuple[LiveObject, ...] = ()
    # incremental upgrade: per-cluster serve Services, Gateway, HTTPRoute
    # (gitray.plans.rayservice.gateway)
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
class Ctx:
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
                forget_backend(self, name)
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

    def build_new_cluster(self, target: str, serve: Mapping[str, object],
                          serve_hash: str, target_capacity: int | None = None) -> None:
        """Steps 1-4 of a rollout: create (unless it exists), wait ready, deploy, wait RUNNING."""
        existing = self.live.clusters.get(target)
        if existing is not None and ANN_FAILED in existing.annotations:
            self.steps.add(StepType.DELETE_CLUSTER, target, {"cluster": target},
                          f"cluster {target} failed before ({existing.annotations[ANN_FAILED]}):"
                          " rebuild it")
            existing = None
        if existing is None:
            manifest = service_cluster_manifest(self.workload, self.config.instance)
            self.steps.add(StepType.CREATE_CLUSTER, target, {"manifest": manifest},
                          f"create cluster {target} for the new spec")
        self.steps.add(StepType.WAIT_CLUSTER_READY, target,
                      {"cluster": target,
                       "timeoutSeconds": self.config.rayservice.cluster_ready_timeout_s},
                      "wait until the head pod is ready")
        self.deploy_and_wait(target, serve, serve_hash,
                            f"send the Serve config to the new cluster {target}"
                            + (f" at {target_capacity} % capacity (maxSurgePercent)"
                               if target_capacity is not None else ""), target_capacity)

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


# The old cluster outlives the switch by at least this long, whatever the delay says: after a
# Service's selector moves, kube-proxy (and any other proxy) still sends new connections to the
# old pods until it has reprogrammed its rules. With a 2 s delay under load, CI measured 11 of
# 769 requests refused when the old cluster went away before that.
MIN_DELETION_DELAY_S = 10


def _deletion_delay(workload: Workload, config: Config) -> int:
    value = workload.spec.get("rayClusterDeletionDelaySeconds")
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        value = config.rayservice.deletion_delay_s
    return max(value, MIN_DELETION_DELAY_S)


