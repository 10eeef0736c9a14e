"""The shard Leases as one round of the shard keeper read them, turned into a
:class:`~gitray.engine.shards.View`; the label that selects them; what changed for the caller
between two rounds. Pure, no I/O: :mod:`gitray.engine.shardkeeper` reads the Leases and the
clock and passes in what it saw.

Every member, shard and count Lease of an instance carries the label ``gitray.io/lease:
<lease>`` (the instance's Lease name), so one label-selected LIST returns them all. The
unsharded Lease ``<lease>`` (the one shard of ``S = 1``) may have been created by an older
release without that label; the keeper reads it by name until it writes it itself.

A shard Lease also says at which commit its holder last found the shard's workloads in sync
(``gitray.io/synced``): when every shard of the count says the same commit, the commit as a
whole is in sync (:func:`synced_at`), which no single replica can see from its own shards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gitray.engine.shards import (
    ANN_SHARDS,
    Claim,
    Member,
    ShardCount,
    View,
    count_lease_name,
    member_lease_name,
    parse_shard_lease_name,
)

__all__ = [
    "ANN_SYNCED",
    "LABEL_LEASE",
    "Changes",
    "LeaseSeen",
    "changes",
    "lease_label",
    "lease_selector",
    "shard_holders",
    "synced_at",
    "view_of",
]

LABEL_LEASE = "gitray.io/lease"  # on the member, shard and count Leases: the instance's Lease
_LABEL_MAX = 63  # a label value's limit; a Lease name may be longer
ANN_SYNCED = "gitray.io/synced"  # a shard Lease: the commit its workloads were last in sync at


def lease_label(lease: str) -> str:
    """The ``gitray.io/lease`` value for the instance's Lease name ``lease``: the name itself
    when it fits in a label value, else a digest of it (still one value per instance)."""
    if len(lease) <= _LABEL_MAX:
        return lease
    return f"sha256-{hashlib.sha256(lease.encode()).hexdigest()[:32]}"


def lease_selector(lease: str) -> str:
    """The label selector of one LIST returning the instance's member, shard and count Leases."""
    return f"{LABEL_LEASE}={lease_label(lease)}"


@dataclass(frozen=True)
class LeaseSeen:
    """One Lease as the keeper read it: its name, holder, ``leaseTransitions`` and annotations,
    and when its holder's claim lapses on the keeper's own clock (duration after the record was
    last seen to change)."""

    name: str
    holder: str
    epoch: int
    lapses_at: float
    annotations: Mapping[str, str] = field(default_factory=dict)


def _member_shards(annotations: Mapping[str, str]) -> int:
    """The count a member runs with; 0 (no count) when the annotation is missing or garbled."""
    count = ShardCount.from_annotations({ANN_SHARDS: annotations.get(ANN_SHARDS, "")})
    return count.shards if count is not None else 0


def view_of(lease: str, me: str, shards: int, seen: Iterable[LeaseSeen]) -> View:
    """What replica ``me`` (running with ``shards``) read, as ``decide`` takes it. Leases of
    the selection that are none of the instance's (another name, a member Lease whose name is
    not its holder's, a member with no holder) are left out; so is a count Lease without a
    valid count (as if it did not exist)."""
    members: list[Member] = []
    claims: list[Claim] = []
    count: ShardCount | None = None
    for s in sorted(seen, key=lambda s: s.name):
        parsed = parse_shard_lease_name(lease, s.name)
        if s.name == count_lease_name(lease):
            count = ShardCount.from_annotations(s.annotations)
        elif parsed is not None:
            claims.append(Claim(parsed[0], parsed[1], s.holder, s.lapses_at, s.epoch))
        elif s.holder and s.name == member_lease_name(lease, s.holder):
            members.append(Member(s.holder, _member_shards(s.annotations), s.lapses_at))
    return View(me, shards, count, tuple(members), tuple(claims))


def shard_holders(lease: str, seen: Iterable[LeaseSeen]) -> tuple[int, dict[int, str]]:
    """The shard count in force (the count Lease's; 1 without one) and each shard's holder
    by its Lease ("" for a shard released or never taken): what ``gitray status`` shows of a
    sharded instance. Lapse is not judged here (no clock): a holder that died is shown until
    another replica takes its shard."""
    seen = list(seen)
    count = next((ShardCount.from_annotations(s.annotations) for s in seen
                  if s.name == count_lease_name(lease)), None)
    shards = count.shards if count is not None else 1
    holders = dict.fromkeys(range(shards), "") if shards > 1 else {}
    for s in seen:
        parsed = parse_shard_lease_name(lease, s.name)
        if parsed is not None and parsed[1] == shards > 1:
            holders[parsed[0]] = s.holder
    return shards, holders


def synced_at(lease: str, shards: int, seen: Iterable[LeaseSeen]) -> str | None:
    """The commit every shard of ``shards`` was last found in sync at by its holder (each
    shard Lease's ``gitray.io/synced``), when all of them name the same one; None while any
    shard has no such commit yet or two shards name different commits (one of them is still
    working on a newer commit, or has not started it)."""
    found: dict[int, str] = {}
    for s in seen:
        parsed = parse_shard_lease_name(lease, s.name)
        commit = s.annotations.get(ANN_SYNCED, "")
        if parsed is not None and parsed[1] == shards and commit:
            found[parsed[0]] = commit
    commits = set(found.values())
    return commits.pop() if len(found) == shards and len(commits) == 1 else None


@dataclass(frozen=True)
class Changes:
    """What a round changed for the caller: shards it may now drive (with their epochs) and
    shards it must stop driving (lost, lapsed, or released). A shard lost and taken again in
    another epoch is in both."""

    gained: Mapping[int, int] = field(default_factory=dict)
    lost: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.gained or self.lost)


def changes(before: Mapping[int, int], after: Mapping[int, int]) -> Changes:
    """The change from the shards (shard -> epoch) the caller was told of to those it may
    drive now."""
    gained = {s: e for s, e in sorted(after.items()) if before.get(s) != e}
    lost = tuple(sorted(s for s, e in before.items() if after.get(s) != e))
    return Changes(gained, lost)
