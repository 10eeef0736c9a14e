"""Quantities and a workload's resource figures as values: parsing and formatting Kubernetes
quantities, :class:`ResourceChange` (what a plan adds while old and new clusters overlap, for
good, and at peak; each a ``low..high`` range), its one-line summary and JSON form. Pure, no I/O.

How the figures are computed from a plan: ``gitray.plans.resources``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from gitray.core.model import JSON

__all__ = [
    "Amounts",
    "Range",
    "Ranges",
    "ResourceChange",
    "format_exact",
    "format_quantity",
    "parse_quantity",
    "resource_change_from_json",
    "resource_change_to_json",
    "summary_line",
]

_SUFFIX: dict[str, Fraction | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+)?"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_BINARY = ("memory", "ephemeral-storage", "storage")


def parse_quantity(value: JSON) -> Fraction:
    """A Kubernetes quantity (``500m``, ``2Gi``, ``1e3``, ``4``) as an exact number.
    Raises ``ValueError`` on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Fraction(Decimal(str(value)))
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number = Fraction(Decimal(match.group(1) + (match.group(2) or "")))
    return Fraction(number * _SUFFIX[match.group(3) or ""])


def _binary(resource: str) -> bool:
    return resource in _BINARY or resource.startswith("hugepages-")


def format_quantity(resource: str, amount: Fraction) -> str:
    """``amount`` of ``resource`` as people write it: ``500m``/``2`` CPUs, ``512Mi``/``8Gi``
    memory, plain numbers for extended resources."""
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    if _binary(resource) and amount:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = Fraction(_SUFFIX[suffix])
            if amount >= unit and (amount / unit).denominator == 1:
                return f"{sign}{amount / unit}{suffix}"
            if amount >= unit * 10:  # large and not whole: one decimal of the unit is enough
                return f"{sign}{round(float(amount / unit), 1)}{suffix}"
        return f"{sign}{int(amount)}" if amount.denominator == 1 else f"{sign}{float(amount)}"
    if amount.denominator == 1:
        return f"{sign}{amount.numerator}"
    milli = amount * 1000
    if milli.denominator == 1:
        return f"{sign}{milli.numerator}m"
    return f"{sign}{float(amount):g}"


Amounts = dict[str, Fraction]


@dataclass(frozen=True)
class Range:
    low: Fraction
    high: Fraction

    def text(self, resource: str, *, signed: bool = False) -> str:
        def one(v: Fraction) -> str:
            s = format_quantity(resource, v)
            return f"+{s}" if signed and v >= 0 else s
        if self.low == self.high:
            return one(self.low)
        return f"{one(self.low)}..{format_quantity(resource, self.high)}"


Ranges = Mapping[str, Range]


@dataclass(frozen=True)
class ResourceChange:
    """Display and pre-flight data of one workload's plan (``overlap``: e.g. blue-green).

    ``while_both``: added at the peak (over what the workload had before the plan); ``after``:
    added once the plan (and its deletion delays) is over; ``peak``: the most the workload
    holds at once; ``cluster``: where the peak is (the workload, e.g. its RayService's name).
    """

    strategy: str  # create | blue-green | incremental | in place | delete | job
    while_both: Ranges
    after: Ranges
    peak: Ranges
    cluster: str = ""

    @property
    def overlaps(self) -> bool:
        """Whether the plan holds more at its peak than both before and after it (old and
        new clusters run side by side)."""
        zero = Range(Fraction(0), Fraction(0))
        return any(r.high > max(self.after.get(k, zero).high, Fraction(0))
                   or r.low > max(self.after.get(k, zero).low, Fraction(0))
                   for k, r in self.while_both.items())


def _listing(ranges: Ranges, *, signed: bool) -> str:
    order = sorted(ranges, key=lambda k: (k != "cpu", k != "memory", k == "pods", k))
    return ", ".join(f"{ranges[k].text(k, signed=signed)} {k}" for k in order)


def summary_line(change: ResourceChange) -> str:
    """One line for people, e.g. ``blue-green: +8 nvidia.com/gpu while both run; +0 after;
    peak 16 nvidia.com/gpu in ray-serve``."""
    shown = {k: r for k, r in change.while_both.items() if r.low or r.high}
    after = {k: r for k, r in change.after.items() if r.low or r.high}
    parts = [change.strategy + ":"]
    if change.overlaps:
        parts.append(f"{_listing(shown, signed=True) or '+0'} while both run;")
        parts.append(f"{_listing(after, signed=True) or '+0'} after;")
    else:
        parts.append(f"{_listing(after, signed=True) or '+0'};")
    parts.append(f"peak {_listing(change.peak, signed=False) or '0'} in {change.cluster}")
    return " ".join(parts)


# ---- JSON (the plan file: quantities as strings, "low" and "high") -----------------------


def _ranges_json(ranges: Ranges) -> dict[str, dict[str, str]]:
    return {k: {"low": format_exact(r.low), "high": format_exact(r.high)}
            for k, r in sorted(ranges.items())}


def format_exact(amount: Fraction) -> str:
    """An exact, parseable form (``1/3`` never arises from quantities: milli at most)."""
    if amount.denominator == 1:
        return str(amount.numerator)
    return str(Decimal(amount.numerator) / Decimal(amount.denominator))


def resource_change_to_json(change: ResourceChange) -> dict[str, Any]:
    return {"strategy": change.strategy, "workload": change.cluster,
            "whileBothRun": _ranges_json(change.while_both),
            "after": _ranges_json(change.after), "peak": _ranges_json(change.peak),
            "summary": summary_line(change)}


def resource_change_from_json(data: Mapping[str, Any]) -> ResourceChange:
    def ranges(block: Mapping[str, Any]) -> dict[str, Range]:
        return {k: Range(parse_quantity(v["low"]), parse_quantity(v["high"]))
                for k, v in block.items()}
    return ResourceChange(str(data["strategy"]), ranges(data.get("whileBothRun") or {}),
                          ranges(data.get("after") or {}), ranges(data.get("peak") or {}),
                          str(data.get("workload", "")))
