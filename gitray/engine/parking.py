"""Parking a wait: a wait step that holds no worker while it waits (a per-thread switch).

``gitray sync`` runs each workload's run on a worker of a bounded pool
(``gitray.engine.fleet``). A wait step (a RayJob running for hours, a cluster becoming ready,
Serve reaching RUNNING, a hold or a pause of an incremental upgrade) would keep its worker for
its whole duration. Instead the executor runs such a step *parking*: the step's check runs
once, and where the wait would block (its progress line, or a sleep on the engine's clock) it
raises ``Parked``. The run ends "waiting": its record stays ``running`` at that step, with the
step's start persisted (``gitray.engine.deadlines``), and the daemon re-checks it later
(``gitray.daemon.rechecks``) and resumes the run at that step, exactly as a new leader resumes
an interrupted run. ``gitray apply`` never parks: it waits in the foreground.

A ``run-analysis`` is not parked: a resumed analysis measures a whole window afresh.

What a parked wait last saw of its object is kept in memory (``remember``/``recall``; the
re-check rounds refresh it from their LISTs): a RayJob that KubeRay deletes as soon as its run
ends (a ``DeleteSelf`` rule) is then followed from there to its deletion, which carries its
final status, as a wait that never parked follows it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from gitray.plans.steptypes import StepType

__all__ = ["PARKABLE", "Parked", "parking", "recall", "remember", "would_block"]

# the steps whose waiting may be parked (they only observe, and their deadline is persisted)
PARKABLE = frozenset({StepType.WAIT_JOB, StepType.WAIT_CLUSTER_READY,
                      StepType.WAIT_SERVE_RUNNING, StepType.WAIT_INTERVAL, StepType.PAUSE})

_local = threading.local()


class Parked(Exception):
    """The step's check did not pass yet and it would now block: the run waits parked."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@contextmanager
def parking(on: bool) -> Iterator[None]:
    """While the body runs (on this thread), a wait that would block parks instead."""
    before = getattr(_local, "on", False)
    _local.on = on
    try:
        yield
    finally:
        _local.on = before


def is_parking() -> bool:
    return bool(getattr(_local, "on", False))


def would_block(detail: str) -> None:
    """A wait is about to block (a sleep, a progress line of a wait): parks when parking."""
    if is_parking():
        raise Parked(detail)


_seen: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name) -> object
_seen_lock = threading.Lock()


def remember(kind: str, namespace: str, name: str, obj: Mapping[str, Any] | None) -> None:
    """What a parked wait last saw of its object (None: nothing to keep any more)."""
    with _seen_lock:
        if obj is None:
            _seen.pop((kind, namespace, name), None)
        else:
            _seen[(kind, namespace, name)] = dict(obj)


def recall(kind: str, namespace: str, name: str) -> dict[str, Any]:
    """What a parked wait last saw of its object ({} when nothing)."""
    with _seen_lock:
        return dict(_seen.get((kind, namespace, name)) or {})
