"""The hand-over on SIGTERM (``Daemon.stop``) is bounded by a pass still planning: at 10,000
workloads a pass plans for tens of seconds, and the shards (or the Lease) must go to the other
replicas at once, not after it. The pass left behind starts no run: the fleet is stopped.

No API server is needed (the ``daemon`` fixture, conftest.py)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time

import pytest

from gitray.core.model import ObjectKey
from gitray.daemon import daemon as daemon_module
from gitray.daemon.daemon import Daemon
from gitray.engine.executor import WorkloadOutcome
from gitray.engine.fleet import Fleet
from gitray.plans.plan import Action, WorkloadPlan


def test_stop_hands_over_without_waiting_for_a_pass_still_planning(
        daemon: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(daemon_module, "STOP_GRACE_S", 2.0)  # waits for a pass 0.5 s at most
    planning = threading.Event()
    done = threading.Event()

    def a_long_pass() -> None:
        with daemon._lock:  # what ``Daemon.sync`` holds while it plans
            planning.set()
            done.wait(30)

    passing = threading.Thread(target=a_long_pass, daemon=True)
    passing.start()
    assert planning.wait(5)
    stopper = threading.Thread(target=daemon.stop, daemon=True)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="gitray.sync"):
        stopper.start()
        stopper.join(10)
    try:
        assert not stopper.is_alive(), "stop() waited for the pass"
        assert time.monotonic() - started < 10
        assert passing.is_alive()  # the pass was still planning when stop() returned
        assert "still planning" in caplog.text
    finally:
        done.set()
        passing.join(5)


def test_a_pass_left_behind_starts_no_run_on_the_stopped_fleet() -> None:
    ran: list[ObjectKey] = []
    ended: list[ObjectKey] = []
    fleet = Fleet(2, lambda key, flight, outcome: ended.append(key))
    fleet.shutdown()
    key = ObjectKey("RayCluster", "team-a", "c1")
    wp = WorkloadPlan(key=key, action=Action.CREATE, wave=0, desired_hash="h")

    def run() -> WorkloadOutcome:
        ran.append(key)
        raise AssertionError("a run started on a stopped fleet")

    assert fleet.dispatch(wp, "a" * 40, "push", run) is False  # not an error: said no
    assert fleet.in_flight() == {}
    assert ran == [] and ended == []


_LEFT_BEHIND = """
import logging, sys, threading, time
from gitray.daemon.lifecycle import run_until_signalled
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
def start():
    # a pass planning for a minute on a worker thread of its own (not a daemon thread, like
    # the scheduler's pool), and an idle worker that ends when asked
    threading.Thread(target=time.sleep, args=(60,), name="a-pass-planning").start()
    idle = threading.Event()
    threading.Thread(target=idle.wait, name="an-idle-worker").start()
    start.idle = idle
def stop():
    start.idle.set()
    print("handed over", flush=True)
sys.exit(run_until_signalled(start, stop))
"""


def test_the_process_exits_once_handed_over_even_with_a_pass_left_behind() -> None:
    """Found at 10,000 workloads (bench 12): the shards went to the others 5 s after SIGTERM,
    and the process lived on until the pass left behind ended (SIGKILLed)."""
    proc = subprocess.Popen([sys.executable, "-c", _LEFT_BEHIND], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)  # not the 60 s the pass would take
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - sent
    assert proc.returncode == 0, err
    assert out == "handed over\n"
    assert "exiting without waiting for a-pass-planning" in err, err
    assert "an-idle-worker" not in err  # ended when asked: not reported as left behind
    assert took < 30
