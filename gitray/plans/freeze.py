"""Freeze windows (gitray.yaml ``freezeWindows``): which are open at a time, and which
workloads of a plan they hold. Pure (``now`` is passed in).

A window opens at each time its cron schedule fires (in its time zone) and stays open for
its duration; openings that overlap make one longer window. Scope ``all`` holds every change
except the deletion of a retired cluster (the tail of an upgrade made before the window: it
only frees capacity); ``new-clusters`` holds only changes that create a Ray cluster. A held
workload keeps its steps in the plan (a reviewer sees what would happen) with a note saying
until when; ``gitray sync`` and ``gitray apply`` run none of them while the window is open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from gitray.core.config import FreezeScope, FreezeWindow
from gitray.core.model import ObjectKey
from gitray.core.timefmt import utc_timestamp
from gitray.parsing.cron import CronSchedule, parse_cron
from gitray.plans.plan import Action, Plan, WorkloadPlan
from gitray.plans.steptypes import StepType

__all__ = ["Freeze", "freeze_note", "frozen_workloads", "open_windows", "with_freeze_notes"]

_MINUTE = timedelta(minutes=1)
# openings chained by overlap are followed this far ahead (a window that is always open
# says so until then; it is looked at again by then)
_HORIZON = timedelta(days=31)


@dataclass(frozen=True)
class Freeze:
    """One open window: its name, scope and when it closes (UTC)."""

    window: str
    scope: FreezeScope
    until: datetime


def open_windows(windows: Sequence[FreezeWindow], now: datetime) -> list[Freeze]:
    """The windows open at ``now``, in their configured order."""
    out: list[Freeze] = []
    for window in windows:
        until = _open_until(window, now)
        if until is not None:
            out.append(Freeze(window.name, window.scope, until))
    return out


def _open_until(window: FreezeWindow, now: datetime) -> datetime | None:
    """When ``window`` closes if it is open at ``now``, else None."""
    schedule = parse_cron(window.schedule)
    zone = ZoneInfo(window.time_zone)
    length = timedelta(seconds=window.duration_s)
    start = now.astimezone(UTC).replace(second=0, microsecond=0)
    # the latest opening in (now - duration, now]: minute by minute, backwards
    minute, latest = start, None
    while minute > now - length:
        if schedule.matches(minute.astimezone(zone)):
            latest = minute
            break
        minute -= _MINUTE
    if latest is None:
        return None
    until = latest + length
    # openings before it closes keep it open longer
    while start < now + _HORIZON:
        later = _next_opening(schedule, zone, start + _MINUTE, until)
        if later is None:
            return until
        start, until = later, later + length
    return until


def _next_opening(schedule: CronSchedule, zone: ZoneInfo, after: datetime,
                  before: datetime) -> datetime | None:
    """The first opening in [after, before]."""
    minute = after
    while minute <= before:
        if schedule.matches(minute.astimezone(zone)):
            return minute
        minute += _MINUTE
    return None


def _held_by(wp: WorkloadPlan, scope: FreezeScope) -> bool:
    if not wp.steps:
        return False
    if scope is FreezeScope.NEW_CLUSTERS:
        return any(s.type is StepType.CREATE_CLUSTER for s in wp.steps)
    retired_only = wp.action is not Action.DELETE and all(
        s.type is StepType.DELETE_CLUSTER for s in wp.steps)
    return not retired_only


def frozen_workloads(plan: Plan, windows: Sequence[FreezeWindow], now: datetime
                     ) -> dict[ObjectKey, Freeze]:
    """The workloads of ``plan`` an open window holds, each with the window that closes
    last among those holding it."""
    held: dict[ObjectKey, Freeze] = {}
    for freeze in open_windows(windows, now):
        for wp in plan.workloads:
            if _held_by(wp, freeze.scope):
                before = held.get(wp.key)
                if before is None or freeze.until > before.until:
                    held[wp.key] = freeze
    return held


def freeze_note(freeze: Freeze) -> str:
    scope = "all changes" if freeze.scope is FreezeScope.ALL else "new clusters"
    return (f"held: freeze window {freeze.window} ({scope}) until "
            f"{utc_timestamp(freeze.until)}")


def with_freeze_notes(plan: Plan, held: dict[ObjectKey, Freeze]) -> Plan:
    """``plan`` with a note on each held workload (its steps stay: they run after the
    window)."""
    if not held:
        return plan
    return replace(plan, workloads=tuple(
        replace(w, notes=(*w.notes, freeze_note(held[w.key]))) if w.key in held else w
        for w in plan.workloads))
