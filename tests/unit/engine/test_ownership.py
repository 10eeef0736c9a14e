"""Which workloads a replica of ``gitray sync --shards S`` drives (gitray.engine.ownership):
the plan and run records of a pass cut to the held shards, the shard label of what a shard's
runs create, the commit's overall status; unsharded, everything is returned as it was."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from gitray.core.errors import ConfigError
from gitray.core.model import ObjectKey
from gitray.engine.ownership import (
    Ownership,
    in_shards,
    labelled,
    owned,
    posts_overall,
    shard_labels,
)
from gitray.engine.record import Record, RunState
from gitray.engine.shards import LABEL_SHARD, shard_of
from gitray.plans.plan import Action, Plan, WorkloadPlan
from gitray.plans.planner import compute_plan
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, cluster_for, rayservice, with_objects
from tests.unit.plans.test_plan_batches import _fleet

S = 3


def _planned(own: Ownership | None = None) -> Plan:
    """A pass of three namespaces: new, changed, drifted and unchanged workloads, one gone from
    Git (pruned), one only the cluster still has, an old RayService cluster due for deletion;
    planned whole, or (``own``) only the workloads of the held shards, as a sharded replica
    plans them (the Planner's ``owns``)."""
    desired, state = _fleet()
    retired = cluster_for(rayservice("svc", "gamma", image="ray:prev"),
                          delete_after="2020-01-01T00:00:00Z")  # (due)
    return compute_plan(desired, with_objects(state, retired), CONFIG, revision="r",
                        against="live", now=NOW, owns=own.owns if own is not None else None)


@pytest.fixture(scope="module")
def plan() -> Plan:
    return _planned()


def _record(key: ObjectKey) -> Record:
    return Record(key=key, revision="r", desired_hash="h", plan=WorkloadPlan(key, Action.NOOP, 0),
                  cursor=0, steps=(), state=RunState.RUNNING, reason="", epoch=1, updated_at="")


# ---- the plan of a pass -----------------------------------------------------------------------


def test_the_fleet_has_workloads_in_every_shard_and_each_kind_of_work(plan: Plan) -> None:
    shards = {shard_of(w.key, S) for w in plan.workloads}
    assert shards == set(range(S))  # (else the cases below prove little)
    actions = {w.action for w in plan.workloads}
    assert {Action.CREATE, Action.DELETE, Action.NOOP} <= actions
    assert any(s.type is StepType.DELETE_CLUSTER for w in plan.workloads for s in w.steps
               if w.action is not Action.DELETE)  # an old cluster's deletion, not a prune


@pytest.mark.parametrize("held", [{0: 4}, {1: 7}, {0: 4, 2: 9}, {0: 1, 1: 1, 2: 1}])
def test_a_replica_plans_exactly_the_workloads_of_its_shards(plan: Plan,
                                                              held: dict[int, int]) -> None:
    mine = _planned(Ownership(S, held))
    assert [w.key for w in mine.workloads] == [
        w.key for w in plan.workloads if shard_of(w.key, S) in held]
    assert mine.workloads == tuple(w for w in plan.workloads if shard_of(w.key, S) in held)
    assert (mine.revision, mine.against) == (plan.revision, plan.against)


def test_the_shards_of_all_replicas_together_plan_every_workload_once(plan: Plan) -> None:
    parts = [_planned(Ownership(S, {s: 1})).workloads for s in range(S)]
    together = sorted((w for part in parts for w in part), key=lambda w: w.key)
    assert together == sorted(plan.workloads, key=lambda w: w.key)


def test_a_workload_of_a_shard_not_held_is_neither_pruned_nor_its_old_cluster_deleted(
        plan: Plan) -> None:
    deleting = [w for w in plan.workloads if any(
        s.type in {StepType.DELETE_CLUSTER, StepType.DELETE_JOB, StepType.DELETE_OBJECT}
        for s in w.steps)]
    assert deleting
    for w in deleting:
        others = {s: 1 for s in range(S) if s != shard_of(w.key, S)}
        assert _planned(Ownership(S, others)).workload(w.key) is None
        assert _planned(Ownership(S, {shard_of(w.key, S): 1})).workload(w.key) == w


def test_a_replica_holding_no_shard_plans_nothing(plan: Plan) -> None:
    assert _planned(Ownership(S, {})).workloads == ()




# ---- run records and other keyed things -------------------------------------------------------


def test_a_replica_keeps_the_run_records_of_its_shards_only(plan: Plan) -> None:
    records = [_record(w.key) for w in plan.workloads]
    mine = owned(records, Ownership(S, {2: 5}))
    assert mine == [r for r in records if shard_of(r.key, S) == 2]
    assert owned(records, Ownership(1, {})) == records


def test_the_parked_runs_of_lost_shards_are_found_by_their_workload(plan: Plan) -> None:
    keys = [w.key for w in reversed(plan.workloads)]
    assert in_shards(keys, (0, 2), S) == sorted(k for k in keys if shard_of(k, S) in {0, 2})
    assert in_shards(keys, (), S) == []
    assert in_shards(keys, range(S), S) == sorted(keys)


def test_ownership_answers_per_workload_with_its_shards_epoch() -> None:
    key = ObjectKey("RayService", "default", "text")  # shard 0 of 2, 3 and 6 (pinned)
    own = Ownership(6, {0: 12, 4: 3})
    assert (own.sharded, own.shard(key), own.owns(key), own.epoch(key)) == (True, 0, True, 12)
    other = ObjectKey("RayJob", "prod", "nightly-train")  # shard 5 of 6
    assert (own.owns(other), own.epoch(other)) == (False, None)
    assert own.describe() == {"count": 6, "held": {"0-of-6": 12, "4-of-6": 3}}
    assert Ownership(1, {0: 7}).owns(other) and not Ownership(1, {}).owns(other)


def test_a_pass_reports_only_the_shards_still_held_in_the_epoch_it_planned_them() -> None:
    planned = Ownership(6, {1: 0, 2: 0, 4: 0})
    now = Ownership(6, {1: 0, 4: 1, 5: 2})  # 2 lost, 4 lost and taken back, 5 gained
    assert planned.still_held(now) == Ownership(6, {1: 0})
    assert planned.still_held(planned) == planned
    assert planned.still_held(Ownership(6, {})) == Ownership(6, {})
    assert Ownership(1, {0: 3}).still_held(Ownership(1, {0: 3})) == Ownership(1, {0: 3})


@pytest.mark.parametrize("count", [0, -1, 65])
def test_an_impossible_shard_count_is_refused(count: int) -> None:
    with pytest.raises(ConfigError):
        Ownership(count, {})


# ---- the shard label --------------------------------------------------------------------------


def test_what_a_shards_runs_create_carries_the_shard_and_count() -> None:
    assert shard_labels(2, 6) == {LABEL_SHARD: "2-of-6"}
    assert shard_labels(0, 2) == {"gitray.io/shard": "0-of-2"}


def test_unsharded_nothing_is_labelled() -> None:
    assert shard_labels(0, 1) == {}


@pytest.mark.parametrize(("shard", "count"), [(6, 6), (-1, 3), (1, 1), (0, 0)])
def test_a_shard_outside_its_count_has_no_label(shard: int, count: int) -> None:
    with pytest.raises(ConfigError):
        shard_labels(shard, count)


MANIFEST: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "svc-abc", "namespace": "ray",
                         "labels": {"app.kubernetes.io/managed-by": "gitray",
                                    "gitray.io/workload": "svc"},
                         "annotations": {"gitray.io/workload-key": "ray/RayService/svc"}},
            "spec": {"headGroupSpec": {}}}


def test_a_manifest_gets_the_label_beside_its_own_and_is_not_changed_in_place() -> None:
    before = copy.deepcopy(MANIFEST)
    out = labelled(MANIFEST, shard_labels(1, 4))
    assert out["metadata"]["labels"] == {**before["metadata"]["labels"],
                                         "gitray.io/shard": "1-of-4"}
    assert {k: v for k, v in out.items() if k != "metadata"} == {
        k: v for k, v in before.items() if k != "metadata"}
    assert out["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert before == MANIFEST


def test_a_manifest_without_labels_gets_them() -> None:
    bare = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert labelled(bare, {"gitray.io/shard": "0-of-2"})["metadata"] == {
        "name": "c", "labels": {"gitray.io/shard": "0-of-2"}}


def test_unsharded_the_manifest_is_the_very_same_object() -> None:
    assert labelled(MANIFEST, shard_labels(0, 1)) is MANIFEST


# ---- the commit's overall status --------------------------------------------------------------


@pytest.mark.parametrize(("state", "unsharded", "sharded"), [
    ("pending", True, False),  # would never be replaced by a success
    ("success", True, False),  # a replica sees only its shards' workloads
    ("failure", True, True),
    ("error", True, True),
])
def test_who_posts_the_commits_overall_status(state: str, unsharded: bool,
                                              sharded: bool) -> None:
    assert posts_overall(state, 1) is unsharded
    assert posts_overall(state, 4) is sharded


def test_records_differ_only_in_their_shard() -> None:
    key = ObjectKey("RayService", "default", "text")
    assert replace(_record(key), shard="0-of-2") != _record(key)
