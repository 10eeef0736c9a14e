"""A commit in sync (``Verdicts.converged``): said once per commit, and again for the
workloads a sharded replica gains at that commit (bench/README.md, benchmark 12, problem 3:
the shards taken from a stopped replica had no metric rows nor statuses on their new holder).

The desired revision is a stand-in with only what ``converged`` reads (its workloads' keys);
the metrics, signals and state are the daemon's own."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gitray.core.model import ObjectKey
from gitray.daemon.metrics import Metrics
from gitray.daemon.signals import Signals
from gitray.daemon.state import StateBox
from gitray.daemon.verdicts import Verdicts
from tests.clock import ManualClock

SHA = "c0ffee" + "0" * 34
A, B, C = (ObjectKey("RayService", "team-a", n) for n in ("a", "b", "c"))


def desired(*keys: ObjectKey) -> Any:
    return SimpleNamespace(workloads=tuple(SimpleNamespace(key=k) for k in keys))


def made() -> tuple[Verdicts, Metrics, list[tuple[ObjectKey | None, str, str]]]:
    posted: list[tuple[ObjectKey | None, str, str]] = []
    metrics = Metrics()
    verdicts = Verdicts(lambda sha, key, state, text: posted.append((key, state, text)),
                        metrics, Signals(metrics, clock=ManualClock()), StateBox(),
                        lambda d: {})
    return verdicts, metrics, posted


def test_a_commit_is_said_in_sync_once() -> None:
    verdicts, metrics, posted = made()
    verdicts.converged(SHA, desired(A, B))
    assert posted == [(A, "success", "in sync at c0ffee0"), (B, "success", "in sync at c0ffee0"),
                      (None, "success", "2 workload(s) in sync at c0ffee0")]
    posted.clear()
    verdicts.converged(SHA, desired(A, B))  # the next pass of the same commit
    assert posted == []
    assert sorted(metrics.table.views()) == [A, B]


def test_workloads_of_shards_gained_at_the_same_commit_get_their_rows_and_statuses() -> None:
    verdicts, metrics, posted = made()
    verdicts.converged(SHA, desired(A, B))
    posted.clear()
    verdicts.converged(SHA, desired(A, B, C))  # a shard gained: C's workloads are this one's
    assert [(k, s) for k, s, _ in posted] == [(C, "success"), (None, "success")]
    assert sorted(metrics.table.views()) == [A, B, C]
    assert metrics.table.get(C).state == "in-sync"
    posted.clear()
    verdicts.converged(SHA, desired(A))  # a shard lost: nothing to say
    assert posted == []
    verdicts.converged(SHA, desired(A, C))  # ... and gained back
    assert [(k, s) for k, s, _ in posted] == [(C, "success"), (None, "success")]


def test_a_new_commit_is_said_in_sync_for_every_workload() -> None:
    verdicts, _, posted = made()
    verdicts.converged(SHA, desired(A, B))
    posted.clear()
    verdicts.converged("d" * 40, desired(A, B))
    assert [k for k, _, _ in posted] == [A, B, None]
