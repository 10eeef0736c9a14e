"""What this replica of ``gitray sync`` drives: the one Lease, or the shards it holds. I/O
(through the Lease or the shard keeper).

The daemon asks one ``Owner`` whether it leads (holds anything), which workloads it owns
(``gitray.engine.ownership.Ownership``) and the fence of a shard's runs, and runs its
``attempt`` as the scheduler's ``lease`` job:

- ``LeaseOwner`` (``--shards 1``, the default): today's leader election, unchanged — the
  ``Leadership`` of the Lease, its watch, and the Lease as the fence of every run; it owns every
  workload while it leads.
- ``ShardOwner`` (``--shards S``, S > 1): one round of the shard keeper per retry period
  (``gitray.engine.shardkeeper``). A shard lost gives up its parked runs (the next holder
  resumes them from their records) and its runs on workers stop at their next progress point
  (the daemon's reporter asks ``owns``, every write's fence asks the keeper); a shard gained
  asks for a pass at once; a shard the balance moves away is released once none of its runs
  is on a worker (``Fleet.on_workers``), so a step past its fence lands before the next
  holder takes it. On shutdown it hands its shards over with ``release_all``.
  A replica's shards found in sync at a commit are said so on their Leases (``mark_synced``);
  the holder of shard 0 posts the overall status no replica sees from its own shards: the
  newest commit ``pending`` (``applying``) until every shard's Lease says it is in sync,
  then ``success``; a commit superseded before that, ``error``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Protocol

from apscheduler.schedulers.base import BaseScheduler

from gitray.core.errors import GitrayError
from gitray.core.model import ObjectKey
from gitray.daemon.leadership import Leadership
from gitray.daemon.metrics import Metrics
from gitray.engine.apply import Desired
from gitray.engine.fence import Fence
from gitray.engine.fleet import Fleet
from gitray.engine.ownership import Ownership, in_shards, owned
from gitray.engine.shardkeeper import ShardKeeper
from gitray.engine.shards import shard_label
from gitray.engine.shardview import Changes
from gitray.engine.wiring import Wiring
from gitray.k8s.lease import Lease
from gitray.k8s.leasewatch import LeaseWatch

__all__ = ["LeaseOwner", "Owner", "ShardOwner", "owned_desired", "owner_for"]

log = logging.getLogger("gitray.sync")  # the `gitray sync` logger (log pipelines match it)

PostOverall = Callable[[str, str, str], None]  # (commit, state, description)


def owner_for(shards: int, wiring: Wiring, scheduler: BaseScheduler, metrics: Metrics,
              fleet: Fleet, stopping: threading.Event, on_leader: Callable[[], None],
              on_api_problem: Callable[[GitrayError], None], *,
              on_gained: Callable[[], None], post_overall: PostOverall) -> Owner:
    """The owner of ``gitray sync --shards shards``: the shard keeper's when ``shards`` > 1,
    else the one Lease's. ``on_leader``: the Lease taken (a poll at once); ``on_gained``:
    shards gained (a pass plans the commit again even if it was planned before: their
    workloads were another replica's then); ``post_overall(sha, state, text)``: the commit's
    overall status, when every shard is in sync at it."""
    if shards > 1:
        def busy(shard: int) -> bool:  # (a shard handed over is released once this is False)
            return bool(in_shards(fleet.on_workers(), (shard,), shards))
        return ShardOwner(wiring.shard_keeper(shards, busy), shards, fleet, metrics, stopping,
                          on_gained, post_overall)
    leadership = Leadership(wiring.lease, scheduler, wiring.settings.retry_period_s, metrics,
                            stopping, on_leader, on_api_problem)
    return LeaseOwner(wiring.lease, leadership, wiring.lease_watch(leadership.changed))


class Owner(Protocol):
    def leading(self) -> bool: ...

    def ownership(self) -> Ownership: ...

    def fence(self, shard: int) -> Fence: ...

    def attempt(self) -> None: ...

    def mark_synced(self, own: Ownership, sha: str) -> None: ...

    def applying(self, sha: str) -> None: ...

    def start(self) -> None: ...

    def release(self) -> None: ...


class LeaseOwner:
    """Unsharded: the one Lease, kept and contended for as before sharding."""

    def __init__(self, lease: Lease, leadership: Leadership, watch: LeaseWatch) -> None:
        self.lease, self.leadership, self.watch = lease, leadership, watch

    def leading(self) -> bool:
        return self.lease.is_leader

    def ownership(self) -> Ownership:
        return Ownership(1, {0: self.lease.epoch} if self.lease.is_leader else {})

    def fence(self, shard: int) -> Fence:
        return self.lease

    def attempt(self) -> None:
        self.leadership.attempt()

    def mark_synced(self, own: Ownership, sha: str) -> None:
        pass  # (the leader posts the overall status itself)

    def applying(self, sha: str) -> None:
        pass  # (its pending too: the pass that dispatches posts it)

    def start(self) -> None:
        self.watch.start()

    def release(self) -> None:
        self.lease.stop_renewing()
        if self.lease.is_leader:  # first: a standby waits for this
            released = self.lease.release()
            log.info("released the Lease" if released else "could not release the Lease")
        self.watch.stop()


class ShardOwner:
    """Sharded: the shards the keeper lets this replica drive."""

    def __init__(self, keeper: ShardKeeper, shards: int, fleet: Fleet, metrics: Metrics,
                 stopping: threading.Event, on_gained: Callable[[], None],
                 post_overall: PostOverall) -> None:
        self.keeper, self.count, self.fleet, self.metrics = keeper, shards, fleet, metrics
        self._stopping, self._on_gained, self._post_overall = stopping, on_gained, post_overall
        self._marked = ""  # the commit this replica last found its shards in sync at
        self._posted = ""  # the last commit whose overall success it posted
        self._applying = ""  # the newest commit its passes plan
        self._pending = ""  # the last commit it said pending

    def leading(self) -> bool:
        return bool(self.keeper.shards())

    def ownership(self) -> Ownership:
        return Ownership(self.count, self.keeper.shards())

    def fence(self, shard: int) -> Fence:
        return self.keeper.fence(shard)

    def attempt(self) -> None:
        if not self._stopping.is_set():
            self.changed(self.keeper.round())
            self._report()

    def mark_synced(self, own: Ownership, sha: str) -> None:
        self.keeper.mark_synced(own.held, sha)
        self._marked = sha

    def applying(self, sha: str) -> None:
        """A commit pass plans ``sha``, the newest commit."""
        self._applying = sha

    def _report(self) -> None:
        """As the holder of shard 0, the commit's overall status: success, once, when every
        shard's Lease says it is in sync at the commit this replica last found its own in sync
        at (so a Lease left from an earlier life of this shard count never speaks for today);
        pending, once, for the newest commit while the Leases do not say it; error for the
        commit said pending before it when that one never got its success."""
        sha, newest = self.keeper.synced, self._applying
        if 0 not in self.keeper.shards():
            return
        if sha and sha == self._marked and sha != self._posted:
            self._posted = sha
            log.info("%s: every shard in sync", sha[:7])
            self._post_overall(sha, "success", f"in sync at {sha[:7]} (all {self.count} "
                               "shards)")
        if newest and newest not in (sha, self._pending, self._posted):
            before, self._pending = self._pending, newest
            if before and before not in (sha, self._posted):
                self._post_overall(before, "error", f"superseded by {newest[:7]} before every "
                                   "shard was in sync at it")
            self._post_overall(newest, "pending", f"applying {newest[:7]} across "
                               f"{self.count} shards")

    def start(self) -> None:
        pass  # (no watch: the keeper reads the Leases each round)

    def release(self) -> None:
        self.changed(self.keeper.release_all())

    def changed(self, changes: Changes) -> None:
        """A round's (or the hand-over's) changes: the lost shards' parked runs and table rows
        given up, a pass asked for the gained ones."""
        self.metrics.leader.set(1 if self.leading() else 0)
        if changes.lost:
            parked = in_shards(self.fleet.parked(), changes.lost, self.count)
            self.fleet.forget(parked)
            log.warning("stopped driving shard(s) %s%s", _names(changes.lost, self.count),
                        "; parked runs left to their next holder: " + ", ".join(
                            str(k) for k in parked) if parked else "")
            table = self.metrics.table  # (the next holder shows them from now on)
            rows = table.views()
            table.keep(set(rows) - set(in_shards(rows, changes.lost, self.count)))
        if changes.gained and not self._stopping.is_set():
            log.info("driving shard(s) %s", ", ".join(
                f"{shard_label(s, self.count)} (epoch {e})"
                for s, e in sorted(changes.gained.items())))
            self._on_gained()


def _names(shards: tuple[int, ...], count: int) -> str:
    return ", ".join(shard_label(s, count) for s in shards)


def owned_desired(desired: Desired, own: Ownership,
                  keys: Collection[ObjectKey] | None = None) -> Desired:
    """``desired`` with only the workloads ``own`` holds (``desired`` itself when unsharded
    and ``keys`` is None): the workloads a replica reports on (their statuses, their health);
    ``keys``: only those of them too."""
    if not own.sharded and keys is None:
        return desired
    return replace(desired, result=replace(desired.result, workloads=tuple(
        w for w in owned(desired.workloads, own) if keys is None or w.key in keys)))
