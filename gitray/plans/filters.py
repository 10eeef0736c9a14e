"""What a ``gitray sync`` pass leaves out of a plan, and when it must look again. Pure.

- a workload whose run already failed for the same spec at this revision is not retried at
  that revision (a later commit retries it);
- a workload that cannot be applied as planned (``gitray.plans.prerequisites``) is held back
  whole, before any change;
- a deletions pass keeps only workloads whose steps all delete retired clusters;
- the workloads a pass leaves in sync at its commit (``in_sync``) are what the health watch
  reads while the commit waits for its verdict;
- the earliest persisted deletion deadline tells the daemon when reading the cluster again
  can find a due deletion.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace

from gitray.core.model import ANN_DELETE_AFTER, LiveState, ObjectKey
from gitray.core.timefmt import parse_timestamp
from gitray.plans.plan import Plan, WorkloadPlan
from gitray.plans.steptypes import StepType

__all__ = ["earliest_deadline", "hold_back", "in_sync", "only_deletions", "skip_failed"]


def skip_failed(plan: Plan, failed: Mapping[ObjectKey, str]) -> tuple[Plan, list[ObjectKey]]:
    """``plan`` without the steps of workloads whose run failed at this revision for the same
    desired spec (``failed``: key -> desired hash of such runs), and their keys: the failures
    that stand. A workload whose failed run left nothing to do (a RayJob whose job ran and
    failed: its object is as Git says) is one of them too, with or without steps: its commit is
    not in sync, and the waves after it do not start."""
    keep: list[WorkloadPlan] = []
    skipped: list[ObjectKey] = []
    for w in plan.workloads:
        if failed.get(w.key, None) == w.desired_hash:
            keep.append(replace(w, steps=()))
            skipped.append(w.key)
        else:
            keep.append(w)
    return replace(plan, workloads=tuple(keep)), skipped


def hold_back(plan: Plan, keys: Collection[ObjectKey]) -> Plan:
    """``plan`` without the steps of the workloads ``keys`` (held back whole: none of their
    steps runs; see ``gitray.plans.prerequisites.blocked_workloads``)."""
    return replace(plan, workloads=tuple(replace(w, steps=()) if w.key in keys else w
                                         for w in plan.workloads))


def in_sync(plan: Plan, *aside: Collection[ObjectKey]) -> frozenset[ObjectKey]:
    """The workloads of ``plan`` in sync at its commit: no steps, and in none of ``aside``
    (runs going on or to resume, failed at this commit, held back: their steps were taken
    out of the plan, not done)."""
    out = {key for keys in aside for key in keys}
    return frozenset(w.key for w in plan.workloads if not w.steps and w.key not in out)


def only_deletions(plan: Plan) -> Plan:
    """Keep only workloads whose steps are all deletions of retired clusters."""
    keep = tuple(w if w.steps and all(s.type is StepType.DELETE_CLUSTER for s in w.steps)
                 else replace(w, steps=()) for w in plan.workloads)
    return replace(plan, workloads=keep)


def earliest_deadline(live: LiveState) -> float:
    """Wall time of the earliest persisted deletion deadline, inf when there is none (an
    unreadable deadline counts as due now: 0)."""
    deadlines = [parse_timestamp(o.annotations.get(ANN_DELETE_AFTER, ""))
                 for o in live.objects if ANN_DELETE_AFTER in o.annotations]
    times = [d.timestamp() if d is not None else 0.0 for d in deadlines]
    return min(times, default=math.inf)
