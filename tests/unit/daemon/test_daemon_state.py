"""The daemon's state: immutable snapshots, every change swapped in under one lock."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import replace

import pytest

from gitray.daemon.state import DaemonState, StateBox, poll_trigger


def test_a_snapshot_cannot_be_changed_in_place() -> None:
    state = StateBox().current
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.polls = 1  # type: ignore[misc]


def test_update_swaps_in_a_new_snapshot_and_keeps_the_old_one_intact() -> None:
    box = StateBox()
    before = box.current
    after = box.update(synced="abc", failures=2)
    assert (before.synced, before.failures) == ("", 0)
    assert box.current is after and (after.synced, after.failures) == ("abc", 2)


def test_change_returns_the_snapshots_around_it() -> None:
    box = StateBox()
    box.update(git_problem="unreachable")
    before, after = box.change(lambda s: replace(s, git_problem=""))
    assert before.git_problem == "unreachable" and after.git_problem == ""


def test_concurrent_read_modify_writes_lose_no_update() -> None:
    box, threads, each = StateBox(), 8, 2000

    def bump() -> None:
        for _ in range(each):
            box.change(lambda s: replace(s, polls=s.polls + 1))

    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert box.current.polls == threads * each
    assert isinstance(box.current, DaemonState)


# ---- poll_trigger: the pass a poll starts --------------------------------------------------

A, B = "a" * 40, "b" * 40


def _trigger(state: DaemonState, newest: str = B, *, retry: bool = False, ended: bool = False,
             drift: bool = False, controls: bool = False) -> tuple[str | None, int]:
    asked: list[bool] = []

    def changed() -> bool:
        asked.append(True)
        return controls
    return poll_trigger(state, newest, retry_due=retry, ended=ended, drift_due=drift,
                        controls_changed=changed), len(asked)


IN_SYNC = DaemonState(synced=B, attempted=B)
WAITING = DaemonState(synced=A, attempted=B)  # B's runs in flight, paused, or one failed at B


@pytest.mark.parametrize("state", [DaemonState(), IN_SYNC, WAITING,
                                   DaemonState(synced=B, attempted=A)])
@pytest.mark.parametrize("retry,ended,drift,controls", [
    (r, e, d, c) for r in (False, True) for e in (False, True) for d in (False, True)
    for c in (False, True)])
def test_every_combination_gives_the_first_due_pass_in_order(
        state: DaemonState, retry: bool, ended: bool, drift: bool, controls: bool) -> None:
    got, asked = _trigger(state, retry=retry, ended=ended, drift=drift, controls=controls)
    if state.attempted != B:
        assert (got, asked) == ("commit", 0)  # a commit not taken yet comes before all else
    elif retry:
        assert (got, asked) == ("retry", 0)  # the controls are not read then
    elif controls:
        assert (got, asked) == ("retry", 1)
    else:
        assert got == ("run" if ended else "drift" if drift else None) and asked == 1


def test_drift_is_checked_while_the_newest_commit_waits_for_its_verdict() -> None:
    """A RayJob running, an upgrade paused or one workload failed at B: B is attempted but not
    synced, and the other workloads' drift is healed all the same (before: only in sync)."""
    assert _trigger(WAITING, drift=True)[0] == "drift"
    assert _trigger(IN_SYNC, drift=True)[0] == "drift"
    assert _trigger(WAITING)[0] is None and _trigger(IN_SYNC)[0] is None


def test_a_new_commit_is_taken_even_with_a_retry_due_and_a_run_ended() -> None:
    assert _trigger(IN_SYNC, "c" * 40, retry=True, ended=True, drift=True) == ("commit", 0)
