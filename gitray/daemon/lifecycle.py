"""Running ``gitray sync`` until SIGTERM or SIGINT, then handing over within a bound. I/O
(signals, threads).

The hand-over (``Daemon.stop``) runs on a thread of its own and is given ``STOP_GRACE_S``: run
records are durable and the next leader (or shard holder) resumes, so a shutdown stuck behind
a slow request must not outlive the Pod's grace period. Once it is done the process exits even
when a sync pass was left behind still planning: its thread, a worker of the scheduler's pool
(a daemon thread, but ``concurrent.futures`` joins its workers at exit), would hold the exit
for as long as it plans (tens of seconds at 10,000 workloads). That pass starts no run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence

__all__ = ["STOP_GRACE_S", "run_until_signalled"]

log = logging.getLogger("gitray.sync")  # the `gitray sync` logger (log pipelines match it)

STOP_GRACE_S = 20.0  # within Kubernetes' default 30 s terminationGracePeriodSeconds


def run_until_signalled(start: Callable[[], None], stop: Callable[[], Sequence[str]]) -> int:
    """``start``, wait for SIGTERM/SIGINT, then ``stop`` within ``STOP_GRACE_S`` (else exit
    at once, status 1). When ``stop`` says it left work behind still running, exit at once
    once it returns (status 0): a thread of that work would hold the interpreter's exit."""
    done = threading.Event()

    def stopping(signum: int, _frame: object) -> None:
        log.info("signal %s: handing over", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    start()
    # Wake up regularly: a signal may be delivered to any thread, and CPython runs the
    # Python handler only when the main thread returns to the interpreter. An untimed
    # wait here could leave SIGTERM unhandled for good.
    while not done.wait(0.5):
        pass
    left: list[str] = []
    stopper = threading.Thread(target=lambda: left.extend(stop()), name="gitray-stop",
                               daemon=True)
    stopper.start()
    stopper.join(STOP_GRACE_S)
    if stopper.is_alive():
        log.error("shutdown took longer than %.0f s; exiting anyway", STOP_GRACE_S)
        _exit_now(1)
    if left:
        log.warning("handed over; exiting without waiting for %s", ", ".join(left))
        _exit_now(0)
    return 0


def _exit_now(status: int) -> None:
    """Exit at once (no thread joined), the logs and output flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # (a closed pipe: nothing more to say)
            stream.flush()
    os._exit(status)
