"""Fault injection for gitray's own fault tests: stop the process at an exact step boundary.

Off unless the environment variable ``GITRAY_FAILPOINTS_FILE`` names a file; then, at each
failpoint, gitray reads that file (when it exists) and, when a line ``<point> <step>`` matches,
stops itself with SIGSTOP. The test sees the stopped process, reads the state it left and
SIGKILLs it — a kill at a boundary that is milliseconds wide (e.g. between Serve reaching
RUNNING and the head Service switch), which no outside observer could hit reliably.

Points: ``step-done`` (the step's effect happened, its result not yet recorded) and
``step-recorded`` (the result is in the run record). I/O: reads one file, signals itself.
"""

from __future__ import annotations

import os
import signal
import threading
from enum import StrEnum
from pathlib import Path

__all__ = ["ENV_VAR", "Point", "hit"]

ENV_VAR = "GITRAY_FAILPOINTS_FILE"


class Point(StrEnum):
    STEP_DONE = "step-done"
    STEP_RECORDED = "step-recorded"


def hit(point: Point, step: int) -> None:
    """Stop this process when the failpoints file asks for ``point`` at ``step`` (1-based)."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        wanted = Path(path).read_text().split("\n")
    except OSError:
        return
    if f"{point.value} {step}" in (line.strip() for line in wanted):
        # To this thread: it stops before its next line. (Sent to the process, the kernel hands
        # it to a thread of its choice, which stops the others when it runs; on a loaded
        # machine the calling thread went on meanwhile and recorded the step it was to stop
        # before.)
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
