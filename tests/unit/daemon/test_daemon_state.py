"""The daemon's state: immutable snapshots, every change swapped in under one lock."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import replace

import pytest

from gitray.daemon.state import DaemonState, StateBox


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
