"""A commit's verdict as the sum of its workloads' runs (``gitray sync``). I/O through the
daemon's status poster, metrics and notifications.

Each run ends on its own worker (``gitray.engine.fleet``): its workload status is posted at
once (success, failure, or "not finished" when a newer commit superseded it), its metrics and
notifications are sent. The commit's overall status:

- pending while any of its workloads is in flight (posted by the pass that dispatches);
- failure as soon as one of its workloads failed (not retried at that commit);
- "superseded" (error) when a newer commit ended one of its runs;
- success when a pass of that commit finds nothing to do and nothing in flight
  (``converged``). A commit the daemon has moved on from (a newer commit was pushed while its
  runs went on) gets its verdict when its last run ends: success when every run it started
  succeeded and none of its workloads was left unstarted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

from gitray.core.model import ObjectKey
from gitray.daemon.metrics import Metrics
from gitray.daemon.signals import Signals
from gitray.daemon.state import StateBox
from gitray.engine.apply import Desired, unappliable
from gitray.engine.executor import Outcome, WorkloadOutcome
from gitray.engine.fleet import Flight
from gitray.k8s.client import Kube
from gitray.plans.filters import hold_back
from gitray.plans.plan import Plan

__all__ = ["VERDICT_TRIGGERS", "Verdicts"]

log = logging.getLogger("gitray.sync")

# the passes that speak for a commit (a drift or deletions pass runs the synced commit again)
VERDICT_TRIGGERS = frozenset({"commit", "retry", "run"})

PostStatus = Callable[[str, ObjectKey | None, str, str], None]


@dataclass
class _Tally:
    """What the runs of one commit came to so far."""

    started: set[ObjectKey] = field(default_factory=set)
    succeeded: int = 0
    failed: list[WorkloadOutcome] = field(default_factory=list)
    superseded: bool = False
    left: bool = False  # its last pass left workloads unstarted (a later wave)


class Verdicts:
    def __init__(self, post_status: PostStatus, metrics: Metrics, signals: Signals,
                 state: StateBox,
                 health: Callable[[Desired], dict[ObjectKey, str]]) -> None:
        self.post_status = post_status
        self.metrics = metrics
        self.signals = signals
        self.state = state
        self.health = health
        self._lock = threading.Lock()
        self._tallies: dict[str, _Tally] = {}
        self._last: dict[ObjectKey, Outcome] = {}  # each workload's last outcome (metrics)
        # the commit last converged and its workloads then (sharded: a replica's own; shards
        # gained at that commit bring workloads that have no rows and statuses here yet)
        self._converged: tuple[str, frozenset[ObjectKey]] = ("", frozenset())

    def dispatched(self, sha: str, started: Collection[ObjectKey], left: bool) -> None:
        """A pass of ``sha`` started ``started``; ``left``: it left workloads unstarted."""
        with self._lock:
            tally = self._tallies.setdefault(sha, _Tally())
            tally.started.update(started)
            tally.left = left

    def run_ended(self, key: ObjectKey, flight: Flight, o: WorkloadOutcome,
                  in_flight: Collection[Flight], attempted: str) -> None:
        """Statuses, metrics and notifications for one run's outcome."""
        sha = flight.sha
        if o.outcome is Outcome.SUCCEEDED:
            self.post_status(sha, key, "success", f"converged at {sha[:7]}")
        elif o.outcome is Outcome.SUPERSEDED:
            self.post_status(sha, key, "error", f"not finished: {o.reason}")
        else:
            self.post_status(sha, key, "failure", o.reason or o.outcome.value)
        self.signals.outcomes(sha, flight.trigger, [o])
        with self._lock:
            self._last[key] = o.outcome
            for outcome in Outcome:
                self.metrics.workloads.labels(outcome.value).set(
                    sum(1 for last in self._last.values() if last is outcome))
            tally = self._tallies.setdefault(sha, _Tally({key}))
            if o.outcome is Outcome.SUCCEEDED:
                tally.succeeded += 1
            elif o.outcome is Outcome.SUPERSEDED:
                tally.superseded = True
            else:
                tally.failed.append(o)
        if o.outcome is Outcome.SUPERSEDED:  # no verdict on this commit: the newer one is next
            log.info("%s: %s; syncing the newer commit", sha[:7], o.reason)
            self.post_status(sha, None, "error",
                             f"superseded: {key.kind} {key.name}: {o.reason}")
        elif o.outcome is not Outcome.SUCCEEDED:
            first = tally.failed[0]
            self.post_status(sha, None, "failure",
                             f"{len(tally.failed)} of {max(len(tally.started), 1)} workload(s) "
                             f"failed: {first.key.kind} {first.key.name}: {first.reason}")
            self.state.update(retry_at=0.0)
        elif sha != attempted and flight.trigger in VERDICT_TRIGGERS \
                and not any(f.sha == sha for f in in_flight):
            self._moved_on(sha, attempted)

    def _moved_on(self, sha: str, attempted: str) -> None:
        """The last run of ``sha`` ended after the daemon moved on to ``attempted``."""
        with self._lock:
            tally = self._tallies.pop(sha, None)
        if tally is None or tally.failed or tally.superseded:
            return  # its verdict is out already
        if tally.left:
            self.post_status(sha, None, "error", f"superseded by {attempted[:7]} before all "
                             "its workloads started")
            return
        self.post_status(sha, None, "success", f"{tally.succeeded} workload(s) converged at "
                         f"{sha[:7]} (later commits are synced on their own)")

    def hold_back(self, kube: Kube, sha: str, trigger: str, plan: Plan
                  ) -> tuple[Plan, dict[ObjectKey, list[str]]]:
        """Not executable yet (an incremental RayService upgrade), or needing CRDs the cluster
        lacks: held back whole, before any change, never started and failed half-way."""
        held = unappliable(kube, plan)
        for key, reasons in sorted(held.items()):  # (a drift pass repeats it: not said)
            (log.error if trigger in VERDICT_TRIGGERS else log.debug)(
                "%s: %s not applied: %s", sha[:7], key, "; ".join(reasons))
            if trigger in {"commit", "retry"}:
                self.post_status(sha, key, "failure", f"not applied: {reasons[0]}")
        return hold_back(plan, held), held

    def converged(self, sha: str, desired: Desired) -> None:
        """A pass of ``sha`` found nothing to do and nothing in flight: in sync. Said once
        per commit, and again for workloads it did not cover then (shards gained since)."""
        keys = frozenset(w.key for w in desired.workloads)
        with self._lock:
            self._tallies.pop(sha, None)
            seen_sha, seen = self._converged
            self._converged = (sha, keys)
        fresh = keys - seen if seen_sha == sha else keys
        before, _ = self.state.change(
            lambda s: replace(s, synced=sha, failures=0, retry_at=0.0))
        self.metrics.synced(sha)
        if before.synced == sha and not fresh:
            return
        health = self.health(desired)
        self.signals.converged(sha, [w.key for w in desired.workloads], health)
        for w in (w for w in desired.workloads if w.key in fresh):
            line = health.get(w.key, "-")
            self.post_status(sha, w.key, "success", f"in sync at {sha[:7]}"
                             + (f": {line}" if line != "-" else ""))
        self.post_status(sha, None, "success", f"{len(desired.workloads)} workload(s) in "
                         f"sync at {sha[:7]}")
