"""Each workload's health, read from the cluster and Ray's dashboards. I/O.

The lines themselves are gitray.plans.health's (pure); this module reads what they need: live
state (given), the RayJobs KubeRay started for RayCronJobs (one LIST per namespace holding a
RayCronJob) and, for a RayService, Serve's applications on its active cluster (the dashboards
located by one LIST per namespace: head pods, or Services; not one LIST per RayService, which
held the daemon's pass lock for minutes at 10,000 RayServices). Best effort:
health is display only, so a failed read gives ``unknown (...)`` and never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from gitray.core.errors import GitrayError
from gitray.core.model import API_VERSION_RAY, Kind, LiveState, ObjectKey
from gitray.engine.apply import Desired, read_live_store
from gitray.k8s.client import Kube
from gitray.plans.health import CRONJOB_LABEL, serve_health, workload_health
from gitray.plans.rayservice.planner import read_rayservice_live
from gitray.ray.dashboard import Resolver

__all__ = ["health_by_workload", "health_of"]


def _serve(resolver: Resolver, locate: Callable[[str], str], namespace: str,
           cluster: str) -> str:
    try:
        with resolver.serve_client(namespace, cluster, url=locate(cluster)) as client:
            apps = client.applications().get("applications") or {}
    except GitrayError as e:
        return f"unknown ({e})"[:60]
    return serve_health(apps)


def _locators(resolver: Resolver, namespaces: Iterable[str]) -> dict[str, Callable[[str], str]]:
    """Each namespace's dashboards located by one LIST (a failed LIST: every cluster of the
    namespace unknown, with its reason)."""
    out: dict[str, Callable[[str], str]] = {}
    for ns in sorted(set(namespaces)):
        try:
            out[ns] = resolver.locator(ns)
        except GitrayError as e:
            out[ns] = partial(_raise, e)
    return out


def _raise(e: GitrayError, cluster: str) -> str:
    raise e


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
    active = {k: read_rayservice_live(live.owned_by(k)).active
              for k in keys if k.kind == Kind.RAY_SERVICE}
    locate = _locators(resolver, (k.namespace for k, cluster in active.items() if cluster))
    out: dict[ObjectKey, str] = {}
    for key in keys:
        if key in active:
            cluster = active[key]
            out[key] = _serve(resolver, locate[key.namespace], key.namespace, cluster) \
                if cluster else "-"
        else:
            out[key] = workload_health(key.kind, live.owned_by(key), runs.get(key.namespace, []))
    return out


def health_of(kube: Kube, resolver: Resolver, desired: Desired) -> dict[ObjectKey, str]:
    """:func:`health_by_workload` of ``desired``'s workloads, their live objects read the way
    a pass reads them (``read_live_store``): only theirs kept (a replica's shards), decoded one
    namespace at a time, never the whole live state at once (benchmark 12: a health read held
    every live object of 20,000 workloads decoded, on every replica)."""
    keys = {w.key for w in desired.workloads}
    store = read_live_store(kube, desired, keys.__contains__)
    by_namespace: dict[str, list[ObjectKey]] = {}
    for key in sorted(keys):
        by_namespace.setdefault(key.namespace, []).append(key)
    out: dict[ObjectKey, str] = {}
    for namespace, batch in sorted(by_namespace.items()):
        out.update(health_by_workload(kube, resolver, batch, store.take(namespace)))
    return out
