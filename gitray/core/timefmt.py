"""UTC timestamps as gitray writes and reads them (RFC 3339 with a ``Z``). No I/O but the clock.

One formatter for run records, Lease times, Events, deletion deadlines, git-notes records and
JSON logs: ``2026-11-30T09:35:49Z``, with 3 or 6 fractional digits where asked.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["parse_timestamp", "utc_timestamp"]


def utc_timestamp(when: datetime | None = None, *, digits: int = 0) -> str:
    """``when`` (default: now) in UTC, e.g. ``2026-11-30T09:35:49.123Z`` for ``digits=3``."""
    value = (when or datetime.now(UTC)).astimezone(UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + f"{value.microsecond:06d}"[:digits]
    return text + "Z"


def parse_timestamp(text: str) -> datetime | None:
    """The aware datetime in an RFC 3339 / ISO 8601 text; None when it is not one."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else None
