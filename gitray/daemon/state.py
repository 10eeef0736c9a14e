"""What the daemon knows between jobs, as immutable snapshots. No I/O.

The scheduler's jobs, the webhook and the HTTP probes run on different threads. They never
share a mutable object: each reads the current ``DaemonState`` (one atomic reference read)
and every change is a new snapshot swapped in under the one lock of ``StateBox``, so a
read-modify-write (``polls + 1``, ``failures + 1``) cannot lose an update.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gitray.core.model import ObjectKey

__all__ = ["DaemonState", "PassLock", "StateBox", "poll_trigger"]


@dataclass(frozen=True)
class DaemonState:
    fetched: str = ""  # newest commit seen on the branch
    synced: str = ""  # commit the cluster last fully converged to
    attempted: str = ""  # commit of the last pass (converged or not)
    refused: str = ""  # commit refused as invalid (not retried, status already posted)
    retry_at: float = 0.0  # monotonic time of a due retry (0: none)
    failures: int = 0  # consecutive failed passes (backoff)
    polls: int = 0
    next_deletion: float = 0.0  # wall time of the earliest deletion deadline (inf: none)
    git_problem: str = ""
    api_problem: str = ""
    ready: bool = False
    # the workloads the last pass of a commit found in sync at it (no steps, no run going
    # on, not held, not failed): what the health watch reads while that commit waits
    settled: tuple[str, frozenset[ObjectKey]] = ("", frozenset())


def poll_trigger(state: DaemonState, newest: str, *, retry_due: bool, ended: bool,
                 drift_due: bool, controls_changed: Callable[[], bool]) -> str | None:
    """The pass a poll starts for the branch's ``newest`` commit (not a refused one), if
    any. Pure but for ``controls_changed`` (asked only when nothing before it decides).

    - ``commit``: a commit no pass has taken yet;
    - ``retry``: a due retry, or a changed control (``gitray suspend``, ``resume``, ``retry``);
    - ``run``: a run ended (the next wave, a released wait, or the commit's verdict);
    - ``drift``: a due drift check, in sync or not. A commit waits for its verdict while a
      RayJob runs, an upgrade is paused or a workload failed at it; its pass leaves those
      workloads alone (in flight, held, failed at this commit) and heals the others' drift,
      so one workload's wait never stops drift healing for the rest.
    """
    if newest != state.attempted:
        return "commit"
    if retry_due or controls_changed():
        return "retry"
    if ended:
        return "run"
    return "drift" if drift_due else None


class StateBox:
    """Holds the current ``DaemonState``; changes are swapped in under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = DaemonState()

    @property
    def current(self) -> DaemonState:
        return self._state

    def update(self, **changes: Any) -> DaemonState:
        """Swap in the current state with ``changes``; returns the new snapshot."""
        with self._lock:
            self._state = replace(self._state, **changes)
            return self._state

    def change(self, fn: Callable[[DaemonState], DaemonState]) -> tuple[DaemonState, DaemonState]:
        """Swap in ``fn(current)`` atomically; returns (before, after)."""
        with self._lock:
            before = self._state
            self._state = fn(before)
            return before, self._state


class PassLock:
    """One sync pass at a time. A pass waits for it (``with``); the jobs that read beside
    passes (the health watch, a standby's preparation) take it only when it is free and no
    pass is waiting (:meth:`acquire_if_idle`), so a reader that runs round after round never
    keeps a pass out: a plain lock is not fair, and the health watch could take it again as
    soon as it let it go (suspected in benchmark 12, where two replicas at 10,000 RayServices
    finished no drift pass in ten minutes; bench/README.md)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Passes waiting for the lock now."""
        return self._waiting

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def acquire(self, timeout: float = -1) -> bool:
        """Wait for the lock as a pass would (up to ``timeout`` seconds; -1: no limit)."""
        with self._count:
            self._waiting += 1
        try:
            return self._lock.acquire(timeout=timeout)
        finally:
            with self._count:
                self._waiting -= 1

    def acquire_if_idle(self) -> bool:
        """The lock if it is free and no pass waits for it; False at once otherwise."""
        with self._count:
            return not self._waiting and self._lock.acquire(blocking=False)

    def release(self) -> None:
        self._lock.release()
