"""Who a replica of ``gitray sync`` is (gitray.daemon.owners): the one Lease unsharded, as
before, or the shards its keeper holds; what a round's changes do to its parked runs, its
metrics rows and its passes.

Real components throughout (the wiring, the Lease, the shard keeper, the fleet, the metrics);
the API server is a closed port on loopback, so nothing is ever held here. Holding shards and
handing them over against a real API server is for the integration tests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from gitray.core.model import ObjectKey
from gitray.daemon.metrics import Metrics
from gitray.daemon.owners import LeaseOwner, ShardOwner, owner_for
from gitray.engine.fleet import Fleet
from gitray.engine.ownership import Ownership
from gitray.engine.shardkeeper import ShardFence
from gitray.engine.shards import shard_of
from gitray.engine.shardview import Changes
from gitray.engine.wiring import ExecSettings, Wiring
from gitray.k8s.client import Kube
from gitray.k8s.settings import KubeSettings
from tests.unit.engine.test_fleet import Ends, park, wp
from tests.unit.k8s.test_kube_unreachable import _closed_port, _kubeconfig

S = 4
KEYS = [ObjectKey("RayJob", "ns", f"job-{i}") for i in range(8)]


@pytest.fixture
def wiring(tmp_path: Path) -> Iterator[Wiring]:
    kube = Kube.connect(KubeSettings(kubeconfig=_kubeconfig(tmp_path, _closed_port()),
                                     request_timeout_s=2))
    yield Wiring(kube, ExecSettings(lease_namespace="gitray", identity="replica-a"))
    kube.close()


class _Passes:
    def __init__(self) -> None:
        self.asked = 0

    def __call__(self) -> None:
        self.asked += 1


def _owner(wiring: Wiring, shards: int, fleet: Fleet, metrics: Metrics,
           stopping: threading.Event, passes: _Passes) -> LeaseOwner | ShardOwner:
    owner = owner_for(shards, wiring, BackgroundScheduler(timezone="UTC"), metrics, fleet,
                      stopping, lambda: None, lambda _e: None, on_gained=passes,
                      post_overall=lambda *_: None)
    assert isinstance(owner, LeaseOwner | ShardOwner)
    return owner


def test_unsharded_the_owner_is_the_one_lease_as_before(wiring: Wiring) -> None:
    fleet = Fleet(1, lambda *_: None)
    try:
        owner = _owner(wiring, 1, fleet, Metrics(), threading.Event(), _Passes())
        assert isinstance(owner, LeaseOwner)
        assert owner.lease is wiring.lease and owner.lease.settings.name == "gitray"
        assert owner.fence(0) is wiring.lease  # (every run fenced by the Lease)
        assert not owner.leading() and owner.ownership() == Ownership(1, {})
    finally:
        fleet.shutdown()


def test_sharded_the_owner_is_a_shard_keeper_that_holds_nothing_yet(wiring: Wiring) -> None:
    fleet = Fleet(1, lambda *_: None)
    try:
        owner = _owner(wiring, S, fleet, Metrics(), threading.Event(), _Passes())
        assert isinstance(owner, ShardOwner)
        assert owner.keeper.identity == "replica-a"
        assert not owner.leading() and owner.ownership() == Ownership(S, {})
        assert owner.fence(2) == ShardFence(owner.keeper, 2, -1)
        owner.attempt()  # a round against an API server that does not answer: no shard
        assert not owner.leading()
        owner.release()
    finally:
        fleet.shutdown()


def test_a_lost_shard_gives_up_its_parked_runs_and_rows_and_no_other(wiring: Wiring) -> None:
    fleet = Fleet(2, lambda *_: None)
    metrics, passes = Metrics(), _Passes()
    try:
        owner = _owner(wiring, S, fleet, metrics, threading.Event(), passes)
        for k in KEYS:
            park(fleet, k, Ends())
            metrics.table.update(k, state="progressing")
        lost = (shard_of(KEYS[0], S),)
        kept = sorted(k for k in KEYS if shard_of(k, S) not in lost)
        assert kept and len(kept) < len(KEYS)
        assert isinstance(owner, ShardOwner)
        owner.changed(Changes(lost=lost))  # (as a round returns them)
        assert sorted(fleet.parked()) == kept
        assert sorted(metrics.table.views()) == kept
        assert passes.asked == 0
        assert metrics.registry.get_sample_value("gitray_leader") == 0
    finally:
        fleet.shutdown()


def test_the_keeper_hears_a_shard_busy_while_a_run_of_it_is_on_a_worker_not_parked(
        wiring: Wiring) -> None:
    """A shard the keeper hands over is released once ``busy`` says no: a run on a worker
    (between step boundaries) holds its own shard only; a parked run (at a step boundary)
    holds none."""
    fleet = Fleet(2, lambda *_: None)
    started, go_on = threading.Event(), threading.Event()
    on_worker, parked = KEYS[0], next(k for k in KEYS if shard_of(k, S) != shard_of(KEYS[0], S))

    def run() -> None:
        started.set()
        go_on.wait(30)

    try:
        owner = _owner(wiring, S, fleet, Metrics(), threading.Event(), _Passes())
        assert isinstance(owner, ShardOwner)
        assert not any(owner.keeper.busy(s) for s in range(S))
        park(fleet, parked, Ends())
        assert fleet.dispatch(wp(on_worker, 0, True), "abc", "commit", run)
        assert started.wait(30)
        assert [s for s in range(S) if owner.keeper.busy(s)] == [shard_of(on_worker, S)]
        go_on.set()
        assert fleet.wait(30)
        assert not any(owner.keeper.busy(s) for s in range(S))
    finally:
        go_on.set()
        fleet.shutdown()


def test_a_gained_shard_asks_for_a_pass_unless_stopping(wiring: Wiring) -> None:
    fleet = Fleet(1, lambda *_: None)
    stopping, passes = threading.Event(), _Passes()
    try:
        owner = _owner(wiring, S, fleet, Metrics(), stopping, passes)
        assert isinstance(owner, ShardOwner)
        owner.changed(Changes(gained={1: 5}))
        assert passes.asked == 1
        owner.changed(Changes(lost=(1,), gained={1: 6}))  # lost and taken again
        assert passes.asked == 2
        stopping.set()
        owner.changed(Changes(gained={2: 1}))
        owner.attempt()  # (no round either)
        assert passes.asked == 2
    finally:
        fleet.shutdown()
