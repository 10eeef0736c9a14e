"""Workloads sharded over replicas (issue 28, the pure layer): who owns a workload, the Lease
names, the balancing decision, the resharding gate; and replicas simulated over rounds of
Lease reads and compare-and-swap writes (join, death, hand-over, resharding)."""

from __future__ import annotations

import functools
import itertools
import os
import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

import pytest

from gitray.core.errors import ConfigError
from gitray.core.model import ObjectKey
from gitray.engine.shards import (
    ANN_EPOCH_BASE,
    ANN_SHARDS,
    MAX_SHARDS,
    Claim,
    Decision,
    Member,
    Phase,
    ShardCount,
    View,
    check_shards,
    count_lease_name,
    decide,
    fair_share,
    foreign_claims,
    forgotten_members,
    may_drive,
    member_lease_name,
    next_epoch,
    parse_shard_label,
    parse_shard_lease_name,
    phase,
    preference,
    shard_label,
    shard_lease_name,
    shard_of,
    switch_epoch_base,
)

# ---- ownership -------------------------------------------------------------------------------

# Fixed values: a change of hash (input text, digest, byte order, width) fails here.
PINNED = [
    (ObjectKey("RayService", "default", "text"), {1: 0, 2: 0, 3: 0, 6: 0, 64: 58}),
    (ObjectKey("RayCluster", "ray", "a"), {1: 0, 2: 1, 3: 1, 6: 1, 64: 1}),
    (ObjectKey("RayJob", "prod", "nightly-train"), {1: 0, 2: 1, 3: 2, 6: 5, 64: 49}),
    (ObjectKey("ConfigMap", "default", "cfg"), {1: 0, 2: 0, 3: 1, 6: 4, 64: 40}),
]


@pytest.mark.parametrize(("key", "expected"), PINNED, ids=str)
def test_a_workloads_shard_is_pinned(key: ObjectKey, expected: dict[int, int]) -> None:
    assert {s: shard_of(key, s) for s in expected} == expected


def test_the_shard_is_the_same_in_another_process_with_another_hash_seed() -> None:
    code = ("from gitray.core.model import ObjectKey; from gitray.engine.shards import shard_of;"
            "print(shard_of(ObjectKey('RayJob', 'prod', 'nightly-train'), 64))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "49"


def test_one_shard_holds_every_workload() -> None:
    keys = [ObjectKey("RayService", f"ns{i % 7}", f"svc-{i}") for i in range(500)]
    assert {shard_of(k, 1) for k in keys} == {0}


@pytest.mark.parametrize("bad", [0, -1, MAX_SHARDS + 1, True, 2.0, "6"])
def test_a_shard_count_out_of_range_is_refused_saying_what_is_allowed(bad: object) -> None:
    with pytest.raises(ConfigError, match="--shards"):
        shard_of(ObjectKey("RayJob", "ns", "j"), bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--shards"):
        check_shards(bad)  # type: ignore[arg-type]


def test_the_largest_shard_count_is_allowed() -> None:
    check_shards(MAX_SHARDS)
    assert 0 <= shard_of(ObjectKey("RayJob", "ns", "j"), MAX_SHARDS) < MAX_SHARDS


def spread_keys(n: int) -> list[ObjectKey]:
    kinds = ("RayService", "RayCluster", "RayJob", "ConfigMap")
    return [ObjectKey(kinds[i % 4], f"team-{i % 37}", f"workload-{i}") for i in range(n)]


@pytest.mark.parametrize("shards", range(2, 13))
def test_ten_thousand_workloads_spread_within_15_percent_of_the_mean(shards: int) -> None:
    counts = Counter(shard_of(k, shards) for k in spread_keys(10_000))
    mean = 10_000 / shards
    assert sorted(counts) == list(range(shards))
    assert all(abs(c - mean) <= 0.15 * mean for c in counts.values()), counts


def test_workloads_of_one_namespace_or_kind_spread_too() -> None:
    same_ns = Counter(shard_of(ObjectKey("RayService", "prod", f"svc-{i}"), 6)
                      for i in range(3_000))
    assert all(abs(c - 500) <= 75 for c in same_ns.values()), same_ns


# ---- names -----------------------------------------------------------------------------------


def test_one_shard_is_the_unsharded_lease_itself() -> None:
    assert shard_lease_name("gitray", 0, 1) == "gitray"
    assert parse_shard_lease_name("gitray", "gitray") == (0, 1)


def test_shard_lease_names_name_the_count_and_parse_back() -> None:
    assert shard_lease_name("gitray", 2, 6) == "gitray-shard-2-of-6"
    names = {shard_lease_name("gitray", i, s) for s in range(1, MAX_SHARDS + 1)
             for i in range(s)}
    assert len(names) == sum(range(1, MAX_SHARDS + 1))  # no two counts ever share a Lease
    for name in names:
        parsed = parse_shard_lease_name("gitray", name)
        assert parsed is not None and shard_lease_name("gitray", *parsed) == name


@pytest.mark.parametrize("name", [
    "gitray-shards", member_lease_name("gitray", "pod-a_1_ff"), "gitray-prod-shard-0-of-2",
    "gitray-shard-6-of-6", "gitray-shard-0-of-1", "gitray-shard-02-of-6", "gitray-shard-2-of-06",
    f"gitray-shard-0-of-{MAX_SHARDS + 1}", "gitray-shard-2-of-6x", "other-shard-0-of-2", "git",
])
def test_other_leases_are_not_taken_for_shards(name: str) -> None:
    assert parse_shard_lease_name("gitray", name) is None


def test_the_count_and_member_leases_are_apart_from_the_shards() -> None:
    assert count_lease_name("gitray") == "gitray-shards"
    a, b = member_lease_name("gitray", "host-a_12_ab"), member_lease_name("gitray", "host-b_12_ab")
    assert a != b and a.startswith("gitray-member-") and "_" not in a
    assert member_lease_name("gitray", "host-a_12_ab") == a


@pytest.mark.parametrize(("shard", "shards"), [(0, 1), (0, 6), (5, 6), (63, 64)])
def test_shard_labels_parse_back(shard: int, shards: int) -> None:
    assert parse_shard_label(shard_label(shard, shards)) == (shard, shards)


@pytest.mark.parametrize("value", ["", "2", "6-of-6", "02-of-6", "1-of-0", "a-of-b", "1-of-65"])
def test_a_label_gitray_would_not_write_is_not_a_shard(value: str) -> None:
    assert parse_shard_label(value) is None


@pytest.mark.parametrize(("shard", "shards"), [(6, 6), (-1, 6), (0, 0)])
def test_a_shard_outside_its_count_has_no_name(shard: int, shards: int) -> None:
    with pytest.raises(ConfigError):
        shard_lease_name("gitray", shard, shards)
    with pytest.raises(ConfigError):
        shard_label(shard, shards)


def test_the_shard_count_lives_in_annotations() -> None:
    count = ShardCount(6, 41)
    assert count.to_annotations() == {ANN_SHARDS: "6", ANN_EPOCH_BASE: "41"}
    assert ShardCount.from_annotations(count.to_annotations()) == count
    assert ShardCount.from_annotations({ANN_SHARDS: "4"}) == ShardCount(4, 0)
    for bad in ({}, {ANN_SHARDS: "0"}, {ANN_SHARDS: "six"}, {ANN_SHARDS: "6", ANN_EPOCH_BASE: "x"}):
        assert ShardCount.from_annotations(bad) is None


# ---- fair shares and one round's decision ------------------------------------------------------


@pytest.mark.parametrize(("shards", "replicas", "share"), [
    (6, 1, (6, 6)), (6, 2, (3, 3)), (6, 3, (2, 2)), (6, 4, (1, 2)), (6, 7, (0, 1)),
    (7, 3, (2, 3)), (1, 3, (0, 1)), (6, 0, (6, 6)),
])
def test_fair_share_is_floor_and_ceiling(shards: int, replicas: int,
                                         share: tuple[int, int]) -> None:
    assert fair_share(shards, replicas) == share


NOW = 100.0
LIVE, LAPSED = NOW + 10, NOW - 1


def view(me: str, holdings: dict[str, list[int]], *, shards: int = 6,
         members: tuple[str, ...] | None = None, count: int | None = 6,
         extra: tuple[Claim, ...] = ()) -> View:
    """``me`` among ``members`` (default: every holder and ``me``), all live, of ``shards``."""
    names = members if members is not None else tuple(sorted({*holdings, me}))
    claims = tuple(Claim(s, shards, h, LIVE, 1) for h, ss in holdings.items() for s in ss)
    return View(me, shards, None if count is None else ShardCount(count),
                tuple(Member(m, shards, LIVE) for m in names), claims + extra)


ABCD = ("a", "b", "c", "d")
DECISIONS = [
    # (situation, shards, me, holdings, members (None: the holders and me), (want, released))
    ("alone, nothing held: take everything", 6, "a", {}, None, (6, 0)),
    ("alone, holding everything: nothing to do", 6, "a", {"a": [0, 1, 2, 3, 4, 5]}, None,
     (0, 0)),
    ("a replica joins two: each of them releases one", 6, "a",
     {"a": [0, 1, 2], "b": [3, 4, 5]}, ("a", "b", "c"), (0, 1)),
    ("the joiner waits for the releases", 6, "c", {"a": [0, 1, 2], "b": [3, 4, 5]},
     ("a", "b", "c"), (0, 0)),
    ("over the cap by two releases two", 6, "a", {"a": [0, 1, 2, 3], "b": [4]},
     ("a", "b", "c"), (0, 2)),
    ("below the floor takes up to it", 6, "c", {"a": [0, 1], "b": [2, 3]}, ("a", "b", "c"),
     (2, 0)),
    ("at the floor while another is below: leaves the free shards to it", 6, "a",
     {"a": [0, 1], "b": [2, 3]}, ("a", "b", "c"), (0, 0)),
    ("2-2-2-0: the first at the cap by identity releases one", 6, "a",
     {"a": [0, 1], "b": [2, 3], "c": [4, 5]}, ABCD, (0, 1)),
    ("2-2-2-0: the second at the cap keeps its shards", 6, "b",
     {"a": [0, 1], "b": [2, 3], "c": [4, 5]}, ABCD, (0, 0)),
    ("1-2-2-0 with one free: the one at zero takes it", 6, "d",
     {"a": [0], "b": [2, 3], "c": [4, 5]}, ABCD, (1, 0)),
    ("1-2-2-0 with one free: the one at the floor leaves it", 6, "a",
     {"a": [0], "b": [2, 3], "c": [4, 5]}, ABCD, (0, 0)),
    ("2-2-1-1 is balanced: nothing moves", 6, "d",
     {"a": [0, 1], "b": [2, 3], "c": [4], "d": [5]}, None, (0, 0)),
    ("2-2-1-0 with one free: the one at the floor leaves it to the one below", 6, "c",
     {"a": [0, 1], "b": [2, 3], "c": [4]}, ABCD, (0, 0)),
    ("seven over 2-2-2 with one free: the first at the floor by identity takes it", 7, "a",
     {"a": [0, 1], "b": [2, 3], "c": [4, 5]}, None, (1, 0)),
    ("seven over 2-2-2 with one free: the second leaves it", 7, "b",
     {"a": [0, 1], "b": [2, 3], "c": [4, 5]}, None, (0, 0)),
    ("eight over 2-2-2 with two free: the first two take one each", 8, "b",
     {"a": [0, 1], "b": [2, 3], "c": [4, 5]}, None, (1, 0)),
    ("eight over 2-2-2 with two free: the third leaves them", 8, "c",
     {"a": [0, 1], "b": [2, 3], "c": [4, 5]}, None, (0, 0)),
    ("seven over 4-3-0-0: both over the cap release down to it", 7, "a",
     {"a": [0, 1, 2, 3], "b": [4, 5, 6]}, ABCD, (0, 2)),
    ("one shard, three replicas: the first by identity takes it", 1, "a", {}, ("a", "b", "c"),
     (1, 0)),
    ("one shard, three replicas: the others do not", 1, "b", {}, ("a", "b", "c"), (0, 0)),
]


@pytest.mark.parametrize(("situation", "shards", "me", "holdings", "members", "expected"),
                         [pytest.param(*row, id=row[0]) for row in DECISIONS])
def test_one_rounds_decision(situation: str, shards: int, me: str,
                             holdings: dict[str, list[int]], members: tuple[str, ...] | None,
                             expected: tuple[int, int]) -> None:
    d = decide(view(me, holdings, members=members, shards=shards, count=shards), NOW)
    assert d.phase is Phase.DRIVE
    assert (d.want, len(d.release)) == expected
    held = {s for ss in holdings.values() for s in ss}
    assert set(d.take) == (set(range(shards)) - held if d.want else set())
    assert set(d.release) <= set(holdings.get(me, []))


def test_takes_are_candidates_in_the_replicas_own_order() -> None:
    d = decide(view("c", {"a": [0, 1], "b": [2, 3]}, members=("a", "b", "c")), NOW)
    assert sorted(d.take) == [4, 5] and d.want == 2
    assert list(d.take) == sorted([4, 5], key=lambda s: -preference("c", s))


def test_two_replicas_prefer_different_free_shards_most_of_the_time() -> None:
    differ = sum(max(range(6), key=lambda s, i=i: preference(f"a{i}", s))
                 != max(range(6), key=lambda s, i=i: preference(f"b{i}", s)) for i in range(200))
    assert differ > 140  # 5/6 expected


def test_a_lapsed_claim_is_free_and_a_non_members_live_claim_is_not() -> None:
    lapsed = Claim(0, 6, "gone", LAPSED)
    ghost = Claim(1, 6, "ghost", LIVE)  # its member Lease lapsed, its shard not yet
    d = decide(view("a", {}, extra=(lapsed, ghost)), NOW)
    assert d.want == 5 and sorted(d.take) == [0, 2, 3, 4, 5]


def test_a_claim_of_another_count_is_not_a_shard_of_this_one() -> None:
    old = Claim(0, 4, "b", LAPSED)
    d = decide(view("a", {}, extra=(old,)), NOW)
    assert d.want == 6 and sorted(d.take) == list(range(6))


def test_a_member_of_another_count_is_not_counted_in_the_fair_share() -> None:
    v = view("a", {}, members=("a",))
    v = View(v.me, v.shards, v.count, (*v.members, Member("z", 4, LIVE)), v.claims)
    assert (decide(v, NOW).cap, decide(v, NOW).replicas) == (6, 1)


def test_releases_are_the_shards_least_preferred() -> None:
    d = decide(view("a", {"a": [0, 1, 2, 3, 4, 5]}, members=("a", "b")), NOW)
    assert list(d.release) == sorted(range(6), key=lambda s: preference("a", s))[:3]


# ---- resharding: the phase, the gate, epochs ---------------------------------------------------


def reshard_view(me_shards: int, count: int | None, *, members: tuple[Member, ...] = (),
                 claims: tuple[Claim, ...] = ()) -> View:
    return View("me", me_shards, None if count is None else ShardCount(count),
                (Member("me", me_shards, LIVE), *members), claims)


PHASES = [
    ("first start: nothing exists", 6, None, (), (), Phase.SWITCH),
    ("its count is in force", 6, 6, (), (), Phase.DRIVE),
    ("its count is in force beside a live Lease of another", 6, 6, (),
     (Claim(0, 4, "rogue", LIVE),), Phase.DRIVE),
    ("another count in force, its replicas live", 4, 6, (Member("old", 6, LIVE),), (),
     Phase.WAIT),
    ("another count in force, one of its Leases still live", 4, 6, (),
     (Claim(3, 6, "old", LIVE),), Phase.WAIT),
    ("another count in force, all gone", 4, 6, (Member("old", 6, LAPSED),),
     (Claim(3, 6, "old", LAPSED), Claim(2, 6, "", LIVE)), Phase.SWITCH),
    ("a third count's replica does not hold the one in force", 4, 6,
     (Member("other", 5, LIVE),), (), Phase.SWITCH),
    ("the unsharded Lease still held by an older gitray", 6, None, (),
     (Claim(0, 1, "legacy", LIVE),), Phase.WAIT),
    ("the unsharded Lease lapsed", 6, None, (), (Claim(0, 1, "legacy", LAPSED),), Phase.SWITCH),
    ("unsharded, beside the older gitray on the same Lease", 1, None, (),
     (Claim(0, 1, "legacy", LIVE),), Phase.SWITCH),
]


@pytest.mark.parametrize(("situation", "mine", "count", "members", "claims", "expected"),
                         [pytest.param(*row, id=row[0]) for row in PHASES])
def test_phase(situation: str, mine: int, count: int | None, members: tuple[Member, ...],
               claims: tuple[Claim, ...], expected: Phase) -> None:
    assert phase(reshard_view(mine, count, members=members, claims=claims), NOW) is expected


def test_waiting_or_switching_releases_what_it_holds_and_takes_nothing() -> None:
    v = reshard_view(4, 6, members=(Member("old", 6, LIVE),), claims=(Claim(1, 4, "me", LIVE),))
    assert decide(v, NOW) == Decision(Phase.WAIT, release=(1,))
    switch = decide(reshard_view(4, 6, claims=(Claim(1, 6, "", LIVE, 40),)), NOW)
    assert (switch.phase, switch.want, switch.count) == (Phase.SWITCH, 0, ShardCount(4, 41))


def test_may_drive_only_under_its_count_with_no_other_count_live() -> None:
    assert may_drive(reshard_view(4, 4), NOW)
    assert not may_drive(reshard_view(4, None), NOW)
    assert not may_drive(reshard_view(4, 6), NOW)
    assert not may_drive(reshard_view(4, 4, claims=(Claim(0, 6, "old", LIVE),)), NOW)
    assert may_drive(reshard_view(4, 4, claims=(Claim(0, 6, "old", LAPSED),)), NOW)


def test_a_live_lease_of_another_count_under_ours_is_reported() -> None:
    rogue = Claim(0, 1, "older-gitray", LIVE)
    assert foreign_claims(reshard_view(6, 6, claims=(rogue,)), NOW) == [rogue]
    assert foreign_claims(reshard_view(6, 1, claims=(rogue,)), NOW) == []  # we wait, it is not


# Two replicas of different counts, the old count's replica paused past its member Lease: the
# new one may switch the count and take a Lease of its own while the old one, waking, takes a
# Lease of its old count. Each writes, then reads; under every interleaving at most one drives.
OLD = ("old:take", "old:read")
NEW = ("new:write-count", "new:take", "new:read")


def interleavings(a: tuple[str, ...], b: tuple[str, ...]) -> list[tuple[str, ...]]:
    found = []
    for places in itertools.combinations(range(len(a) + len(b)), len(a)):
        rest, mine = iter(b), iter(a)
        found.append(tuple(next(mine) if i in places else next(rest)
                           for i in range(len(a) + len(b))))
    return found


@pytest.mark.parametrize("order", interleavings(OLD, NEW), ids="|".join)
def test_of_two_counts_at_most_one_drives_under_every_interleaving(order: tuple[str, ...]
                                                                   ) -> None:
    count = ShardCount(6)
    claims: list[Claim] = []  # the Leases taken, of either count
    drives = {}
    for step in order:
        if step == "old:take":
            claims.append(Claim(2, 6, "old", LIVE))
        elif step == "new:write-count":
            count = ShardCount(4, 7)
        elif step == "new:take":
            claims.append(Claim(0, 4, "new", LIVE))
        else:
            who, shards = ("old", 6) if step == "old:read" else ("new", 4)
            drives[who] = may_drive(View(who, shards, count, (), tuple(claims)), NOW)
    assert not (drives["old"] and drives["new"]), order
    if not (drives["old"] or drives["new"]):  # each saw the other's write: both wait a round
        assert order.index("new:write-count") < order.index("old:read")
        assert order.index("old:take") < order.index("new:read")


def test_the_epoch_base_is_above_every_epoch_reached() -> None:
    claims = (Claim(0, 6, "", LIVE, 40), Claim(1, 6, "x", LAPSED, 12), Claim(0, 1, "", LAPSED, 90))
    assert switch_epoch_base(View("me", 4, ShardCount(6, 3), (), claims)) == 91
    assert switch_epoch_base(View("me", 4, ShardCount(6, 300), (), claims)) == 300
    assert switch_epoch_base(View("me", 4, None)) == 0


@pytest.mark.parametrize(("transitions", "base", "epoch"),
                         [(None, 0, 0), (None, 41, 41), (3, 0, 4), (3, 41, 41), (50, 41, 51)])
def test_taking_a_lease_moves_its_epoch_past_the_base(transitions: int | None, base: int,
                                                      epoch: int) -> None:
    assert next_epoch(transitions, base) == epoch


def test_member_leases_lapsed_long_ago_are_forgotten() -> None:
    members = (Member("me", 6, LAPSED - 100), Member("old", 6, NOW - 61),
               Member("recent", 6, NOW - 30), Member("live", 6, LIVE))
    assert forgotten_members(View("me", 6, ShardCount(6), members), NOW, 60) == ["old"]


# ---- replicas simulated over rounds ------------------------------------------------------------

RETRY, DURATION = 2.0, 15.0  # a round every retry period; claims lapse 15 s after a renew
SAMPLE = spread_keys(300)  # workloads whose drivers are checked every round


@functools.cache
def sample_shards(shards: int) -> tuple[int, ...]:
    return tuple(shard_of(k, shards) for k in SAMPLE)


@dataclass
class Lease:
    holder: str = ""
    lapses_at: float = 0.0  # every replica sees the same change at the same time here
    epoch: int = 0


@dataclass
class Replica:
    identity: str
    shards: int
    driving: set[int] = field(default_factory=set)  # shards it took and passed may_drive for
    releasing: dict[int, int] = field(default_factory=dict)  # shard -> round it is let go


class Cluster:
    """An API server of Leases and the replicas contending on it. Each round every live
    replica renews, then all decide on the same reads, then they act in a random order, each
    take a compare-and-swap and each drive gated by a fresh read (``may_drive``)."""

    def __init__(self, seed: int = 0, release_after: int = 0) -> None:
        self.rng = random.Random(seed)
        self.release_after = release_after  # rounds until a step boundary
        self.now = 0.0
        self.round = 0
        self.count: ShardCount | None = None
        self.leases: dict[tuple[int, int], Lease] = {}  # (shards, shard)
        self.members: dict[str, Member] = {}
        self.replicas: dict[str, Replica] = {}
        self.paused: dict[str, tuple[Replica, Decision, ShardCount | None]] = {}
        self.records: dict[ObjectKey, tuple[tuple[int, int], int]] = {}  # run record: lease, epoch

    def start_many(self, replicas: int, shards: int, prefix: str = "r") -> None:
        """``replicas`` replicas named ``<prefix>0``, ``<prefix>1``... of count ``shards``."""
        for i in range(replicas):
            self.start(f"{prefix}{i}", shards)

    def start(self, identity: str, shards: int) -> None:
        self.replicas[identity] = Replica(identity, shards)

    def kill(self, identity: str) -> None:  # SIGKILL: its Leases lapse in their own time
        del self.replicas[identity]

    def stop(self, identity: str) -> None:  # SIGTERM: member and shards released at once
        r = self.replicas.pop(identity)
        self.members[identity] = Member(identity, r.shards, self.now)
        for key, lease in self.leases.items():
            if lease.holder == identity and key[0] == r.shards:
                self.leases[key] = Lease("", self.now + 1, lease.epoch)

    def pause(self, identity: str) -> None:
        """SIGSTOP between deciding and acting: it renews nothing until woken."""
        r = self.replicas.pop(identity)
        self.paused[identity] = (r, decide(self.view(r), self.now), self.count)

    def wake(self, identity: str) -> None:
        """It acts on what it decided before the pause, its reads long stale."""
        r, decision, count = self.paused.pop(identity)
        self.replicas[identity] = r
        self.act(r, decision, count)
        self.check()

    def view(self, r: Replica) -> View:
        claims = tuple(Claim(i, s, lease.holder, lease.lapses_at, lease.epoch)
                       for (s, i), lease in sorted(self.leases.items()))
        return View(r.identity, r.shards, self.count, tuple(self.members.values()), claims)

    def holds(self, r: Replica, shard: int) -> bool:
        lease = self.leases.get((r.shards, shard))
        return lease is not None and lease.holder == r.identity and self.now < lease.lapses_at

    def step(self) -> None:
        self.round += 1
        self.now += RETRY
        live = list(self.replicas.values())
        for r in live:  # renew: the member Lease, and the shard Leases still held
            self.members[r.identity] = Member(r.identity, r.shards, self.now + DURATION)
            for (s, i), lease in self.leases.items():
                if s == r.shards and self.holds(r, i):
                    lease.lapses_at = self.now + DURATION
        for r in live:  # a shard held but not yet driven: driven once a fresh read allows
            if any(self.holds(r, i) and i not in r.driving for i in range(r.shards)) \
                    and may_drive(self.view(r), self.now):
                r.driving |= {i for i in range(r.shards) if self.holds(r, i)}
        counts = {r.identity: self.count for r in live}
        decisions = {r.identity: decide(self.view(r), self.now) for r in live}
        self.rng.shuffle(live)
        for r in live:
            self.act(r, decisions[r.identity], counts[r.identity])
        self.check()

    def act(self, r: Replica, d: Decision, count_read: ShardCount | None) -> None:
        r.driving &= {i for i in r.driving if self.holds(r, i)}  # fencing: a lapsed Lease stops it
        if d.count is not None and self.count == count_read:  # compare-and-swap
            self.count = d.count
        for shard in d.release:
            r.releasing.setdefault(shard, self.round + self.release_after)
        for shard, due in sorted(r.releasing.items()):
            if due <= self.round:
                del r.releasing[shard]
                r.driving.discard(shard)
                if self.holds(r, shard):
                    old = self.leases[(r.shards, shard)]
                    self.leases[(r.shards, shard)] = Lease("", self.now + 1, old.epoch)
        won = 0
        for shard in d.take:
            if won == d.want:
                break
            key = (r.shards, shard)
            lease = self.leases.get(key)
            if lease is not None and lease.holder and self.now < lease.lapses_at:
                continue  # lost the race for it: the next candidate
            assert self.count is not None
            epoch = next_epoch(None if lease is None else lease.epoch, self.count.epoch_base)
            self.leases[key] = Lease(r.identity, self.now + DURATION, epoch)
            won += 1
            if may_drive(self.view(r), self.now):
                r.driving.add(shard)

    def check(self) -> None:
        """At most one replica drives each sampled workload, and a run record is only ever
        taken over by a later epoch (``ProgressStore`` refuses a record of a newer one)."""
        drivers: dict[ObjectKey, list[tuple[int, int]]] = {}
        for r in self.replicas.values():
            driven = {i for i in r.driving if self.holds(r, i)}
            for key, shard in zip(SAMPLE, sample_shards(r.shards), strict=True):
                if shard in driven:
                    drivers.setdefault(key, []).append((r.shards, shard))
        for key, leases in drivers.items():
            assert len(leases) == 1, f"round {self.round}: {key} driven under {leases}"
            epoch = self.leases[leases[0]].epoch
            before = self.records.get(key)
            if before is not None and before != (leases[0], epoch):
                assert epoch > before[1], (key, before, leases[0], epoch)
            self.records[key] = (leases[0], epoch)

    def held(self, shards: int) -> dict[str, list[int]]:
        """Each replica of ``shards``: the shards it holds."""
        return {r.identity: [i for i in range(shards) if self.holds(r, i)]
                for r in self.replicas.values() if r.shards == shards}

    def balanced(self, shards: int) -> bool:
        held = self.held(shards)
        owners = [r for r in self.replicas.values() if r.shards == shards]
        floor, cap = fair_share(shards, len(owners))
        every = sorted(i for r in owners for i in held[r.identity])
        driven = sorted(i for r in owners for i in r.driving)
        return (every == list(range(shards)) == driven
                and all(floor <= len(held[r.identity]) <= cap for r in owners))

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.step()


def settled(cluster: Cluster, shards: int, within: int) -> int:
    """Rounds until balanced (fails past ``within``); then 20 more rounds move nothing."""
    for n in range(1, within + 1):
        cluster.step()
        if cluster.balanced(shards):
            before = cluster.held(shards)
            cluster.run(20)
            assert cluster.held(shards) == before, "replicas kept trading shards"
            return n
    raise AssertionError(f"not balanced within {within} rounds: {cluster.held(shards)}")


SEEDS = range(12)


@pytest.mark.parametrize("replicas", [1, 2, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_replicas_starting_together_balance_six_shards_in_three_rounds(replicas: int,
                                                                      seed: int) -> None:
    cluster = Cluster(seed)
    cluster.start_many(replicas, 6)
    # round 1 puts the count in force; 2 takes each one's floor; 3 the remainder
    assert settled(cluster, 6, within=3) <= 3


@pytest.mark.parametrize(("shards", "replicas"),
                         list(itertools.product([1, 2, 5, 6, 7, 12], [1, 2, 3, 4, 5, 7])))
def test_every_count_and_replica_number_balances_in_three_rounds(shards: int,
                                                                replicas: int) -> None:
    for seed in range(4):
        cluster = Cluster(seed)
        cluster.start_many(replicas, shards)
        settled(cluster, shards, within=3)


@pytest.mark.parametrize("release_after", [0, 1, 5])
@pytest.mark.parametrize("before", [1, 2, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_replica_joining_gets_its_share_as_the_others_reach_step_boundaries(
        seed: int, before: int, release_after: int) -> None:
    cluster = Cluster(seed, release_after)
    cluster.start_many(before, 6)
    settled(cluster, 6, within=3)
    cluster.start("new", 6)
    # the others release at their next step boundary, the newcomer takes in the round after
    assert settled(cluster, 6, within=release_after + 2) <= release_after + 2


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_dead_replicas_shards_are_taken_when_its_leases_lapse(replicas: int,
                                                               seed: int) -> None:
    cluster = Cluster(seed)
    cluster.start_many(replicas, 6)
    settled(cluster, 6, within=3)
    victim = "r0"
    lost = cluster.held(6)[victim]
    last_renew = cluster.now
    cluster.kill(victim)
    lapse_round = cluster.round + int(-(-DURATION // RETRY))  # first round at or past the lapse
    while cluster.round < lapse_round - 1:
        cluster.step()
        assert all(i not in s for s in cluster.held(6).values() for i in lost), \
            "taken before its Lease lapsed"
    cluster.step()  # now >= last_renew + DURATION
    assert cluster.now >= last_renew + DURATION
    assert cluster.balanced(6), cluster.held(6)
    assert all(len(s) == 6 // (replicas - 1) for s in cluster.held(6).values())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_planned_hand_over_is_taken_in_the_next_round(seed: int) -> None:
    cluster = Cluster(seed)
    cluster.start_many(3, 6)
    settled(cluster, 6, within=3)
    cluster.stop("r1")
    cluster.step()
    assert cluster.balanced(6) and sorted(map(len, cluster.held(6).values())) == [3, 3]


def rollout(cluster: Cluster, new: int, *, kill: bool = False, prefix: str = "new") -> None:
    """A Deployment's rolling update to ``new`` shards, one pod at a time (maxSurge 1): a new
    pod starts, then an old one stops (SIGTERM, or SIGKILL), until every pod is new."""
    for i, name in enumerate(sorted(cluster.replicas)):
        cluster.start(f"{prefix}{i}", new)
        cluster.run(3)
        (cluster.kill if kill else cluster.stop)(name)
        cluster.run(3)


@pytest.mark.parametrize(("old", "new"), [(6, 4), (4, 6), (1, 6), (6, 1), (6, 6)])
@pytest.mark.parametrize("seed", SEEDS)
def test_resharding_by_a_rollout_never_drives_a_workload_twice(old: int, new: int,
                                                               seed: int) -> None:
    cluster = Cluster(seed, release_after=1)
    cluster.start_many(3, old, "old")
    settled(cluster, old, within=4)
    rollout(cluster, new)  # Cluster.check: one driver per workload, epochs rising
    settled(cluster, new, within=4)
    assert cluster.count is not None and cluster.count.shards == new


@pytest.mark.parametrize("old", [6, 1])
@pytest.mark.parametrize("seed", SEEDS)
def test_the_old_count_drives_until_its_last_replica_is_gone(seed: int, old: int) -> None:
    cluster = Cluster(seed)
    cluster.start_many(3, old, "old")
    settled(cluster, old, within=3)
    cluster.start_many(3, 4, "new")
    for i in range(2):  # with one shard, the holder's stop leaves it free for a moment
        cluster.stop(f"old{i}")
        cluster.run(3)
    assert cluster.held(old)["old2"] == list(range(old))  # the survivor drives every shard
    assert all(not cluster.held(4)[f"new{i}"] for i in range(3))
    cluster.stop("old2")
    assert settled(cluster, 4, within=3) <= 3  # switch, floor, remainder


@pytest.mark.parametrize("counts", [(6, 4, 6), (1, 6, 1), (6, 1, 6, 4)], ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_resharding_back_to_a_count_whose_leases_exist_moves_epochs_on(
        seed: int, counts: tuple[int, ...]) -> None:
    cluster = Cluster(seed, release_after=1)
    cluster.start_many(3, counts[0], "old")
    settled(cluster, counts[0], within=4)
    for generation, after in enumerate(counts[1:]):
        rollout(cluster, after, prefix=f"gen{generation}-")  # Cluster.check: epochs rising
        settled(cluster, after, within=4)
    assert cluster.count is not None and cluster.count.shards == counts[-1]


@pytest.mark.parametrize("seed", SEEDS)
def test_resharding_after_the_old_replicas_were_killed_waits_for_their_leases(seed: int
                                                                             ) -> None:
    cluster = Cluster(seed)
    cluster.start_many(3, 6, "old")
    settled(cluster, 6, within=3)
    rollout(cluster, 4, kill=True)
    settled(cluster, 4, within=int(DURATION // RETRY) + 4)


@pytest.mark.parametrize("seed", SEEDS)
def test_an_old_replica_woken_after_the_switch_takes_its_old_shards_but_does_not_drive(
        seed: int) -> None:
    cluster = Cluster(seed)
    cluster.start_many(2, 6, "old")
    settled(cluster, 6, within=3)
    cluster.start_many(3, 4, "new")
    cluster.stop("old0")
    cluster.pause("old1")  # it decided to take old0's shards, then froze
    assert cluster.paused["old1"][1].want == 3
    cluster.run(int(DURATION // RETRY) + 4)  # its Leases lapse; the new count is put in force
    assert cluster.count is not None and cluster.count.shards == 4 and cluster.balanced(4)
    cluster.wake("old1")  # takes Leases of 6 (compare-and-swap wins: they are free) ...
    assert cluster.held(6)["old1"] and not cluster.replicas["old1"].driving  # ... drives none
    cluster.step()  # and lets them go: its count is not in force
    assert cluster.held(6)["old1"] == [] and cluster.balanced(4)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_rollout_abandoned_half_way_leaves_the_old_count_in_force(seed: int) -> None:
    cluster = Cluster(seed)
    cluster.start_many(3, 6, "old")
    settled(cluster, 6, within=3)
    cluster.start("new0", 4)
    cluster.stop("old0")
    cluster.run(3)
    cluster.kill("new0")  # rolled back: an old pod comes back
    cluster.start("old3", 6)
    settled(cluster, 6, within=int(DURATION // RETRY) + 4)
    assert cluster.count == ShardCount(6, 0)
