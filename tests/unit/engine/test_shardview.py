"""The shard Leases as a round of the shard keeper read them (issue 28): the label selecting
them, the View ``decide`` takes, and what changed for the caller."""

from __future__ import annotations

import re

import pytest

from gitray.engine import shards
from gitray.engine.shardview import (
    ANN_SYNCED,
    LABEL_LEASE,
    Changes,
    LeaseSeen,
    changes,
    lease_label,
    lease_selector,
    shard_holders,
    synced_at,
    view_of,
)

BASE = "gitray"
ME, OTHER = "pod-a_1_aa", "pod-b_2_bb"
OTHERS_MEMBER = shards.member_lease_name(BASE, OTHER)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def member(identity: str, count: str, lapses_at: float = 10.0) -> LeaseSeen:
    return LeaseSeen(shards.member_lease_name(BASE, identity), identity, 0, lapses_at,
                     {shards.ANN_SHARDS: count})


# ---- the label --------------------------------------------------------------------------------


def test_the_label_is_the_lease_name_when_it_fits() -> None:
    assert lease_label("gitray") == "gitray"
    assert lease_selector("gitray") == f"{LABEL_LEASE}=gitray"


def test_a_lease_name_too_long_for_a_label_gets_a_digest_one_per_name() -> None:
    long_a, long_b = "a" * 64, "a" * 63 + "b"
    assert lease_label("a" * 63) == "a" * 63
    labels = {lease_label(long_a), lease_label(long_b)}
    assert len(labels) == 2
    assert all(len(v) <= 63 and _LABEL_VALUE.fullmatch(v) for v in labels)
    assert lease_label(long_a) == lease_label(long_a)


# ---- the view ---------------------------------------------------------------------------------


def test_nothing_read_is_a_view_without_count_members_or_claims() -> None:
    assert view_of(BASE, ME, 6, []) == shards.View(ME, 6, None)


def test_the_count_lease_gives_the_count_in_force_and_its_epoch_base() -> None:
    seen = LeaseSeen(shards.count_lease_name(BASE), "", 0, 0.0,
                     {shards.ANN_SHARDS: "4", shards.ANN_EPOCH_BASE: "9"})
    assert view_of(BASE, ME, 6, [seen]).count == shards.ShardCount(4, 9)


@pytest.mark.parametrize("annotations", [{}, {shards.ANN_SHARDS: "many"}, {shards.ANN_SHARDS: "0"},
                                         {shards.ANN_SHARDS: "65"}])
def test_a_count_lease_without_a_valid_count_is_as_if_absent(
        annotations: dict[str, str]) -> None:
    seen = LeaseSeen(shards.count_lease_name(BASE), "", 0, 0.0, annotations)
    assert view_of(BASE, ME, 6, [seen]).count is None


def test_shard_leases_of_every_count_are_claims_with_holder_lapse_and_epoch() -> None:
    seen = [LeaseSeen(shards.shard_lease_name(BASE, 2, 6), OTHER, 5, 12.5),
            LeaseSeen(shards.shard_lease_name(BASE, 0, 4), "", 3, 1.0),
            LeaseSeen(BASE, ME, 8, 20.0)]  # the unsharded Lease: the one shard of S = 1
    assert view_of(BASE, ME, 6, seen).claims == (
        shards.Claim(0, 1, ME, 20.0, 8), shards.Claim(0, 4, "", 1.0, 3),
        shards.Claim(2, 6, OTHER, 12.5, 5))


def test_member_leases_give_each_replica_and_the_count_it_runs() -> None:
    view = view_of(BASE, ME, 6, [member(OTHER, "4", 7.0), member(ME, "6", 9.0)])
    assert set(view.members) == {shards.Member(ME, 6, 9.0), shards.Member(OTHER, 4, 7.0)}
    assert len(view.members) == 2


def test_a_member_with_a_garbled_count_runs_no_count() -> None:
    view = view_of(BASE, ME, 6, [member(OTHER, "six")])
    assert view.members == (shards.Member(OTHER, 0, 10.0),)


@pytest.mark.parametrize("seen", [
    pytest.param(LeaseSeen(OTHERS_MEMBER, ME, 0, 9.0, {shards.ANN_SHARDS: "6"}),
                 id="a member Lease whose name is not its holder's"),
    pytest.param(LeaseSeen(OTHERS_MEMBER, "", 0, 9.0, {shards.ANN_SHARDS: "6"}),
                 id="a member Lease with no holder"),
    pytest.param(LeaseSeen("gitray-other", OTHER, 1, 9.0), id="another Lease of the label"),
    pytest.param(LeaseSeen("gitray-shard-02-of-6", OTHER, 1, 9.0),
                 id="a shard name gitray does not write"),
    pytest.param(LeaseSeen(shards.shard_lease_name("other", 1, 6), OTHER, 1, 9.0),
                 id="another instance's shard Lease"),
])
def test_leases_that_are_none_of_the_instances_are_left_out(seen: LeaseSeen) -> None:
    assert view_of(BASE, ME, 6, [seen]) == shards.View(ME, 6, None)


def test_the_view_does_not_depend_on_the_order_read() -> None:
    seen = [member(OTHER, "6"), member(ME, "6"),
            LeaseSeen(shards.shard_lease_name(BASE, 1, 6), OTHER, 2, 3.0),
            LeaseSeen(shards.shard_lease_name(BASE, 0, 6), ME, 1, 4.0)]
    assert view_of(BASE, ME, 6, seen) == view_of(BASE, ME, 6, list(reversed(seen)))


# ---- what changed for the caller --------------------------------------------------------------


def test_no_change_is_falsy() -> None:
    assert not changes({1: 3}, {1: 3})
    assert changes({}, {}) == Changes()


def test_shards_gained_come_with_their_epochs_and_lost_ones_are_named() -> None:
    result = changes({0: 1, 2: 4}, {2: 4, 5: 7})
    assert result == Changes({5: 7}, (0,))
    assert result


def test_a_shard_lost_and_taken_again_in_another_epoch_is_lost_and_gained() -> None:
    assert changes({3: 1}, {3: 2}) == Changes({3: 2}, (3,))


# ---- the commit every shard is in sync at -----------------------------------------------------


def shard_synced(shard: int, count: int, commit: str | None, name: str = BASE) -> LeaseSeen:
    return LeaseSeen(shards.shard_lease_name(name, shard, count), ME, 1, 10.0,
                     {ANN_SYNCED: commit} if commit is not None else {})


def test_a_commit_is_in_sync_when_every_shard_lease_of_the_count_names_it() -> None:
    seen = [shard_synced(i, 3, "c1") for i in range(3)]
    assert synced_at(BASE, 3, seen) == "c1"
    # other Leases of the selection (a member, the count, another count's shards) do not count
    others = [member(OTHER, "3"), shard_synced(0, 2, "c0"), shard_synced(1, 2, "c0"),
              LeaseSeen(shards.count_lease_name(BASE), "", 0, 0.0, {ANN_SYNCED: "c0"})]
    assert synced_at(BASE, 3, [*others, *seen]) == "c1"


@pytest.mark.parametrize("commits", [
    ["c1", "c1", None],  # a shard never found in sync (or its Lease not written yet)
    ["c1", "c1", ""],
    ["c1", "c2", "c1"],  # one shard still on (or already past) another commit
])
def test_no_commit_while_a_shard_is_missing_or_at_another_commit(
        commits: list[str | None]) -> None:
    assert synced_at(BASE, 3, [shard_synced(i, 3, c) for i, c in enumerate(commits)]) is None


def test_no_commit_while_a_shard_lease_does_not_exist_and_none_for_another_instance() -> None:
    assert synced_at(BASE, 3, [shard_synced(i, 3, "c1") for i in range(2)]) is None
    assert synced_at(BASE, 3, [shard_synced(i, 3, "c1", name="other") for i in range(3)]) \
        is None


# ---- who holds what, for gitray status ----------------------------------------------------------


def _count(shards_in_force: int) -> LeaseSeen:
    return LeaseSeen(shards.count_lease_name(BASE), "", 0, 0.0,
                     shards.ShardCount(shards_in_force, 0).to_annotations())


def test_the_holders_of_the_count_in_force_free_shards_included() -> None:
    seen = [_count(3), member(ME, "3"),
            LeaseSeen(shards.shard_lease_name(BASE, 0, 3), ME, 4, 0.0),
            LeaseSeen(shards.shard_lease_name(BASE, 2, 3), OTHER, 1, 0.0),
            LeaseSeen(shards.shard_lease_name(BASE, 1, 2), OTHER, 9, 0.0)]  # (another count)
    assert shard_holders(BASE, seen) == (3, {0: ME, 1: "", 2: OTHER})


def test_unsharded_without_a_count_lease_or_with_a_garbled_one() -> None:
    assert shard_holders(BASE, [LeaseSeen(BASE, ME, 1, 0.0)]) == (1, {})
    garbled = LeaseSeen(shards.count_lease_name(BASE), "", 0, 0.0, {shards.ANN_SHARDS: "x"})
    assert shard_holders(BASE, [garbled, LeaseSeen(shards.shard_lease_name(BASE, 0, 2), ME, 1,
                                                   0.0)]) == (1, {})
