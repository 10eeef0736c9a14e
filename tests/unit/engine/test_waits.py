"""core.waits: the one deadline / backoff / poll helper, on a manual clock."""

from __future__ import annotations

import random

import pytest

from gitray.core.waits import Backoff, Clock, Deadline, poll
from tests.clock import ManualClock


def test_poll_returns_the_first_value_and_waits_between_attempts() -> None:
    manual = ManualClock(100.0)
    clock = Clock(monotonic=manual.monotonic, sleep=manual.sleep)
    answers = iter([None, None, "ready"])
    waits: list[float] = []

    def wait(left: float) -> None:
        waits.append(left)
        manual.sleep(1.0)

    assert poll(lambda: next(answers), Deadline(10, clock), wait=wait,
                timeout=lambda: AssertionError("no")) == "ready"
    assert waits == [10.0, 9.0]


def test_poll_raises_the_timeout_error_once_the_deadline_has_passed() -> None:
    manual = ManualClock(100.0)
    clock = Clock(monotonic=manual.monotonic, sleep=manual.sleep)
    attempts: list[float] = []

    def attempt() -> None:
        attempts.append(manual.now)

    with pytest.raises(TimeoutError, match="gave up"):
        poll(attempt, Deadline(3, clock), wait=lambda _left: manual.sleep(2.0),
             timeout=lambda: TimeoutError("gave up"))
    assert attempts == [100.0, 102.0, 104.0]  # the last attempt is after the deadline


def test_a_zero_deadline_makes_a_single_attempt() -> None:
    manual = ManualClock(100.0)
    calls: list[int] = []
    with pytest.raises(TimeoutError):
        poll(lambda: calls.append(1), Deadline(0, Clock(monotonic=manual.monotonic)),
             wait=lambda _left: None, timeout=TimeoutError)
    assert calls == [1]


def test_backoff_grows_to_its_cap() -> None:
    pauses = Backoff(0.5, factor=2.0, cap=3.0)
    assert [pauses.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_jitter_stays_within_its_bounds() -> None:
    pauses = Backoff(1.0, factor=1.0, cap=1.0, jitter=0.5, rng=random.Random(7))
    values = [pauses.next() for _ in range(200)]
    assert all(0.5 <= v <= 1.5 for v in values) and len(set(values)) > 1


def test_a_deadline_partly_spent_before_it_was_made_ends_that_much_sooner() -> None:
    manual = ManualClock(100.0)
    clock = Clock(monotonic=manual.monotonic, sleep=manual.sleep)
    resumed = Deadline(30, clock, spent=25)
    assert (resumed.elapsed(), resumed.left()) == (25, 5)
    attempts: list[float] = []

    def attempt() -> None:
        attempts.append(manual.now)

    with pytest.raises(TimeoutError):
        poll(attempt, resumed, wait=lambda _left: manual.sleep(2.0), timeout=TimeoutError)
    assert attempts == [100.0, 102.0, 104.0, 106.0]  # 5 s left, not 30
    assert resumed.elapsed() == 31  # counted from the step's first start
