"""The Gateway routing moves of a RayService's incremental upgrade, shared by the planning
context (``gitray.plans.rayservice.context``: dropping clusters) and the upgrade itself
(``gitray.plans.rayservice.incremental``): per-cluster serve Services, the Gateway, the HTTPRoute's
weights. Pure, no I/O.

The moves take what they need of the planning context (:class:`Planning`), so this module
sits below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gitray.core.config import Config
from gitray.core.model import JSON, LiveObject, Role, Workload
from gitray.plans.rayservice.fields import UPGRADE_INCREMENTAL, upgrade_type
from gitray.plans.rayservice.gateway import (
    backends,
    cluster_serve_service_manifest,
    cluster_serve_service_name,
    gateway_manifest,
    route_manifest,
    route_name,
    route_refs,
)
from gitray.plans.rayservice.upgradeoptions import IncrementalOptions, read_options
from gitray.plans.steps import StepList
from gitray.plans.steptypes import StepType

__all__ = [
    "Planning",
    "drop_cluster_service",
    "ensure_cluster_service",
    "ensure_routing",
    "forget_backend",
    "incremental",
    "live_extra",
    "restore_traffic",
    "shift",
    "upgrade_options",
]


class LiveView(Protocol):
    @property
    def active(self) -> str | None: ...

    @property
    def extras(self) -> tuple[LiveObject, ...]: ...


class Planning(Protocol):
    """What the routing moves read and add to (``gitray.plans.rayservice.context.Ctx`` is one)."""

    @property
    def workload(self) -> Workload: ...

    @property
    def live(self) -> LiveView: ...

    @property
    def config(self) -> Config: ...

    @property
    def steps(self) -> StepList: ...

    @property
    def name(self) -> str: ...


def incremental(ctx: Planning) -> bool:
    return upgrade_type(ctx.workload.spec) == UPGRADE_INCREMENTAL


def upgrade_options(ctx: Planning) -> IncrementalOptions:
    strategy = ctx.workload.spec.get("upgradeStrategy")
    return read_options(strategy if isinstance(strategy, Mapping) else {})


def live_extra(ctx: Planning, role: Role, name: str) -> LiveObject | None:
    return next((o for o in ctx.live.extras if o.role == role and o.name == name), None)


def drop_cluster_service(ctx: Planning, cluster: str) -> None:
    """Delete ``<cluster>-serve-svc`` with its cluster (when the live state has it)."""
    name = cluster_serve_service_name(cluster)
    if live_extra(ctx, Role.CLUSTER_SERVE_SERVICE, name) is not None:
        ctx.steps.add(StepType.DELETE_SERVICE, name, {"service": name},
                      f"cluster {cluster} goes: so does its serve Service")


def forget_backend(ctx: Planning, cluster: str) -> None:
    """Before an old ``cluster`` (weight 0 since the switch) is deleted: the HTTPRoute with
    the active cluster alone, so it never names a Service that is gone (the Gateway controller
    would report ResolvedRefs False on it). Nothing when the live route does not name it."""
    route = live_extra(ctx, Role.ROUTE, route_name(ctx.name))
    active = ctx.live.active
    if route is None or active is None or active == cluster:
        return
    named = {name for name, _ in route_refs({"spec": route.spec})}
    if cluster_serve_service_name(cluster) not in named:
        return
    manifest = route_manifest(ctx.workload, [(active, 100)], ctx.config.instance)
    ctx.steps.add(StepType.APPLY_OBJECT, route_name(ctx.name), {"manifest": manifest},
                  f"old cluster {cluster} goes: the HTTPRoute keeps {active} alone")


def ensure_cluster_service(ctx: Planning, cluster: str) -> bool:
    """Create ``<cluster>-serve-svc`` unless live; whether it had to be created."""
    name = cluster_serve_service_name(cluster)
    if live_extra(ctx, Role.CLUSTER_SERVE_SERVICE, name) is not None:
        return False
    manifest = cluster_serve_service_manifest(ctx.workload, cluster, ctx.config.instance)
    # gateServe: its pods with a healthy Serve proxy are labelled first (as for the stable
    # serve Service), or the Service has no endpoints and the gateway answers 503
    ctx.steps.add(StepType.APPLY_OBJECT, name, {"manifest": manifest, "gateServe": cluster},
                  f"a serve Service for {cluster} alone (an HTTPRoute backend)")
    return True


def ensure_routing(ctx: Planning, cluster: str) -> None:
    """The per-cluster serve Service of ``cluster``, and when it was missing (a first rollout,
    or a RayService just switched to the incremental upgrade) the Gateway and the HTTPRoute
    sending everything to ``cluster``. A Gateway of another class (when live) is updated."""
    options = upgrade_options(ctx)
    created = ensure_cluster_service(ctx, cluster)
    gateway = gateway_manifest(ctx.workload, options.gateway_class, ctx.config.instance)
    live_gateway = live_extra(ctx, Role.GATEWAY, gateway["metadata"]["name"])
    if created or (live_gateway is not None
                   and live_gateway.spec.get("gatewayClassName") != options.gateway_class):
        ctx.steps.add(StepType.APPLY_OBJECT, gateway["metadata"]["name"],
                      {"manifest": gateway},
                      f"the Gateway (class {options.gateway_class}) in front of {ctx.name}")
    if created:
        route = route_manifest(ctx.workload, [(cluster, 100)], ctx.config.instance)
        ctx.steps.add(StepType.APPLY_OBJECT, route["metadata"]["name"], {"manifest": route},
                      f"the HTTPRoute sending all traffic to {cluster}")


def restore_traffic(ctx: Planning) -> None:
    """Before a pending cluster is dropped mid-upgrade: all traffic back to the active
    cluster, at full Serve capacity."""
    active = ctx.live.active
    if active is None:
        return
    shift(ctx, active, None, 0, "an upgrade is left: all traffic back to " + active)
    ctx.steps.add(StepType.SET_SERVE_CAPACITY, active,
                  {"cluster": active, "targetCapacity": 100},
                  f"{active} serves everything again: full Serve capacity")


def shift(ctx: Planning, old: str, new: str | None, percent: int, why: str,
           step: tuple[int, int] | None = None) -> None:
    weights = [(old, 100 - percent)] + ([(new, percent)] if new is not None else [])
    route = route_manifest(ctx.workload, weights, ctx.config.instance)
    params: dict[str, JSON] = {"route": route["metadata"]["name"], "manifest": route,
                               "cluster": new or old, "from": old, "percent": percent,
                               "backends": backends(ctx.workload, weights)}
    if step is not None:
        params["step"], params["steps"] = step
    ctx.steps.add(StepType.SHIFT_TRAFFIC, route_name(ctx.name), params, why)
