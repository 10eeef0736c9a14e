"""Waiting and retrying, written once: a deadline, growing (jittered) pauses, and a poll loop.

No I/O of its own: the clock is a parameter (``Clock``, the real one by default), so every
wait — a cluster becoming ready, Serve reaching RUNNING, an object going away, a dashboard
starting to answer, the Lease becoming free — is the same loop with its own check and its own
timeout error; retries of transient errors pause by ``Backoff``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

__all__ = ["Backoff", "Clock", "Deadline", "poll"]

T = TypeVar("T")


@dataclass(frozen=True)
class Clock:
    """Time sources; the defaults are the real ones."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


class Deadline:
    """``seconds`` from now, on ``clock``'s monotonic time — of which ``spent`` seconds are
    already gone (a resumed step's wait: spent before this process took the step up)."""

    def __init__(self, seconds: float, clock: Clock, spent: float = 0.0) -> None:
        self.seconds = seconds
        self.clock = clock
        self.spent = spent
        self.started = clock.monotonic()

    def elapsed(self) -> float:
        """Seconds since the deadline's wait began, ``spent`` included."""
        return self.spent + self.clock.monotonic() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()


class Backoff:
    """Pauses that start at ``first`` and grow by ``factor`` up to ``cap``; each is jittered by
    ``±jitter`` (a fraction) so that many waiters do not retry in step."""

    def __init__(self, first: float, *, factor: float = 2.0, cap: float = 10.0,
                 jitter: float = 0.0, rng: random.Random | None = None) -> None:
        self._next = first
        self.factor, self.cap, self.jitter = factor, cap, jitter
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The next pause (seconds)."""
        pause = self._next
        self._next = min(self._next * self.factor, self.cap)
        if self.jitter:
            pause *= self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return pause


def poll(attempt: Callable[[], T | None], deadline: Deadline, *,
         wait: Callable[[float], None], timeout: Callable[[], Exception]) -> T:
    """Call ``attempt`` until it returns a value (not None); between attempts call
    ``wait(seconds left)``, which reports progress and sleeps or watches. When the deadline has
    passed after a fruitless attempt, raise ``timeout()``. ``attempt`` raises to give up early.
    """
    while True:
        result = attempt()
        if result is not None:
            return result
        left = deadline.left()
        if left <= 0:
            raise timeout()
        wait(left)
