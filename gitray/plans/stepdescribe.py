"""The plain-English lines of the step types whose line needs more than one expression (the
others write theirs in their row of the step registry, ``gitray.plans.steptypes``). Pure, no I/O.
Each takes (params, target)."""

from __future__ import annotations

from collections.abc import Mapping

from gitray.core.model import JSON
from gitray.plans.stepcodec import duration

__all__ = ["await_approval", "deploy_serve", "pause", "run_analysis", "shift_traffic",
           "switch_service", "update_cluster"]


def _apps(params: Mapping[str, JSON]) -> str:
    apps = (params.get("serveConfig") or {}).get("applications") or []
    names = [str(a.get("name", "default")) for a in apps if isinstance(a, dict)]
    return f"{len(names)} application{'s' if len(names) != 1 else ''}: {', '.join(names)}"


def update_cluster(p: Mapping[str, JSON], t: str) -> str:
    if p.get("recreatePods"):
        return (f"update RayCluster {t}: KubeRay recreates all its pods with the new "
                "template (upgradeStrategy Recreate)")
    if p.get("newPodsOnly"):
        return f"update RayCluster {t}: only pods created from now on get the new template"
    keep = " (keeping the autoscaler's replicas)" if p.get("preserveLiveReplicas") else ""
    return f"update RayCluster {t} in place{keep}"


def deploy_serve(p: Mapping[str, JSON], t: str) -> str:
    if isinstance(p.get("targetCapacity"), int):
        return (f"deploy the Serve config to {t} at target_capacity "
                f"{p['targetCapacity']} % ({_apps(p)})")
    return f"deploy the Serve config to {t} ({_apps(p)})"


def switch_service(p: Mapping[str, JSON], t: str) -> str:
    if p.get("from") == p.get("cluster"):
        return f"change which pods of {p.get('cluster')} Service {t} selects"
    return f"switch Service {t}: {p.get('from') or '(none)'} -> {p.get('cluster')}"


def shift_traffic(p: Mapping[str, JSON], route: str) -> str:
    new, old, percent = p.get("cluster"), p.get("from"), p.get("percent")
    if new == old:
        return f"send all traffic to {new} (HTTPRoute {route})"
    step = f" step {p.get('step')}/{p.get('steps')}" if p.get("step") else ""
    rest = 100 - percent if isinstance(percent, int) else "?"
    return f"shift traffic{step}: {percent} % to {new}, {rest} % to {old} (HTTPRoute {route})"


def _check(check: Mapping[str, JSON]) -> str:
    match check.get("type"):
        case "success-rate":
            return f"success rate >= {check.get('min')} %"
        case "latency":
            return f"p{check.get('percentile')} latency <= {check.get('maxMs')} ms"
        case "webhook":
            return f"webhook {check.get('name')}"
    return "Serve health"


def run_analysis(p: Mapping[str, JSON], cluster: str) -> str:
    checks = ", ".join(_check(c) for c in p.get("checks") or [] if isinstance(c, dict))
    limit = p.get("failureLimit")
    gate = p.get("gate")
    if gate is not None:  # a blue-green upgrade's gate
        then = (f"switch back to {p.get('previous')}" if gate == "after-switch"
                else "fail without switching")
        return (f"analyse {cluster} {str(gate).replace('-', ' the ')} over "
                f"{duration(p.get('windowSeconds'))}: {checks} ({then} after {limit} failed "
                f"analys{'i' if limit == 1 else 'e'}s)")
    return (f"analyse {cluster} at {p.get('percent')} % over {duration(p.get('windowSeconds'))}"
            f": {checks} (roll back after {limit} failed analys{'i' if limit == 1 else 'e'}s)")


def await_approval(p: Mapping[str, JSON], t: str) -> str:
    return (f"hold before switching to {p.get('cluster')} until `{p.get('approve')}`"
            f" ({p.get('previous')} serves meanwhile)")


def pause(p: Mapping[str, JSON], t: str) -> str:
    if p.get("untilPromoted"):
        return f"pause at {p.get('percent')} % until `{p.get('promote')}`"
    return f"pause at {p.get('percent')} % for {duration(p.get('seconds'))}"
