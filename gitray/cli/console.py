"""Terminal output for long runs: one line per step event, throttled progress. No logic.

``[ray-serve/RayService/serve-demo] 4/7 wait-serve-running serve-demo-5fd71: 1/2 apps
DEPLOYING, 35 s``. Progress lines for the same step are printed at most every few seconds.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from gitray.engine.executor import StepEvent

__all__ = ["ConsoleReporter", "say_retry"]


class ConsoleReporter:
    def __init__(self, out: TextIO | None = None, every_s: float = 5.0) -> None:
        self.out = out or sys.stdout
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, event: StepEvent) -> None:
        where = f"[{event.key}] {event.index}/{event.total} {event.step.type.value} " \
                f"{event.step.target}"
        if event.phase == "progress":
            now = time.monotonic()
            with self._lock:
                if now - self._last.get(str(event.key), 0.0) < self.every_s:
                    return
                self._last[str(event.key)] = now
            line = f"{where}: {event.detail}"
        elif event.phase == "start":
            line = f"{where} ({event.detail}) ..." if event.detail else f"{where} ..."
        elif event.phase == "done":
            line = f"{where}: done ({event.detail})"
        elif event.phase == "resume":
            line = f"[{event.key}] resuming an interrupted run at step {event.index}/" \
                   f"{event.total} {event.step.type.value} ({event.detail})"
        else:
            line = f"{where}: FAILED: {event.detail}"
        with self._lock:
            print(line, file=self.out, flush=True)


def say_retry(reason: str, delay: float) -> None:
    """An ``on_retry`` for Git host calls: one line on stderr (the reason is already redacted)."""
    print(f"gitray: {reason}; trying again in {delay:.0f}s", file=sys.stderr)
