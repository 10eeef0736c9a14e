"""Health watched after convergence (``gitray sync``). I/O through the daemon's callables.

Every poll interval, while no pass runs, each workload in sync has its health line read
again (all of them while the leader is in sync; while the newest commit waits for its
verdict, those its last pass found in sync at it: ``watched``) the way the convergence
status reads it (``gitray.engine.health``: the live objects by LIST, a RayService's Serve
applications from its active cluster's dashboard, a RayCronJob's runs by one LIST per
namespace). A workload that turns unhealthy flips its
commit status to failure (``in sync at <sha>: greeter UNHEALTHY since 10:42 UTC``), and back
to success when it recovers; the ``gitray_workload_healthy`` gauge follows, and the change is
a ``health-degraded`` / ``health-recovered`` notification (``gitray.daemon.signals``). A line
that could not be read (``unknown (...)``) changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from gitray.core.errors import GitrayError
from gitray.core.model import ObjectKey
from gitray.core.snapshot import Snapshot
from gitray.daemon.owners import owned_desired
from gitray.daemon.signals import HealthChange, Signals
from gitray.daemon.standby import Revisions
from gitray.daemon.state import DaemonState, PassLock, StateBox
from gitray.engine.apply import Desired
from gitray.engine.ownership import Ownership, owned

__all__ = ["HealthJob", "HealthWatch", "describe", "watched"]

log = logging.getLogger("gitray.sync")


def describe(sha: str, change: HealthChange) -> tuple[str, str]:
    """(state, description) of a workload's commit status after a health change."""
    if change.healthy:
        return "success", f"in sync at {sha[:7]}: {change.line}"
    since = datetime.fromtimestamp(change.since, UTC).strftime("%H:%M UTC")
    return "failure", f"in sync at {sha[:7]}: {change.line} since {since}"


def watched(s: DaemonState) -> tuple[str, frozenset[ObjectKey] | None]:
    """The commit the watch speaks for and the workloads it reads (None: every one), or
    ("", None) when there is none. Pure. In sync: the synced commit, every workload. While
    the newest commit waits for its verdict (a RayJob running, an upgrade paused, a workload
    failed at it): that commit, and the workloads its last pass found in sync at it."""
    if s.synced and s.attempted == s.synced:
        return s.synced, None
    at, keys = s.settled
    if at and at == s.attempted and keys:
        return at, keys
    return "", None


class HealthWatch:
    def __init__(self, signals: Signals,
                 post_status: Callable[[str, ObjectKey | None, str, str], None]) -> None:
        self.signals, self.post_status = signals, post_status

    def check(self, sha: str, keys: list[ObjectKey],
              read: Callable[[], Mapping[ObjectKey, str]]) -> list[HealthChange]:
        """Read the health of ``keys`` (in sync at ``sha``); post and notify the changes."""
        changes = self.signals.health(sha, keys, read())
        for change in changes:
            state, description = describe(sha, change)
            self.post_status(sha, change.key, state, description)
        return changes


class HealthJob:
    """The daemon's scheduler job: the watch, only while the leader is in sync at the revision
    it holds, never beside a pass nor ahead of one waiting (``passing``). Sharded, it reads the
    workloads of the shards held (``ownership``) and speaks only for those still held in the
    same epoch when the read ends (a shard lost meanwhile is its next holder's to report).
    A read that took t seconds is followed by t seconds without one: a read LISTs every live
    object of its namespaces, as a pass does, and at 10,000 workloads takes minutes."""

    def __init__(self, watch: HealthWatch, state: StateBox, revisions: Revisions,
                 passing: PassLock, active: Callable[[], bool],
                 health: Callable[[Desired], Mapping[ObjectKey, str]],
                 desired: Callable[[Snapshot], Desired],
                 ownership: Callable[[], Ownership],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.watch, self.state, self.revisions, self.passing = watch, state, revisions, passing
        self.active, self.desired, self.health = active, desired, health
        self.ownership, self.clock = ownership, clock
        self._rest_until = 0.0

    def __call__(self) -> None:
        sha, keys = watched(self.state.current)
        snapshot = self.revisions.snapshot
        if not self.active() or not sha or snapshot is None or snapshot.revision != sha \
                or self.clock() < self._rest_until:
            return
        if not self.passing.acquire_if_idle():
            return
        started = self.clock()
        try:
            own = self.ownership()
            desired = owned_desired(self.desired(snapshot), own, keys)
            lines = self.health(desired)
            kept = owned(desired.workloads, own.still_held(self.ownership()))
            self.watch.check(sha, [w.key for w in kept], lambda: lines)
        except GitrayError as e:
            log.debug("health not read: %s", e)
        finally:
            self.passing.release()
            ended = self.clock()  # a read that took t rests t before the next: at most half
            self._rest_until = ended + (ended - started)  # of the replica's time, however big
