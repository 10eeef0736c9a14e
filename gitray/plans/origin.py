"""Where a planned change comes from, for a rendered workload (issue 32): the plan says what
the workload was rendered from, and each changed field the values-file lines its new value
comes from when gitray can trace it (gitray.plans.helmvalues). Pure, display-only."""

from __future__ import annotations

from dataclasses import replace

from gitray.core.model import Workload
from gitray.plans.helmvalues import trace_change
from gitray.plans.plan import WorkloadPlan
from gitray.plans.sensitive import SENSITIVE

__all__ = ["with_origin"]


def with_origin(wp: WorkloadPlan, workload: Workload | None) -> WorkloadPlan:
    """``wp`` saying what ``workload`` was rendered from (unchanged for a plain manifest)."""
    origin = workload.origin if workload is not None else None
    if origin is None:
        return wp
    changes = tuple(
        c if SENSITIVE in (c.before, c.after) else replace(c, origin=", ".join(
            str(at) for at in trace_change(c.path, c.before, c.after, origin.lines)))
        for c in wp.changes)
    return replace(wp, origin=origin.text, changes=changes)
