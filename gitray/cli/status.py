"""``gitray status``: per workload, the synced revision, the running step, the active and
pending clusters and its health (gitray.plans.health): a RayCluster's state and pods, a RayJob's
latest run, a RayCronJob's schedule and runs, each Serve application of a RayService. I/O
(reads records, live state, the RayCronJobs' runs and dashboards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gitray.core.errors import GitrayError
from gitray.core.model import API_VERSION_RAY, Kind, ObjectKey
from gitray.engine.apply import Desired, read_live
from gitray.engine.progress import ProgressStore, Record, RunState
from gitray.k8s.client import Kube
from gitray.plans.health import CRONJOB_LABEL, serve_health, workload_health
from gitray.plans.rayservice import read_rayservice_live
from gitray.ray.dashboard import Resolver

__all__ = ["StatusRow", "render_status", "workload_status"]


@dataclass(frozen=True)
class StatusRow:
    key: ObjectKey
    revision: str
    state: str
    step: str
    active: str = "-"
    pending: str = "-"
    health: str = "-"
    reason: str = ""


class _NoFence:
    """Status only reads records; it never writes, so it holds no Lease."""

    epoch = 0

    def ensure_held(self) -> None:
        raise GitrayError("gitray status never writes run records")


def _step(record: Record) -> str:
    total = len(record.plan.steps)
    if record.state is RunState.RUNNING and record.cursor < total:
        return f"{record.cursor + 1}/{total} {record.plan.steps[record.cursor].type.value}"
    return f"{min(record.cursor, total)}/{total}"


def _serve_health(resolver: Resolver, namespace: str, cluster: str) -> str:
    try:
        with resolver.serve_client(namespace, cluster) as client:
            apps = client.applications().get("applications") or {}
    except GitrayError as e:
        return f"unknown ({e})"[:60]
    return serve_health(apps)


def _cron_runs(kube: Kube, namespaces: set[str]) -> list[dict[str, Any]]:
    """The RayJobs KubeRay started for RayCronJobs: one LIST per namespace that has any."""
    runs: list[dict[str, Any]] = []
    for ns in sorted(namespaces):
        try:
            items, _ = kube.list(API_VERSION_RAY, Kind.RAY_JOB.value, namespace=ns,
                                 label_selector=CRONJOB_LABEL)
        except GitrayError:
            continue  # health is display only; the row still shows what gitray knows
        runs.extend(items)
    return runs


def workload_status(kube: Kube, desired: Desired, lease_namespace: str,
                    resolver: Resolver) -> list[StatusRow]:
    records = {r.key: r for r in ProgressStore(kube, lease_namespace, desired.config.instance,
                                               _NoFence()).list()}
    live = read_live(kube, desired)
    keys = sorted({w.key for w in desired.workloads} | set(records) | set(live.owners()))
    runs = _cron_runs(kube, {k.namespace for k in keys if k.kind == Kind.RAY_CRON_JOB})
    rows = []
    for key in keys:
        record = records.get(key)
        row = StatusRow(key, record.revision[:12] if record else "-",
                        record.state.value if record else "never applied",
                        _step(record) if record else "-",
                        health=workload_health(key.kind, live.owned_by(key),
                                               [r for r in runs if _in(r, key.namespace)]),
                        reason=record.reason if record else "")
        if key.kind == Kind.RAY_SERVICE:
            rs = read_rayservice_live(live.owned_by(key))
            active = rs.active or "-"
            serve = _serve_health(resolver, key.namespace, rs.active) if rs.active else "-"
            row = StatusRow(row.key, row.revision, row.state, row.step, active,
                            ",".join(sorted(rs.pending())) or "-", serve, row.reason)
        rows.append(row)
    return rows


def _in(item: dict[str, Any], namespace: str) -> bool:
    return bool((item.get("metadata") or {}).get("namespace") == namespace)


def render_status(rows: list[StatusRow]) -> str:
    header = ("WORKLOAD", "REVISION", "STATE", "STEP", "ACTIVE", "PENDING", "HEALTH")
    table = [header] + [(str(r.key), r.revision, r.state, r.step, r.active, r.pending, r.health)
                        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in table]
    lines += [f"{r.key}: {r.reason}" for r in rows if r.reason]
    return "\n".join(lines) + "\n"
