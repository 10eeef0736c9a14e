"""Re-checking parked waits in rounds, with batched reads. I/O (LIST), around pure decisions.

A run parked at a wait (``gitray.engine.parking``) is re-checked when it is due
(``gitray.engine.fleet.due``). A round reads what the due waits wait on with one LIST per
(kind, namespace): a RayJob's run ending, a RayCluster becoming ready or failing. Only a
workload whose wait may have ended (its object settled or gone) or whose timeout ran out is
released: the next pass resumes its run at the wait step, which checks for itself and goes on,
or fails with the step's own timeout error. A wait on something not listed here (Serve
status, a hold, a pause until ``gitray promote``) is released whenever it is due: its run
checks once on a worker and parks again. So many waiting workloads cost a few LISTs per
round, not one GET per workload per poll, and a wait that has not ended holds no worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from gitray.core.errors import GitrayError
from gitray.core.model import ObjectKey
from gitray.engine.actions import cluster_ready
from gitray.engine.fleet import Fleet, Parked, due
from gitray.engine.parking import remember
from gitray.plans.rayjob import TERMINAL_DEPLOYMENT_STATUSES
from gitray.plans.steptypes import CLUSTER, JOB, StepType

__all__ = ["WATCHED", "Read", "Rechecks", "reads", "round_keys", "settled", "to_release"]

log = logging.getLogger("gitray.sync")

# the waits whose end a LIST shows: step type -> (apiVersion, kind) of what they wait on
WATCHED: Mapping[StepType, tuple[str, str]] = {StepType.WAIT_JOB: JOB,
                                                StepType.WAIT_CLUSTER_READY: CLUSTER}

Read = tuple[str, str, str]  # (apiVersion, kind, namespace): one LIST


def settled(step_type: StepType, obj: Mapping[str, Any] | None) -> bool:
    """Whether the wait of ``step_type`` may have ended, seeing ``obj`` (None: gone). Pure."""
    if obj is None:
        return True  # (its run says what that means)
    status = obj.get("status") or {}
    if step_type is StepType.WAIT_JOB:
        return status.get("jobDeploymentStatus") in TERMINAL_DEPLOYMENT_STATUSES
    if step_type is StepType.WAIT_CLUSTER_READY:
        return cluster_ready(obj) or status.get("state") == "failed"
    return True


def reads(parked: Mapping[ObjectKey, Parked], keys: Collection[ObjectKey]) -> list[Read]:
    """The LISTs a round of ``keys`` needs: one per kind and namespace. Pure."""
    return sorted({(*WATCHED[p.waiting.step.type], k.namespace) for k in keys
                   if (p := parked[k]).waiting.step.type in WATCHED})


def round_keys(parked: Mapping[ObjectKey, Parked], now: float
               ) -> tuple[list[ObjectKey], list[Read]]:
    """The waits a round at ``now`` looks at, and its LISTs: the due ones, and every other
    parked wait on what those LISTs read anyway (so waits on one kind in one namespace come to
    be checked together: one LIST per round for all of them). Pure."""
    keys = set(due(parked, now))
    lists = reads(parked, keys)
    keys |= {k for k, p in parked.items() if not p.released
             and p.waiting.step.type in WATCHED
             and (*WATCHED[p.waiting.step.type], k.namespace) in lists}
    return sorted(keys), lists


def to_release(parked: Mapping[ObjectKey, Parked], keys: Collection[ObjectKey],
               listed: Mapping[Read, Mapping[str, Mapping[str, Any]]], now: float
               ) -> tuple[list[ObjectKey], list[ObjectKey]]:
    """(released, checked again later) of the due ``keys``, given the round's LISTs
    (``listed``: name -> object; a LIST that failed is missing: its waits wait on). Pure."""
    release: list[ObjectKey] = []
    later: list[ObjectKey] = []
    for key in sorted(keys):
        p = parked[key]
        step = p.waiting.step
        if p.deadline is not None and now >= p.deadline:
            release.append(key)  # its timeout ran out: its run fails it (or a hold is done)
            continue
        watched = WATCHED.get(step.type)
        if watched is None:
            release.append(key)  # its run checks it
            continue
        objects = listed.get((*watched, key.namespace))
        if objects is not None and settled(step.type, objects.get(step.target)):
            release.append(key)
        else:
            later.append(key)
    return release, later


class Rechecks:
    """The daemon's re-check job: due parked waits, a LIST per kind and namespace, release."""

    def __init__(self, kube: Any, fleet: Fleet, on_release: Callable[[], None],
                 leading: Callable[[], bool] = lambda: True,
                 monotonic: Callable[[], float] = time.monotonic,
                 stopping: Callable[[], bool] = lambda: False,
                 follow: Callable[[], None] = lambda: None) -> None:
        self.kube = kube
        self.fleet = fleet
        self.on_release = on_release  # a pass is to plan again (it resumes runs)
        self.leading = leading
        self.monotonic = monotonic
        self.stopping = stopping
        self.follow = follow  # the waits' watches follow what is parked (waitwatch.py)

    def job(self) -> None:
        """The daemon's job (every second): a round while this replica leads. Otherwise its
        parked runs are the next leader's, resumed from their records, and they are forgotten
        here; ``on_release`` still asks for a pass: should this replica lead again (a Lease
        lost for a moment under load), that pass resumes them from their records, as a new
        leader would. Nothing is to be done while shutting down (the parked runs are handed
        over: ``Fleet.hand_over``)."""
        if self.stopping():
            return
        if not self.leading():
            parked = self.fleet.parked()
            if parked:
                self.fleet.forget(parked)
                log.info("not leading: parked runs left for the leader to resume from their "
                         "records: %s", ", ".join(str(k) for k in sorted(parked)))
                self.on_release()
            self.follow()
            return
        self.round()
        self.follow()

    def round(self) -> list[ObjectKey]:
        """One round; returns the workloads released."""
        parked = self.fleet.parked()
        now = self.monotonic()
        keys, lists = round_keys(parked, now)
        if not keys:
            return []
        listed: dict[Read, dict[str, Mapping[str, Any]]] = {}
        for api, kind, ns in lists:
            try:
                items, _ = self.kube.list(api, kind, namespace=ns)
            except GitrayError as e:  # its waits are checked again later
                log.info("re-check of the waits on %s in %s not read: %s", kind, ns, e)
                continue
            listed[(api, kind, ns)] = {str((o.get("metadata") or {}).get("name")): o
                                       for o in items}
        for key in keys:  # a RayJob deleted once it ends is followed from what was seen
            step = parked[key].waiting.step
            if step.type is StepType.WAIT_JOB:
                seen = listed.get((*JOB, key.namespace), {}).get(step.target)
                if seen is not None:
                    remember("RayJob", key.namespace, step.target, seen)
        release, later = to_release(parked, keys, listed, now)
        self.fleet.rechecked(release, later)
        if release:
            log.debug("waits to resume: %s", ", ".join(str(k) for k in release))
            self.on_release()
        return release
