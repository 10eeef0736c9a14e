"""The daemon's pass lock (``PassLock``): the jobs that read beside passes never keep a pass
out. Real threads; a plain lock is what benchmark 12 caught starving every drift pass of two
replicas at 10,000 RayServices while the health watch took it again round after round."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gitray.daemon.state import PassLock


def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_reader_takes_it_only_when_it_is_free() -> None:
    lock = PassLock()
    assert lock.acquire_if_idle()
    assert not lock.acquire_if_idle()  # (held: not again, at once)
    lock.release()
    with lock:
        assert not lock.acquire_if_idle()
    assert lock.acquire_if_idle()
    lock.release()


def test_a_pass_waiting_keeps_readers_out_until_it_has_run() -> None:
    lock, ran = PassLock(), threading.Event()
    assert lock.acquire_if_idle()  # a health read holds it

    def a_pass() -> None:
        with lock:
            ran.set()
            time.sleep(0.05)
    t = threading.Thread(target=a_pass)
    t.start()
    _until(lambda: lock.waiting == 1)
    lock.release()  # the read ends; the next read comes at once, the pass waiting still
    taken = []  # whether the pass had run, at each read that got the lock
    for _ in range(200):
        if lock.acquire_if_idle():
            taken.append(ran.is_set())
            lock.release()
    t.join(5)
    assert ran.is_set() and all(taken)
    assert lock.waiting == 0 and lock.acquire_if_idle()


def test_a_timed_out_wait_is_no_longer_counted() -> None:
    lock = PassLock()
    with lock:
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=0.05)))
        t.start()
        t.join(5)
        assert got == [False] and lock.waiting == 0
