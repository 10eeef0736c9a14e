"""Each workload's health, read from the cluster and Ray's dashboards. I/O.

The lines themselves are gitray.plans.health's (pure); this module reads what they need: live
state (given), the RayJobs KubeRay started for RayCronJobs (one LIST per namespace holding a
RayCronJob) and, for a RayService, Serve's applications on its active cluster. Best effort:
health is display only, so a failed read gives ``unknown (...)`` and never an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gitray.core.errors import GitrayError
from gitray.core.model import API_VERSION_RAY, Kind, LiveState, ObjectKey
from gitray.k8s.client import Kube
from gitray.plans.health import CRONJOB_LABEL, serve_health, workload_health
from gitray.plans.rayservice.planner import read_rayservice_live
from gitray.ray.dashboard import Resolver

__all__ = ["health_by_workload"]


def _serve(resolver: Resolver, namespace: str, cluster: str) -> str:
    try:
        with resolver.serve_client(namespace, cluster) as client:
            apps = client.applications().get("applications") or {}
    except GitrayError as e:
        return f"unknown ({e})"[:60]
    return serve_health(apps)


def _cron_runs(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    try:
        items, _ = kube.list(API_VERSION_RAY, Kind.RAY_JOB.value, namespace=namespace,
                             label_selector=CRONJOB_LABEL)
    except GitrayError:
        return []
    return items


def health_by_workload(kube: Kube, resolver: Resolver, keys: Iterable[ObjectKey],
                       live: LiveState) -> dict[ObjectKey, str]:
    keys = sorted(set(keys))
    runs = {ns: _cron_runs(kube, ns)
            for ns in sorted({k.namespace for k in keys if k.kind == Kind.RAY_CRON_JOB})}
    out: dict[ObjectKey, str] = {}
    for key in keys:
        if key.kind == Kind.RAY_SERVICE:
            active = read_rayservice_live(live.owned_by(key)).active
            out[key] = _serve(resolver, key.namespace, active) if active else "-"
        else:
            out[key] = workload_health(key.kind, live.owned_by(key), runs.get(key.namespace, []))
    return out
