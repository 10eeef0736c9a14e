"""Ray-aware health of each workload kind, from live objects' status. Pure, no I/O.

One short line per workload for ``gitray status`` and the commit statuses:

- RayCluster (and a RayService's active cluster): KubeRay's state, the head pod, ready workers;
- RayJob: the latest run's Ray job status and KubeRay's deployment status;
- RayCronJob: suspended or not, the last schedule time and its runs (RayJobs KubeRay made,
  labelled ``ray.io/cronjob-name``) by Ray job status;
- RayService: each Serve application's status on the active cluster.

Display only: no plan decision is ever taken on these lines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gitray.core.model import Kind, LiveObject

__all__ = ["CRONJOB_LABEL", "cluster_health", "cronjob_health", "job_health",
           "serve_health", "workload_health"]

CRONJOB_LABEL = "ray.io/cronjob-name"  # KubeRay labels each RayJob a RayCronJob starts


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _condition(status: Mapping[str, Any], kind: str) -> str | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def cluster_health(cluster: Mapping[str, Any]) -> str:
    """``ready, head ready, 1/1 workers ready`` from a RayCluster's status. A cluster suspended
    (or suspending) because its spec asks it to is said so, not as a head that is not ready:
    no Ray pod is wanted (``suspended as asked (spec.suspend: true)``)."""
    spec, status = _mapping(cluster.get("spec")), _mapping(cluster.get("status"))
    state = str(status.get("state") or "").lower() or "starting"
    if state == "suspended" or _condition(status, "RayClusterSuspending") == "True":
        if spec.get("suspend") is True:
            what = "suspended" if state == "suspended" else "suspending"
            return f"{what} as asked (spec.suspend: true), no Ray pods wanted"
        return "suspended, resuming (spec.suspend: false)"
    head = {"True": "head ready", "False": "head not ready"}.get(
        _condition(status, "HeadPodReady") or "", "head pending")
    wanted = status.get("desiredWorkerReplicas")
    if not isinstance(wanted, int):
        wanted = sum(g.get("replicas", 0) or 0 for g in spec.get("workerGroupSpecs") or []
                     if isinstance(g, Mapping))
    ready = status.get("readyWorkerReplicas") or 0
    return f"{state}, {head}, {ready}/{wanted} workers ready"


def job_health(run: Mapping[str, Any]) -> str:
    """``SUCCEEDED (Complete)``: Ray's job status and KubeRay's deployment status."""
    status = _mapping(run.get("status"))
    job = status.get("jobStatus") or "PENDING"
    deployment = status.get("jobDeploymentStatus") or "New"
    message = str(status.get("message") or "")
    failed = job == "FAILED" or deployment == "Failed"
    return f"{job} ({deployment})" + (f": {message[:80]}" if failed and message else "")


def cronjob_health(cron: Mapping[str, Any], runs: Iterable[Mapping[str, Any]]) -> str:
    """``last run 2026-12-01T15:40:00Z, 2 run(s): 1 SUCCEEDED, 1 RUNNING``."""
    spec, status = _mapping(cron.get("spec")), _mapping(cron.get("status"))
    mine = [r for r in runs if _mapping(_mapping(r.get("metadata")).get("labels")).get(
        CRONJOB_LABEL) == _mapping(cron.get("metadata")).get("name")]
    prefix = "suspended, " if spec.get("suspend") is True else ""
    last = status.get("lastScheduleTime")
    if not last:
        return f"{prefix}not run yet (schedule {spec.get('schedule')!r})"
    counts = Counter(str(_mapping(r.get("status")).get("jobStatus") or "PENDING") for r in mine)
    by_status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"{prefix}last run {last}, {len(mine)} run(s)" + (f": {by_status}" if mine else "")


def serve_health(applications: Mapping[str, Any]) -> str:
    """``greeter RUNNING, calc DEPLOYING`` from Serve's GET /api/serve/applications/."""
    if not applications:
        return "no Serve application"
    return ", ".join(f"{name} {_mapping(app).get('status') or '?'}"
                     for name, app in sorted(applications.items()))


def _newest(objects: Iterable[LiveObject]) -> LiveObject | None:
    return max(objects, key=lambda o: str(o.metadata.get("creationTimestamp") or ""),
               default=None)


def workload_health(kind: str, owned: Iterable[LiveObject],
                    cron_runs: Iterable[Mapping[str, Any]] = ()) -> str:
    """The health line of a RayCluster, RayJob or RayCronJob from what gitray owns of it
    (a RayService's comes from Serve: :func:`serve_health`); ``-`` when nothing is live."""
    owned = tuple(owned)
    if kind == Kind.RAY_CLUSTER:
        cluster = _newest(o for o in owned if o.kind == Kind.RAY_CLUSTER)
        return cluster_health(cluster.body) if cluster else "-"
    if kind == Kind.RAY_JOB:
        run = _newest(o for o in owned if o.kind == Kind.RAY_JOB)
        return f"{run.name}: {job_health(run.body)}" if run else "-"
    if kind == Kind.RAY_CRON_JOB:
        cron = _newest(o for o in owned if o.kind == Kind.RAY_CRON_JOB)
        return cronjob_health(cron.body, cron_runs) if cron else "-"
    return "-"
