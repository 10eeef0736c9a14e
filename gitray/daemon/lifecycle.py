"""Running ``gitray sync`` until SIGTERM or SIGINT, then handing over within a bound. I/O
(signals, threads).

The hand-over (``Daemon.stop``) runs on a thread of its own and is given ``STOP_GRACE_S``: run
records are durable and the next leader (or shard holder) resumes, so a shutdown stuck behind
a slow request must not outlive the Pod's grace period.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

__all__ = ["STOP_GRACE_S", "run_until_signalled"]

log = logging.getLogger("gitray.sync")  # the `gitray sync` logger (log pipelines match it)

STOP_GRACE_S = 20.0  # within Kubernetes' default 30 s terminationGracePeriodSeconds


def run_until_signalled(start: Callable[[], None], stop: Callable[[], None]) -> int:
    """``start``, wait for SIGTERM/SIGINT, then ``stop`` within ``STOP_GRACE_S`` (else exit
    at once, status 1)."""
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
    stopper = threading.Thread(target=stop, name="gitray-stop", daemon=True)
    stopper.start()
    stopper.join(STOP_GRACE_S)
    if stopper.is_alive():
        log.error("shutdown took longer than %.0f s; exiting anyway", STOP_GRACE_S)
        logging.shutdown()
        os._exit(1)
    return 0
