"""Prometheus metrics of the daemon, in one registry (served on ``/metrics``). No I/O here."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]


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
        self.status_posts = Counter("gitray_status_posts_total",
                                    "Commit-status posts by result", ["result"], registry=r)
        self.polls = Counter("gitray_polls_total", "Poll jobs run", registry=r)
        self.webhooks = Counter("gitray_webhooks_total", "Webhook deliveries by result",
                                ["result"], registry=r)
        self._revision = ""

    def synced(self, revision: str) -> None:
        if self._revision:
            self.last_synced.remove(self._revision)
        self._revision = revision
        self.last_synced.labels(revision).set(1)
