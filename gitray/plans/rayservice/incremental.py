"""RayService incremental upgrade (progressive delivery) as an explicit plan. Pure, no I/O.

``upgradeStrategy.type: NewClusterWithIncrementalUpgrade`` replaces the blue-green switch by
visible weight steps (``gitray.plans.rayservice.upgradeoptions`` computes them from KubeRay's
``clusterUpgradeOptions``)::

    create-cluster new · wait-cluster-ready · deploy-serve (target_capacity = maxSurge)
    · wait-serve-running · per step: [set-serve-capacity new, wait-serve-running,
      set-serve-capacity old] shift-traffic · run-analysis | wait-interval · [pause]
    · switch-service head, serve → new · schedule-cluster-deletion old

Traffic goes through ``<service>-httproute`` (``gitray.plans.rayservice.gateway``); the analysis
and the pauses come from the ``gitray.io/analysis`` annotation
(``gitray.plans.rayservice.analysis``). Leaving an upgrade half-way (a new commit, a revert)
first sends all traffic back to the active cluster at full capacity, then drops the pending
cluster.

The planner only reads what the live state holds: per-cluster serve Services are listed with
the other Services; Gateway and HTTPRoute objects are used when the live state has them.
"""

from __future__ import annotations

from collections.abc import Mapping

from gitray.core.model import JSON
from gitray.plans.plan import Action
from gitray.plans.rayservice.analysis import Analysis, Pause, land_pauses, read_analysis
from gitray.plans.rayservice.context import Ctx
from gitray.plans.rayservice.gateway import (
    cluster_serve_service_name,
    serve_port,
)
from gitray.plans.rayservice.routing import (
    ensure_cluster_service,
    ensure_routing,
    shift,
    upgrade_options,
)
from gitray.plans.rayservice.upgradeoptions import (
    Capacity,
    IncrementalOptions,
    Side,
    Weight,
    schedule,
)
from gitray.plans.steptypes import StepType

__all__ = ["incremental_rollback", "incremental_upgrade"]

_ANALYSIS_METRICS = {  # metric names per gateway (metrics.provider)
    "traefik": {"requests": "traefik_service_requests_total",
                "durations": "traefik_service_request_duration_seconds"},
}


def incremental_upgrade(ctx: Ctx, target: str, serve: Mapping[str, object],
                        serve_hash: str) -> Action:
    """Cluster spec changed: build the new cluster at the surge capacity, move the traffic
    to it weight step by weight step (each held, analysed, maybe paused), then promote."""
    old = ctx.live.active
    assert old is not None
    options = upgrade_options(ctx)
    analysis = read_analysis(ctx.workload.manifest)
    ctx.abandon_pending(keep=target, revert=False)
    ctx.cleanup_previous()
    ctx.build_new_cluster(target, serve, serve_hash,
                       target_capacity=options.max_surge_percent)
    ensure_routing(ctx, old)
    ensure_cluster_service(ctx, target)
    moves = schedule(options)
    weights = [m.percent for m in moves if isinstance(m, Weight)]
    pauses = land_pauses(analysis.pauses, weights)[0] if analysis is not None else {}
    done = 0
    for move in moves:
        if isinstance(move, Capacity) and move.side is Side.NEW:
            ctx.steps.add(StepType.SET_SERVE_CAPACITY, target,
                          {"cluster": target, "targetCapacity": move.percent,
                           "serveConfig": dict(serve), "serveConfigHash": serve_hash},
                          f"grow {target} to {move.percent} % of the Serve replicas "
                          f"(maxSurgePercent {options.max_surge_percent})")
            ctx.wait_running(target, serve, serve_hash,
                             f"wait until {target}'s new replicas are RUNNING")
        elif isinstance(move, Capacity):
            ctx.steps.add(StepType.SET_SERVE_CAPACITY, old,
                          {"cluster": old, "targetCapacity": move.percent},
                          f"shrink {old} to {move.percent} %: its traffic moved away")
        else:
            done += 1
            _weight_step(ctx, options, analysis, old, target, move.percent,
                         (done, len(weights)), pauses.get(done - 1))
    ctx.point_services(target)
    ctx.schedule_deletion(old)
    ctx.notes.append(f"incremental upgrade: {old} -> {target} in {len(weights)} traffic "
                     f"step(s) of {options.step_percent} % every {options.interval_s} s "
                     f"(maxSurgePercent {options.max_surge_percent}, Gateway class "
                     f"{options.gateway_class})" + ("" if analysis is None or not
                                                     analysis.checks else ", analysed"))
    return Action.REPLACE


def _weight_step(ctx: Ctx, options: IncrementalOptions, analysis: Analysis | None,
                 old: str, new: str, percent: int, step: tuple[int, int],
                 pause: Pause | None) -> None:
    shift(ctx, old, new, percent, f"traffic step {step[0]}/{step[1]}: {percent} % to {new}",
           step)
    if analysis is not None and analysis.checks:
        ctx.steps.add(StepType.RUN_ANALYSIS, new,
                      _analysis_params(ctx, analysis, options, old, new, percent, step),
                      f"check {new} while it takes {percent} % of the traffic")
    else:
        ctx.steps.add(StepType.WAIT_INTERVAL, new,
                      {"cluster": new, "seconds": options.interval_s, "percent": percent},
                      f"hold {percent} % for intervalSeconds")
    if pause is not None:
        params: dict[str, JSON] = {"cluster": new, "percent": percent,
                                   "promote": f"gitray promote {ctx.workload.key.namespace}/"
                                              f"{ctx.name}"}
        if pause.seconds is None:
            params["untilPromoted"] = True
        else:
            params["seconds"] = pause.seconds
        ctx.steps.add(StepType.PAUSE, new, params,
                      f"pause at {percent} % (gitray.io/analysis pauses)")


def _analysis_params(ctx: Ctx, analysis: Analysis, options: IncrementalOptions, old: str,
                     new: str, percent: int, step: tuple[int, int]) -> dict[str, JSON]:
    keep = analysis.keep_failed_clusters
    params: dict[str, JSON] = {
        "cluster": new, "previous": old, "percent": percent, "step": step[0],
        "steps": step[1], "windowSeconds": options.interval_s,
        "checks": [c.to_json() for c in analysis.checks],
        "failureLimit": analysis.failure_limit,
        "backend": {"namespace": ctx.workload.key.namespace,
                    "service": cluster_serve_service_name(new),
                    "port": serve_port(ctx.workload)},
        "onFailure": {"trafficTo": old, "restoreCapacity": 100, "keepFailedCluster":
                      ctx.config.rayservice.keep_failed_clusters if keep is None else keep},
    }
    if analysis.metrics_url:
        params["metrics"] = {"url": analysis.metrics_url,
                             "provider": analysis.metrics_provider,
                             **_ANALYSIS_METRICS[analysis.metrics_provider]}
    return params


def incremental_rollback(ctx: Ctx, target: str, serve: Mapping[str, object],
                         serve_hash: str) -> Action:
    """Git went back to a spec whose cluster still exists (deletion not yet due): full
    capacity there, all traffic back to it, no new cluster."""
    old = ctx.live.active
    assert old is not None
    if not ctx.go_back_to(target, serve, serve_hash):
        ctx.steps.add(StepType.SET_SERVE_CAPACITY, target,
                      {"cluster": target, "targetCapacity": 100,
                       "serveConfig": dict(serve), "serveConfigHash": serve_hash},
                      f"{target} takes all traffic again: full Serve capacity")
        ctx.wait_running(target, serve, serve_hash, f"check Serve is RUNNING on {target}")
    ensure_cluster_service(ctx, target)
    shift(ctx, old, target, 100, f"instant rollback: all traffic back to {target}")
    ctx.point_services(target, switch_only=True)
    ctx.steps.add(StepType.CANCEL_CLUSTER_DELETION, target, {"cluster": target},
                  f"keep {target}: it serves again")
    ctx.schedule_deletion(old)
    ctx.notes.append(f"instant rollback: {old} -> {target} (still awaiting deletion)")
    return Action.REPLACE
