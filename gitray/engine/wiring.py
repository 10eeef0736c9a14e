"""The one composition root: builds the engine's object graph for ``gitray apply`` and
``gitray sync`` alike. I/O only through what it builds.

::

    Wiring(kube, ExecSettings)
      ├── lease      Lease on its own short-timeout client (renews must not queue behind
      │              slow requests), with client-go's durations
      ├── lease_watch()  a LeaseWatch on a client of its own (for standbys)
      ├── shard_keeper(S)  the shard Leases instead (gitray sync --shards S, S > 1)
      ├── resolver   how Ray dashboards are reached (and the Ray token)
      ├── progress(config[, fence, shard])  ProgressStore: run records, fenced by the lease
      │                                     (or by a shard's Lease: gitray sync --shards)
      └── executor(config, progress, reporter[, fence, labels])
                     Executor(Actions(kube, resolver, fence=lease), fence=lease, ...,
                              SignalStore: promote/abort signals next to the run records)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from gitray.core.config import Config, DashboardMode
from gitray.core.errors import Interrupted
from gitray.core.waits import Clock
from gitray.engine.actions import Actions
from gitray.engine.executor import Executor, Reporter, SupersedeCheck
from gitray.engine.fence import Fence
from gitray.engine.incremental.signals import SignalStore
from gitray.engine.parking import would_block
from gitray.engine.progress import ProgressStore
from gitray.engine.shardkeeper import Busy, ShardKeeper
from gitray.k8s.client import Kube
from gitray.k8s.election import DEFAULT_LEASE_NAME, LeaseSettings, default_identity
from gitray.k8s.lease import Lease
from gitray.k8s.leasewatch import LeaseWatch, OnLeaseChange
from gitray.k8s.settings import KubeSettings
from gitray.plans.sensitive import SensitiveValues
from gitray.ray.dashboard import Resolver

__all__ = ["LEASE_REQUEST_TIMEOUT_S", "ExecSettings", "Wiring"]

LEASE_REQUEST_TIMEOUT_S = 5.0  # well under the renew deadline


@dataclass(frozen=True)
class ExecSettings:
    """How to execute: which Lease (timings per client-go), how long ``gitray apply`` waits
    for it, how to reach dashboards, and who this process is."""

    lease_namespace: str  # no invented default: the CLI resolves it as kubectl would
    lease_name: str = DEFAULT_LEASE_NAME
    lease_timeout_s: float = 60.0
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    dashboard_mode: DashboardMode = DashboardMode.PROXY
    ray_token: str | None = None
    identity: str = field(default_factory=default_identity)


class Wiring:
    """Everything a pass needs, built once per process from one client and one settings."""

    def __init__(self, kube: Kube, settings: ExecSettings) -> None:
        self.kube = kube
        self.settings = settings
        self._lease_kube = lease_kube = Kube(
            kube.api_client, KubeSettings(request_timeout_s=LEASE_REQUEST_TIMEOUT_S))
        self.lease = Lease(lease_kube, LeaseSettings(
            namespace=settings.lease_namespace, name=settings.lease_name,
            identity=settings.identity, lease_duration_s=settings.lease_duration_s,
            renew_deadline_s=settings.renew_deadline_s, retry_period_s=settings.retry_period_s))
        self.resolver = Resolver(kube, settings.dashboard_mode, settings.ray_token)
        # steps wait (watches, Serve polls, retry pauses) on this clock, so that a shutdown
        # ends a wait at once instead of when it would next look (see interrupt())
        self._interrupted = threading.Event()
        self.clock = Clock(sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        would_block(f"waiting {seconds:.1f} s")  # a parked wait (gitray sync) sleeps not
        if self._interrupted.wait(seconds):
            raise Interrupted("shutting down")

    def interrupt(self) -> None:
        """Shutting down: a step waiting now (or later) raises ``Interrupted`` at once; its
        run record keeps the cursor at that step, for the next leader to resume."""
        self._interrupted.set()
        self.kube.close_watches()

    def lease_watch(self, on_change: OnLeaseChange) -> LeaseWatch:
        """A watch on this process's Lease (its own client, so stopping it ends only it)."""
        return LeaseWatch(Kube(self.kube.api_client, self.kube.settings),
                          self.lease.settings, on_change)

    def shard_keeper(self, shards: int, busy: Busy) -> ShardKeeper:
        """The keeper of this replica's shard Leases (``gitray sync --shards``), on the
        Lease's short-timeout client, with its name, identity and durations; ``busy``:
        whether a shard's runs are on workers (a shard handed over waits for them)."""
        return ShardKeeper(self._lease_kube, self.lease.settings, shards, busy=busy)

    def progress(self, config: Config, fence: Fence | None = None,
                 shard: str = "") -> ProgressStore:
        """The run records of ``config``'s gitray instance, fenced by the Lease (``fence``: a
        shard's Lease, its records naming ``shard``)."""
        return ProgressStore(self.kube, self.settings.lease_namespace, config.instance,
                             fence or self.lease, shard)

    def executor(self, config: Config, progress: ProgressStore, reporter: Reporter,
                 sensitive: SensitiveValues, superseded: SupersedeCheck | None = None,
                 park: bool = False, fence: Fence | None = None,
                 labels: Mapping[str, str] | None = None) -> Executor:
        """``sensitive``: the values the plan refers to by digest, from the revision applied;
        ``park``: waits park instead of holding their worker (``gitray.engine.parking``);
        ``fence``: a shard's Lease instead of the one Lease, ``labels`` added to what its
        steps create (``gitray.io/shard``)."""
        fence = fence or self.lease
        return Executor(Actions(self.kube, self.resolver, fence, self.clock, labels), fence,
                        config, progress, reporter,
                        SignalStore(self.kube, self.settings.lease_namespace), superseded,
                        sensitive, park)
