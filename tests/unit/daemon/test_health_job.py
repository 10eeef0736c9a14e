"""The health watch of a sharded replica (``HealthJob``) across the loss of a shard: a read
that began while the shard was held speaks only for the shards still held in the same epoch
when it ends (bench/README.md, benchmark 12, problem 1: a read in flight across a loss wrote
the lost workloads' rows and would post their statuses beside their next holder's).

The desired revision is a stand-in with only what the job reads (its workloads' keys); the
watch, signals, metrics and state are the daemon's own."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.daemon.healthwatch import HealthJob, HealthWatch, watched
from gitray.daemon.metrics import Metrics
from gitray.daemon.signals import Signals
from gitray.daemon.state import DaemonState, PassLock, StateBox
from gitray.engine.ownership import Ownership
from gitray.engine.shards import shard_of
from tests.clock import ManualClock

SHA = "0123456" + "0" * 33
S = 6


@dataclass(frozen=True)
class Result:
    workloads: tuple[Any, ...]


@dataclass(frozen=True)
class Desired:  # (what owned_desired replaces: ``result.workloads``)
    result: Result

    @property
    def workloads(self) -> tuple[Any, ...]:
        return self.result.workloads


def in_shard(shard: int) -> ObjectKey:
    return next(k for n in range(200) if shard_of(
        k := ObjectKey("RayService", "team-a", f"svc-{n}"), S) == shard)


KEPT, LOST, OTHER = in_shard(0), in_shard(1), in_shard(2)


def job(held: list[dict[int, int]], clock: ManualClock | None = None, read_s: float = 0.0,
        **state_now: Any) -> tuple[HealthJob, Metrics, list[tuple[Any, ...]]]:
    """The job of a replica whose ownership is read as ``held`` says, in turn (each read
    taking ``read_s`` on ``clock``), in sync at ``SHA`` unless ``state_now`` says more."""
    clock = clock or ManualClock()

    def health(d: Any) -> dict[ObjectKey, str]:
        clock.advance(read_s)
        return {w.key: "greeter UNHEALTHY" for w in d.workloads}
    metrics, posted = Metrics(), []
    signals = Signals(metrics, clock=ManualClock())
    state = StateBox()
    state.update(**{"synced": SHA, "attempted": SHA, **state_now})
    revisions = SimpleNamespace(snapshot=SimpleNamespace(revision=SHA))
    views = iter(held)
    everything = Desired(Result(tuple(SimpleNamespace(key=k) for k in (KEPT, LOST, OTHER))))
    made = HealthJob(HealthWatch(signals, lambda *status: posted.append(status)), state,
                     revisions, PassLock(), lambda: True,  # type: ignore[arg-type]
                     health, lambda _snap: everything,  # type: ignore[arg-type,return-value]
                     lambda: Ownership(S, next(views)), clock)
    return made, metrics, posted


def test_a_health_read_speaks_only_for_the_shards_still_held_when_it_ends() -> None:
    read, metrics, posted = job([{0: 3, 1: 3}, {0: 3}])  # shard 1 lost during the read
    read()
    assert [key for _, key, _, _ in posted] == [KEPT]
    assert sorted(metrics.table.views()) == [KEPT]


def test_a_shard_taken_again_in_another_epoch_is_not_spoken_for_either() -> None:
    read, _, posted = job([{0: 3, 1: 3}, {0: 3, 1: 4}])
    read()
    assert [key for _, key, _, _ in posted] == [KEPT]


def test_held_throughout_every_workload_of_the_held_shards_is_read() -> None:
    read, metrics, posted = job([{0: 3, 1: 3}, {0: 3, 1: 3}])
    read()
    assert sorted(key for _, key, _, _ in posted) == sorted([KEPT, LOST])
    assert sorted(metrics.table.views()) == sorted([KEPT, LOST])



def test_a_read_that_took_t_is_followed_by_t_without_one() -> None:
    clock = ManualClock()
    read, _, _ = job([{0: 3, 1: 3}] * 6, clock, read_s=40.0)  # (a read at 10,000 workloads)
    reads = []
    for _ in range(10):  # the scheduler calls it every 10 s
        before = clock()
        read()
        reads.append(clock() > before)
        clock.advance(10)
    # read at 0 (ends at 40), rests to 80; the calls at 50, 60, 70 pass; reads at 80 ...
    assert reads == [True, False, False, False, True, False, False, False, True, False]


# ---- while the newest commit waits for its verdict ----------------------------------------------

OLD = "fedcba9" + "0" * 33
ALL = {0: 3, 1: 3, 2: 3}


@pytest.mark.parametrize(("state", "expected"), [
    (DaemonState(), ("", None)),  # nothing synced, nothing attempted
    (DaemonState(synced=SHA, attempted=SHA), (SHA, None)),  # in sync: every workload
    (DaemonState(synced=SHA, attempted=SHA, settled=(OLD, frozenset({KEPT}))), (SHA, None)),
    (DaemonState(synced=OLD, attempted=SHA, settled=(SHA, frozenset({KEPT}))),
     (SHA, frozenset({KEPT}))),  # waiting: what its last pass found in sync
    (DaemonState(attempted=SHA, settled=(SHA, frozenset({KEPT}))),  # (its first commit)
     (SHA, frozenset({KEPT}))),
    (DaemonState(synced=OLD, attempted=SHA, settled=(OLD, frozenset({KEPT}))), ("", None)),
    (DaemonState(synced=OLD, attempted=SHA, settled=(SHA, frozenset())), ("", None)),
])
def test_watched_says_which_commit_the_watch_speaks_for_and_what_it_reads(
        state: DaemonState, expected: tuple[str, Any]) -> None:
    assert watched(state) == expected


def test_while_the_newest_commit_waits_the_workloads_in_sync_at_it_are_watched() -> None:
    """A RayJob of SHA runs for hours (or an upgrade is paused, or a workload failed at SHA):
    the workloads SHA's last pass found in sync are read and spoken for at SHA; the others
    are left to their runs. Before, the watch read nothing until SHA was in sync."""
    read, metrics, posted = job([ALL, ALL], synced=OLD,
                                settled=(SHA, frozenset({KEPT, OTHER})))
    read()
    assert sorted(key for _, key, _, _ in posted) == sorted([KEPT, OTHER])
    assert {sha for sha, _, _, _ in posted} == {SHA}
    assert sorted(metrics.table.views()) == sorted([KEPT, OTHER])


def test_nothing_is_read_when_the_last_pass_spoke_of_another_commit() -> None:
    read, metrics, posted = job([ALL, ALL], synced=OLD, settled=(OLD, frozenset({KEPT})))
    read()
    assert posted == [] and metrics.table.views() == {}
