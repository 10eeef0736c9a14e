"""A run that stopped without an outcome (``Daemon._run_ended(..., None)``: the Lease or its
shard seen lost, an API error) is resumed by a retry pass, whoever seems to drive its shard at
that moment. Sharded, a run stops when its shard's renew is late (the reporter's check); the
shard may still be this replica's a round later, and nothing else would resume the run: in a
full run of test_shard_upgrades a first rollout stopped so ("the shard of ... was lost") and
waited at its step for ten minutes on the replica that held its shard all along."""

from __future__ import annotations

from collections.abc import Callable

from gitray.core.model import ObjectKey
from gitray.daemon.daemon import Daemon
from gitray.engine.fleet import Flight

KEY = ObjectKey("RayService", "team-a", "svc-a")


def test_a_sharded_run_stopped_without_an_outcome_is_retried(
        make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(shards=6)
    assert not daemon.owner.ownership().owns(KEY)  # (no shard held: as when a renew is late)
    daemon._run_ended(KEY, Flight("a" * 40, "h", 0, 0.0), None)
    assert daemon.state.current.retry_at > 0
    assert daemon.state.current.failures == 1


def test_an_unsharded_run_stopped_without_an_outcome_is_retried(daemon: Daemon) -> None:
    daemon._run_ended(KEY, Flight("a" * 40, "h", 0, 0.0), None)
    assert daemon.state.current.retry_at > 0
