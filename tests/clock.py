"""The one manual clock of the tests: monotonic time that moves only when told (or slept)."""

from __future__ import annotations

__all__ = ["ManualClock"]


class ManualClock:
    """Call it (or ``monotonic()``) for the time; ``advance``/``sleep`` move it. Stands for a
    process being paused, or for waits that should take no real time."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.now += seconds
