"""Fencing per shard (``gitray sync --shards S``): a run record names the shard whose holder
wrote it beside that shard Lease's epoch; a replica that does not drive a shard (in the
epoch its runs were started in) refuses before any request; a later holder's epoch is higher,
also across shard counts. Unsharded records are written exactly as before.

The API server here is a closed port on loopback: nothing answers, so a refusal that is not
``TransientError`` ("API server unreachable") was made before any request. What holding a
shard and writing under it does against a real API server is for the integration tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitray.core.errors import LeaseLostError
from gitray.core.model import ObjectKey
from gitray.engine.progress import ProgressStore
from gitray.engine.record import (
    Record,
    RunState,
    configmap_of,
    encode_record,
    record_from_json,
    record_of_configmap,
    record_to_json,
)
from gitray.engine.shardkeeper import ShardFence, ShardKeeper
from gitray.engine.shards import (
    LABEL_SHARD,
    ShardCount,
    View,
    next_epoch,
    shard_label,
    shard_of,
    switch_epoch_base,
)
from gitray.engine.shards import Claim as ShardClaim
from gitray.k8s.client import Kube
from gitray.k8s.election import LeaseSettings
from gitray.k8s.settings import KubeSettings
from gitray.plans.plan import Action, WorkloadPlan
from tests.unit.k8s.test_kube_unreachable import _closed_port, _kubeconfig

KEY = ObjectKey("RayService", "ray", "svc")


def _record(**changes: object) -> Record:
    fields: dict[str, object] = dict(
        key=KEY, revision="a" * 40, desired_hash="h", plan=WorkloadPlan(KEY, Action.NOOP, 0),
        cursor=0, steps=(), state=RunState.RUNNING, reason="", epoch=3, updated_at="t")
    return Record(**{**fields, **changes})  # type: ignore[arg-type]


# ---- the record names its shard ---------------------------------------------------------------


def test_a_sharded_record_keeps_its_shard_through_its_json_and_configmap() -> None:
    record = _record(epoch=8, shard="2-of-6")
    assert record_to_json(record)["shard"] == "2-of-6"
    assert record_from_json(record_to_json(record)) == record
    cm = configmap_of(record, "gitray", "default", "")
    assert cm["metadata"]["labels"][LABEL_SHARD] == "2-of-6"
    assert record_of_configmap(cm) == record


def test_an_unsharded_record_is_written_as_before_sharding() -> None:
    record = _record()
    assert "shard" not in record_to_json(record)
    assert json.loads(encode_record(record)).keys() == {
        "formatVersion", "workload", "revision", "desiredHash", "plan", "cursor", "steps",
        "state", "reason", "epoch", "updatedAt"}
    assert configmap_of(record, "gitray", "default", "")["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gitray", "gitray.io/instance": "default",
        "gitray.io/role": "progress"}


def test_a_record_written_before_sharding_reads_as_unsharded() -> None:
    data = record_to_json(_record())
    assert "shard" not in data
    assert record_from_json(data).shard == ""


# ---- a replica not driving the shard refuses before any request -------------------------------


@pytest.fixture
def unreachable(tmp_path: Path) -> Iterator[Kube]:
    kube = Kube.connect(KubeSettings(kubeconfig=_kubeconfig(tmp_path, _closed_port()),
                                     request_timeout_s=2))
    yield kube
    kube.close()


@pytest.fixture
def keeper(unreachable: Kube) -> ShardKeeper:
    """A keeper that has run no round: it drives nothing."""
    return ShardKeeper(unreachable, LeaseSettings(namespace="gitray", name="gitray",
                                                  identity="replica-a"), 6)


def test_a_shard_not_driven_has_a_fence_that_refuses_at_once(keeper: ShardKeeper) -> None:
    fence = keeper.fence(2)
    assert fence == ShardFence(keeper, 2, -1)
    with pytest.raises(LeaseLostError, match="shard 2 of 6 is no longer driven"):
        fence.ensure_held()


def test_a_fence_of_an_epoch_no_longer_held_refuses_at_once(keeper: ShardKeeper) -> None:
    with pytest.raises(LeaseLostError, match="in epoch 7"):
        ShardFence(keeper, 2, 7).ensure_held()


def test_a_replica_that_lost_the_shard_writes_no_run_record(unreachable: Kube,
                                                            keeper: ShardKeeper) -> None:
    store = ProgressStore(unreachable, "gitray", "default", keeper.fence(2), "2-of-6")
    with pytest.raises(LeaseLostError):  # (not TransientError: no request was made)
        store.begin(WorkloadPlan(KEY, Action.CREATE, 0), "a" * 40, -1)
    with pytest.raises(LeaseLostError):  # its epoch is not the fence's: refused first
        store.begin(WorkloadPlan(KEY, Action.CREATE, 0), "a" * 40, 4)


def test_a_record_of_a_newer_epoch_is_not_resumed_by_an_older_holder(
        unreachable: Kube, keeper: ShardKeeper) -> None:
    store = ProgressStore(unreachable, "gitray", "default", ShardFence(keeper, 2, 5), "2-of-6")
    with pytest.raises(LeaseLostError, match=r"a newer leader \(epoch 9\)"):
        store.resume(_record(epoch=9, shard="2-of-6"), 5)


# ---- epochs: a later holder's is higher -------------------------------------------------------


def test_the_next_holder_of_a_shard_writes_a_higher_epoch() -> None:
    first = next_epoch(None, 0)
    assert next_epoch(first, 0) > first
    assert next_epoch(first, first + 5) == first + 5  # (and never below the count's base)


def test_a_reshard_resumes_every_record_under_a_higher_epoch() -> None:
    """Records written under 6 shards (each shard its own epoch sequence): whatever shard of
    the new count a workload lands in, its first holder's epoch is above every old one."""
    old = {s: e for s, e in zip(range(6), (3, 11, 4, 7, 1, 9), strict=True)}
    view = View("replica-a", 4, ShardCount(6, 0), (), tuple(
        ShardClaim(s, 6, "replica-b", 0.0, e) for s, e in old.items()))
    base = switch_epoch_base(view)
    keys = [ObjectKey("RayService", "ray", f"svc-{i}") for i in range(40)]
    for key in keys:
        written = old[shard_of(key, 6)]
        resumed = next_epoch(None, base)  # the new count's Lease of its shard, taken first
        assert resumed > written, (key, shard_label(shard_of(key, 4), 4))


def test_a_shard_released_during_the_fence_read_is_said_released_not_recreated(
        keeper: ShardKeeper, monkeypatch: pytest.MonkeyPatch) -> None:
    """The keeper's round releases the shard while a run's fence reads its Lease (seen in
    tests/integration/test_shard_sync.py: "it was deleted and created again" for a Lease that
    was only released by this very replica)."""
    from gitray.engine import shardkeeper

    keeper._held[2] = shardkeeper._Held(epoch=3, uid="u-1", renewed_at=keeper._clock(),
                                        driving=True)

    def read_while_released(*_: object) -> dict[str, object]:
        keeper._held.pop(2)  # (the round's release, between the local check and the read)
        return {"metadata": {"uid": "u-1"}, "spec": {"holderIdentity": ""}}

    monkeypatch.setattr(keeper._kube, "get_or_none", read_while_released)
    with pytest.raises(LeaseLostError, match="shard 2 of 6 is no longer driven by this "
                                             "replica in epoch 3"):
        keeper.ensure_held(2, 3)


# ---- the keeper's rounds: a retry period apart from start to start ----------------------------


class _Stop:
    """``threading.Event`` as the keeper's loop uses it: each wait recorded, set after three."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def is_set(self) -> bool:
        return len(self.waits) >= 3

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return self.is_set()


@pytest.mark.parametrize(("round_s", "pause"), [(0.5, 1.5), (2.0, 0.0), (5.0, 0.0)])
def test_a_round_is_due_a_retry_period_after_the_last_one_began(
        unreachable: Kube, round_s: float, pause: float) -> None:
    """Rounds answered late (a slow API server) follow each other at once, so the held
    shards' renews stay a retry period apart; before, each round waited a whole retry period
    after it ended."""
    now = [100.0]

    def late_round() -> None:
        now[0] += round_s

    keeper = ShardKeeper(unreachable, LeaseSettings(namespace="gitray", name="gitray",
                                                    identity="replica-a", retry_period_s=2.0),
                         6, clock=lambda: now[0])
    keeper.round = late_round  # type: ignore[method-assign,assignment]
    stop = _Stop()
    keeper.run(stop)  # type: ignore[arg-type]
    assert stop.waits == [pause] * 3
    assert now[0] == 100.0 + 3 * round_s
