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

A wait that usually ends within seconds (``BRIEF``: Serve deploying a config, a head pod
starting) is first waited for on its worker, as ``gitray apply`` waits (Serve polled from
every 0.25 s, the cluster watched), for up to ``PARK_GRACE_S`` from the step's start; only then
does it park. Parked at once, it would be looked at again only by the first re-check, 2 s
later, and then through a whole pass (a git fetch and a plan).

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

__all__ = ["BRIEF", "PARKABLE", "PARK_GRACE_S", "Parked", "parking", "parks_now", "recall",
           "remember", "would_block"]

# the steps whose waiting may be parked (they only observe, and their deadline is persisted)
PARKABLE = frozenset({StepType.WAIT_JOB, StepType.WAIT_CLUSTER_READY,
                      StepType.WAIT_SERVE_RUNNING, StepType.WAIT_INTERVAL, StepType.PAUSE})
BRIEF = frozenset({StepType.WAIT_SERVE_RUNNING, StepType.WAIT_CLUSTER_READY})
PARK_GRACE_S = 10.0


def parks_now(step_type: StepType, spent: float | None) -> bool:
    """Whether a parkable wait of ``step_type`` parks when it would block, ``spent`` seconds
    after its step first began (None: a step with no timeout, whose start is not kept: a
    grace would start again at every re-check). Pure."""
    return step_type not in BRIEF or spent is None or spent >= PARK_GRACE_S

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
