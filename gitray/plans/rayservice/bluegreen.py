"""The blue-green RayService upgrade, with its gates. Pure, no I/O.

``upgradeStrategy.type: NewCluster`` (KubeRay's default) builds a pending cluster and switches
both stable Services to it at once. With a ``gitray.io/analysis`` annotation
(``gitray.plans.rayservice.analysis``) the switch is gated::

    create-cluster new · wait-cluster-ready · deploy-serve · wait-serve-running
    · apply-object <new>-serve-svc                       (the new cluster's own serve Service)
    · run-analysis new, gate before-switch               (checks over ``window``)
    · await-approval                                     (``approve: true``)
    · switch-service head, serve → new
    · run-analysis new, gate after-switch                (the old cluster still exists)
    · schedule-cluster-deletion old

A failed gate before the switch fails the run: the switch never happens and the pending
cluster is deleted (or kept, marked failed), as for any upgrade that fails before traffic
moved. A failed gate after it switches both Services back to the old cluster and deletes the
new one (``gitray.engine.gates``). Without checks and without ``approve`` the plan is the
plain blue-green switch.
"""

from __future__ import annotations

from collections.abc import Mapping

from gitray.core.model import JSON
from gitray.plans.plan import Action
from gitray.plans.rayservice.analysis import Analysis, read_analysis
from gitray.plans.rayservice.context import Ctx
from gitray.plans.rayservice.gateway import cluster_serve_service_name, serve_port
from gitray.plans.rayservice.routing import ensure_cluster_service
from gitray.plans.steptypes import StepType

__all__ = ["AFTER_SWITCH", "BEFORE_SWITCH", "approve_command", "blue_green"]

BEFORE_SWITCH, AFTER_SWITCH = "before-switch", "after-switch"


def approve_command(ctx: Ctx) -> str:
    key = ctx.workload.key
    return f"gitray approve {key.namespace}/{key.kind}/{key.name}"


def blue_green(ctx: Ctx, target: str, serve: Mapping[str, object],
               serve_hash: str) -> Action:
    """Cluster spec changed: build a pending cluster, (gate,) switch traffic, (gate,) retire
    the old one."""
    old = ctx.live.active
    assert old is not None
    analysis = read_analysis(ctx.workload.manifest)
    ctx.abandon_pending(keep=target, revert=False)
    ctx.cleanup_previous()
    ctx.build_new_cluster(target, serve, serve_hash)
    checked = analysis is not None and bool(analysis.checks)
    if checked:
        assert analysis is not None
        ensure_cluster_service(ctx, target)
        ctx.steps.add(StepType.RUN_ANALYSIS, target,
                      _gate_params(ctx, analysis, old, target, BEFORE_SWITCH),
                      f"check {target} through its own serve Service before any traffic "
                      "goes to it")
    if analysis is not None and analysis.approve:
        ctx.steps.add(StepType.AWAIT_APPROVAL, target,
                      {"cluster": target, "previous": old, "approve": approve_command(ctx)},
                      "gitray.io/analysis approve: a person decides when the traffic switches")
    ctx.point_services(target)
    if checked:
        assert analysis is not None
        ctx.steps.add(StepType.RUN_ANALYSIS, target,
                      _gate_params(ctx, analysis, old, target, AFTER_SWITCH),
                      f"check {target} with the traffic while {old} still exists (a failure "
                      f"switches back to {old})")
    ctx.schedule_deletion(old)
    gates = [g for g, on in (("analysed before and after the switch", checked),
                             ("approved by hand", analysis is not None and analysis.approve))
             if on]
    ctx.notes.append(f"blue-green upgrade: {old} -> {target}"
                     + (f" ({', '.join(gates)})" if gates else ""))
    return Action.REPLACE


def _gate_params(ctx: Ctx, analysis: Analysis, old: str, new: str,
                 gate: str) -> dict[str, JSON]:
    keep = analysis.keep_failed_clusters
    on_failure: dict[str, JSON] = {
        "trafficTo": old, "keepFailedCluster":
            ctx.config.rayservice.keep_failed_clusters if keep is None else keep}
    if gate == AFTER_SWITCH:
        on_failure["switchBack"] = True
    service = cluster_serve_service_name(new)
    port = serve_port(ctx.workload)
    params: dict[str, JSON] = {
        "cluster": new, "previous": old, "percent": 100 if gate == AFTER_SWITCH else 0,
        "gate": gate, "windowSeconds": analysis.window_s,
        "checks": [c.to_json() for c in analysis.checks],
        "failureLimit": analysis.failure_limit,
        "backend": {"namespace": ctx.workload.key.namespace, "service": service,
                    "port": port},
        "onFailure": on_failure,
    }
    if analysis.probe is not None:
        params["probe"] = {"path": analysis.probe.path, "requests": analysis.probe.requests,
                           "port": port}
    return params
