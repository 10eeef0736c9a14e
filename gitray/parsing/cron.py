"""Cron schedules (five fields, as in crontab(5) and Kubernetes CronJobs): parsed and matched.
Pure.

``minute hour day-of-month month day-of-week``: each field ``*``, a number, a range ``a-b``,
a list ``a,b``, a step ``*/n`` or ``a-b/n``; months ``jan``-``dec`` and days ``sun``-``sat``
by name too (``0`` and ``7`` are both Sunday). As in cron, when both day-of-month and
day-of-week are restricted, a day matching either matches. Matched against a wall-clock time
(the caller converts to the schedule's time zone).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["CronSchedule", "parse_cron"]

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, low, high, names starting at low)
_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
           ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))


@dataclass(frozen=True)
class CronSchedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is "*"
    any_weekday: bool  # day of week is "*"

    def matches(self, at: datetime) -> bool:
        """Whether the schedule fires at the minute of ``at`` (a wall-clock time)."""
        if at.minute not in self.minutes or at.hour not in self.hours \
                or at.month not in self.months:
            return False
        day = at.day in self.days
        weekday = (at.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day and weekday
        return day or weekday


def parse_cron(text: str) -> CronSchedule:
    """The schedule of a five-field cron expression; ValueError saying what is wrong."""
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"{text!r} is not a cron schedule: it needs 5 fields (minute hour "
                         f"day-of-month month day-of-week), it has {len(fields)}")
    values = [_field(f, *spec) for f, spec in zip(fields, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in values[4])
    return CronSchedule(values[0], values[1], values[2], values[3], weekdays,
                        any_day=fields[2] == "*", any_weekday=fields[4] == "*")


def _field(text: str, name: str, low: int, high: int, names: tuple[str, ...]
           ) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        out |= _part(part, name, low, high, names)
    return frozenset(out)


def _part(part: str, name: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    base, _, step_text = part.partition("/")
    step = 1
    if step_text:
        if not step_text.isdigit() or int(step_text) == 0:
            raise ValueError(f"{name}: {part!r}: the step must be a positive number")
        step = int(step_text)
    if base == "*":
        first, last = low, high
    elif "-" in base:
        a, _, b = base.partition("-")
        first, last = _value(a, name, low, high, names), _value(b, name, low, high, names)
        if first > last:
            raise ValueError(f"{name}: {part!r}: the range runs backwards")
    else:
        first = _value(base, name, low, high, names)
        last = high if step_text else first
    return set(range(first, last + 1, step))


def _value(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> int:
    lowered = text.lower()
    if lowered in names:
        return low + names.index(lowered) if name == "month" else names.index(lowered)
    if not text.isdigit():
        raise ValueError(f"{name}: {text!r} is not a number"
                         + (f" or one of {', '.join(names)}" if names else ""))
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"{name}: {value} is outside {low}-{high}")
    return value
