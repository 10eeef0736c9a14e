"""Prometheus metrics of the daemon, in one registry (served on ``/metrics``). No I/O here.

Besides the totals, one series set per workload (``WorkloadTable``): its state, the step its
run is at, the traffic share on an incremental upgrade's new cluster, health, when it last
converged. Label sets stay bounded: workloads that leave Git are dropped at the next
convergence, and at most ``MAX_WORKLOADS`` are tracked.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gitray.core.model import ObjectKey

__all__ = ["MAX_WORKLOADS", "STATES", "Metrics", "WorkloadTable", "WorkloadView"]

MAX_WORKLOADS = 2000
STATES = ("in-sync", "progressing", "failed", "superseded")
_LABELS = ["namespace", "kind", "name"]


@dataclass(frozen=True)
class WorkloadView:
    """What the metrics show of one workload (times are wall-clock seconds)."""

    state: str = ""  # one of STATES, "" before the first pass that touched it
    step: int = 0  # 1-based index of the running step (0: no run)
    steps: int = 0
    step_started: float | None = None
    traffic_percent: int | None = None  # share on an incremental upgrade's new cluster
    pending_since: float | None = None  # a new RayService cluster not yet serving all traffic
    healthy: bool | None = None
    last_converged: float | None = None
    revision: str = ""  # of the current or last run (the status page; not a label)


class WorkloadTable(Collector):
    """The per-workload series, computed at scrape time from one table of views."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._views: dict[ObjectKey, WorkloadView] = {}
        self.clock = clock

    def get(self, key: ObjectKey) -> WorkloadView:
        return self._views.get(key, WorkloadView())

    def views(self) -> dict[ObjectKey, WorkloadView]:
        return dict(self._views)

    def update(self, key: ObjectKey, **changes: Any) -> None:
        with self._lock:
            if key not in self._views and len(self._views) >= MAX_WORKLOADS:
                return
            self._views[key] = replace(self._views.get(key, WorkloadView()), **changes)

    def keep(self, keys: Iterable[ObjectKey]) -> list[ObjectKey]:
        """Drop the workloads not in ``keys``; returns the dropped ones."""
        wanted = set(keys)
        with self._lock:
            gone = [k for k in self._views if k not in wanted]
            for k in gone:
                del self._views[k]
        return gone

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.clock()
        views = sorted(self.views().items(), key=lambda kv: str(kv[0]))
        state = GaugeMetricFamily("gitray_workload_state",
                                  "1 for the workload's current state, 0 for the others",
                                  labels=[*_LABELS, "state"])
        step = GaugeMetricFamily("gitray_workload_step",
                                 "1-based index of the step the workload's run is at (0: idle)",
                                 labels=_LABELS)
        steps = GaugeMetricFamily("gitray_workload_steps",
                                  "Steps of the workload's current or last run", labels=_LABELS)
        started = GaugeMetricFamily("gitray_workload_step_started_timestamp_seconds",
                                    "When the running step started", labels=_LABELS)
        traffic = GaugeMetricFamily("gitray_workload_traffic_percent",
                                    "Share of traffic on an incremental upgrade's new cluster",
                                    labels=_LABELS)
        pending = GaugeMetricFamily("gitray_workload_pending_cluster_since_timestamp_seconds",
                                    "When a RayService's new cluster was created (until it "
                                    "serves all traffic or is gone)", labels=_LABELS)
        healthy = GaugeMetricFamily("gitray_workload_healthy",
                                    "1 healthy, 0 unhealthy (as last read)", labels=_LABELS)
        converged = GaugeMetricFamily("gitray_workload_last_converged_timestamp_seconds",
                                      "When the workload last converged", labels=_LABELS)
        since = GaugeMetricFamily("gitray_workload_seconds_since_converged",
                                  "Seconds since the workload last converged", labels=_LABELS)
        for key, v in views:
            labels = [key.namespace, key.kind, key.name]
            if v.state:
                for s in STATES:
                    state.add_metric([*labels, s], 1.0 if s == v.state else 0.0)
            step.add_metric(labels, float(v.step))
            steps.add_metric(labels, float(v.steps))
            if v.step_started is not None and v.step:
                started.add_metric(labels, v.step_started)
            if v.traffic_percent is not None:
                traffic.add_metric(labels, float(v.traffic_percent))
            if v.pending_since is not None:
                pending.add_metric(labels, v.pending_since)
            if v.healthy is not None:
                healthy.add_metric(labels, 1.0 if v.healthy else 0.0)
            if v.last_converged is not None:
                converged.add_metric(labels, v.last_converged)
                since.add_metric(labels, max(0.0, now - v.last_converged))
        yield from (state, step, steps, started, traffic, pending, healthy, converged, since)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.sync_duration = Histogram(
            "gitray_sync_duration_seconds", "Duration of a sync pass (plan + execute)",
            ["trigger"], registry=r,
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800))
        self.steps = Counter("gitray_steps_total", "Plan steps executed, by type and result",
                             ["type", "result"], registry=r)
        self.last_synced = Gauge("gitray_last_synced_revision_info",
                                 "1 for the revision the cluster last converged to",
                                 ["revision"], registry=r)
        self.last_sync_time = Gauge("gitray_last_sync_timestamp_seconds",
                                    "When the last sync pass finished", registry=r)
        self.leader = Gauge("gitray_leader", "1 while this replica holds the Lease", registry=r)
        self.shards_held = Gauge("gitray_shards_held", "Shards this replica drives (--shards; "
                                 "unsharded: 1 while it holds the Lease)", registry=r)
        self.git_fetch = Histogram("gitray_git_fetch_duration_seconds",
                                   "Duration of git fetch + revision resolution", registry=r)
        self.git_errors = Counter("gitray_git_errors_total",
                                  "Failed fetches or unreadable revisions", registry=r)
        self.api_errors = Counter("gitray_api_errors_total",
                                  "Kubernetes API errors seen by sync passes", ["kind"],
                                  registry=r)
        self.invalid_revisions = Counter("gitray_invalid_revisions_total",
                                         "Revisions refused (validation or signature)",
                                         registry=r)
        self.workloads = Gauge("gitray_workloads", "Workloads by last outcome", ["outcome"],
                               registry=r)
        self.in_flight = Gauge("gitray_runs_in_flight", "Workload runs going on now",
                               registry=r)
        self.status_posts = Counter("gitray_status_posts_total",
                                    "Commit-status posts by result", ["result"], registry=r)
        self.polls = Counter("gitray_polls_total", "Poll jobs run", registry=r)
        self.webhooks = Counter("gitray_webhooks_total", "Webhook deliveries by result",
                                ["result"], registry=r)
        self.analyses = Counter("gitray_analyses_total",
                                "Analyses of incremental upgrades by workload and result",
                                [*_LABELS, "result"], registry=r)
        self.drift_healed = Counter("gitray_drift_healed_total",
                                    "Drift passes that changed a workload back to Git",
                                    _LABELS, registry=r)
        self.notifications = Counter("gitray_notifications_total",
                                     "Notifications by receiver and result (sent, retried, "
                                     "failed, deduplicated, dropped)", ["receiver", "result"],
                                     registry=r)
        self.table = WorkloadTable()
        r.register(self.table)
        self._revision = ""

    def synced(self, revision: str) -> None:
        if self._revision:
            self.last_synced.remove(self._revision)
        self._revision = revision
        self.last_synced.labels(revision).set(1)

    def forget(self, keys: Iterable[ObjectKey]) -> None:
        """Drop the per-workload counters of workloads that left Git."""
        for key in keys:
            labels = (key.namespace, key.kind, key.name)
            for result in ("passed", "failed"):
                with contextlib.suppress(KeyError):
                    self.analyses.remove(*labels, result)
            with contextlib.suppress(KeyError):
                self.drift_healed.remove(*labels)
