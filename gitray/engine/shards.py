"""Workloads sharded over ``gitray sync`` replicas on Leases: the decisions. Pure, no I/O.

Issue 28, its first layer (docs/sharding.md tells the whole design; the daemon's wiring is
not built yet). Everything here is a function of values the caller read; none reads a clock.

- **Ownership:** with ``S`` shards a workload belongs to shard ``shard_of(key, S)``: SHA-256 of
  ``namespace/kind/name`` (never Python's ``hash()``, which is salted per process), mod ``S``.
- **Names:** shard ``i`` of ``S`` is guarded by the Lease ``<lease>-shard-<i>-of-<S>``; with
  ``S = 1`` by ``<lease>`` itself, the Lease an unsharded ``gitray sync`` holds, so one shard is
  today's leader election, its epochs unchanged. A Lease therefore guards one set of workloads
  for its whole life: shard 2 of 6 and shard 2 of 4 are different Leases, and a run record's
  epoch always refers to the Lease of the same workloads. Each replica announces itself with a
  member Lease ``<lease>-member-<digest of its identity>`` (annotated with its ``S``); the
  shard count in force is the ``gitray.io/shards`` annotation of ``<lease>-shards``.
- **Balancing** (``decide``): each replica, every retry period, from what it read of the
  member and shard Leases, takes free or lapsed shards up to its fair share and releases what
  is over it. Every replica computes the same counts from the same view, and the ties are
  broken by identity, so two replicas agree on who gives up a shard and who takes it; a race
  for the same free shard is settled by the Lease's compare-and-swap.
- **Resharding** (``phase``, ``may_drive``): one shard count is in force at a time. The count
  moves to another ``S`` only when no Lease of another count is live and no live member runs
  the count in force; a replica drives a shard it took only after reading the count and the
  other counts' Leases again (``may_drive``). Writing the count, then reading the Leases, on
  one side, and taking a Lease, then reading the count, on the other, means at least one of
  two replicas of different counts sees the other and does not drive.

Liveness is judged as client-go judges it: a claim lapses ``duration`` after this process saw
its record *change*, on this process's own clock (``lapses_at``), never by another host's
``renewTime``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from gitray.core.errors import ConfigError
from gitray.core.model import ObjectKey

__all__ = [
    "ANN_EPOCH_BASE",
    "ANN_SHARDS",
    "LABEL_SHARD",
    "MAX_SHARDS",
    "Claim",
    "Decision",
    "Member",
    "Phase",
    "ShardCount",
    "View",
    "check_shards",
    "count_lease_name",
    "decide",
    "fair_share",
    "foreign_claims",
    "forgotten_members",
    "may_drive",
    "member_lease_name",
    "next_epoch",
    "parse_shard_label",
    "parse_shard_lease_name",
    "phase",
    "preference",
    "shard_label",
    "shard_lease_name",
    "shard_of",
    "switch_epoch_base",
]

# Each shard Lease is renewed every retry period (2 s): 64 shards are 32 writes a second to
# the API server for the Leases alone, and more shards than replicas buy nothing.
MAX_SHARDS = 64
LABEL_SHARD = "gitray.io/shard"  # "<i>-of-<S>" on what gitray creates for a workload
ANN_SHARDS = "gitray.io/shards"  # the count in force (count Lease), or a member's own
ANN_EPOCH_BASE = "gitray.io/epoch-base"  # count Lease: the least epoch a shard Lease may take

_SHARD_SUFFIX = re.compile(r"-shard-(\d+)-of-(\d+)")
_LABEL = re.compile(r"(\d+)-of-(\d+)")


def check_shards(shards: int) -> None:
    """Refuse a shard count that is not a whole number from 1 to ``MAX_SHARDS``."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"--shards must be a whole number of at least 1 (got {shards!r}); "
                          f"1 runs gitray sync unsharded, as one leader")
    if shards > MAX_SHARDS:
        raise ConfigError(f"--shards {shards} is more than {MAX_SHARDS}: every shard is a Lease "
                          f"renewed every retry period; use at most {MAX_SHARDS}")


def shard_of(key: ObjectKey, shards: int) -> int:
    """The shard of workload ``key`` among ``shards``: the same in every process, after every
    restart, on every Python version (SHA-256, not ``hash()``)."""
    check_shards(shards)
    text = f"{key.namespace}/{key.kind}/{key.name}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % shards


def _check_index(shard: int, shards: int) -> None:
    check_shards(shards)
    if not 0 <= shard < shards:
        raise ConfigError(f"shard {shard} does not exist among {shards} (0 to {shards - 1})")


def shard_lease_name(lease: str, shard: int, shards: int) -> str:
    """The Lease guarding shard ``shard`` of ``shards``; ``lease`` itself when unsharded."""
    _check_index(shard, shards)
    return lease if shards == 1 else f"{lease}-shard-{shard}-of-{shards}"


def parse_shard_lease_name(lease: str, name: str) -> tuple[int, int] | None:
    """(shard, shards) of the shard Lease ``name`` of ``lease``; None for any other Lease
    (the count, a member, another instance's, or an impossible index)."""
    if name == lease:
        return 0, 1
    if not name.startswith(lease):
        return None
    m = _SHARD_SUFFIX.fullmatch(name[len(lease):])
    if m is None or m.group(1) != str(int(m.group(1))) or m.group(2) != str(int(m.group(2))):
        return None  # leading zeros: not a name gitray writes
    shard, shards = int(m.group(1)), int(m.group(2))
    return (shard, shards) if 1 < shards <= MAX_SHARDS and shard < shards else None


def shard_label(shard: int, shards: int) -> str:
    """The ``gitray.io/shard`` value of shard ``shard`` of ``shards``. It names ``S`` like the
    Lease does, so a label written under another count is seen to be stale, never mistaken."""
    _check_index(shard, shards)
    return f"{shard}-of-{shards}"


def parse_shard_label(value: str) -> tuple[int, int] | None:
    m = _LABEL.fullmatch(value)
    if m is None or str(int(m.group(1))) != m.group(1) or str(int(m.group(2))) != m.group(2):
        return None
    shard, shards = int(m.group(1)), int(m.group(2))
    return (shard, shards) if 1 <= shards <= MAX_SHARDS and shard < shards else None


def count_lease_name(lease: str) -> str:
    """The Lease whose annotations hold the shard count in force (it is never held)."""
    return f"{lease}-shards"


def member_lease_name(lease: str, identity: str) -> str:
    """A replica's member Lease (an identity holds ``_``, which a Lease name may not)."""
    return f"{lease}-member-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def preference(identity: str, shard: int) -> int:
    """How much ``identity`` prefers ``shard`` (rendezvous hashing): replicas prefer different
    free shards, so they seldom race for the same one."""
    digest = hashlib.sha256(f"{identity}/{shard}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def fair_share(shards: int, replicas: int) -> tuple[int, int]:
    """(floor, cap): every replica holds at least ``shards // replicas`` and at most
    ``ceil(shards / replicas)`` once balanced."""
    check_shards(shards)
    n = max(1, replicas)
    return shards // n, -(-shards // n)


# ---- what a replica read ---------------------------------------------------------------------


@dataclass(frozen=True)
class ShardCount:
    """The count Lease: the ``S`` in force, and the least epoch its shard Leases may take."""

    shards: int
    epoch_base: int = 0

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> ShardCount | None:
        """None when the count Lease has no valid count (never written, or by hand)."""
        try:
            shards = int(annotations.get(ANN_SHARDS, ""))
            base = int(annotations.get(ANN_EPOCH_BASE, "0"))
            check_shards(shards)
        except (ValueError, ConfigError):
            return None
        return cls(shards, max(0, base))

    def to_annotations(self) -> dict[str, str]:
        return {ANN_SHARDS: str(self.shards), ANN_EPOCH_BASE: str(self.epoch_base)}


@dataclass(frozen=True)
class Claim:
    """One shard Lease as this replica saw it, of any count ``shards``."""

    shard: int
    shards: int
    holder: str  # "" when released
    lapses_at: float  # this replica's clock: when the claim lapses unless renewed
    epoch: int = 0  # leaseTransitions

    def live(self, now: float) -> bool:
        return bool(self.holder) and now < self.lapses_at


@dataclass(frozen=True)
class Member:
    """A replica's member Lease: who it is, the count it runs with, when it lapses."""

    identity: str
    shards: int
    lapses_at: float  # as Claim.lapses_at; a released member Lease has lapsed

    def live(self, now: float) -> bool:
        return now < self.lapses_at


@dataclass(frozen=True)
class View:
    """What replica ``me``, running with ``shards``, read in one round."""

    me: str
    shards: int
    count: ShardCount | None  # None: the count Lease does not exist (yet)
    members: tuple[Member, ...] = ()
    claims: tuple[Claim, ...] = ()  # every shard Lease of the instance, of every count

    def __post_init__(self) -> None:
        check_shards(self.shards)


class Phase(StrEnum):
    """Where a replica stands towards the count in force."""

    DRIVE = "drive"  # its count is in force: balance, take, drive what it holds
    WAIT = "wait"  # another count is in force and still live: hold nothing, keep announcing
    SWITCH = "switch"  # put its count in force (write the count Lease), then look again


@dataclass(frozen=True)
class Decision:
    """A round's outcome. Take ``want`` of the shards ``take`` (free ones, best preferred
    first): try each in turn until ``want`` were won, so a race lost to another replica
    costs a request, not a round. Release ``release`` at step boundaries. Write ``count``
    (compare-and-swap) when the phase is SWITCH."""

    phase: Phase
    take: tuple[int, ...] = ()
    want: int = 0
    release: tuple[int, ...] = ()
    count: ShardCount | None = None
    floor: int = 0  # the fair share this round (display only: /readyz, logs)
    cap: int = 0
    replicas: int = 1


# ---- resharding ------------------------------------------------------------------------------


def _other_live(view: View, now: float) -> list[Claim]:
    return [c for c in view.claims if c.shards != view.shards and c.live(now)]


def phase(view: View, now: float) -> Phase:
    """DRIVE when this replica's count is in force. Otherwise SWITCH only when nothing of
    another count is still live: no shard Lease of another count, and no other member running
    the count in force (the incumbent count stays while its replicas run, so a rollout to a
    new count hands over once, when the last old replica is gone); else WAIT. A policy, not
    the safety: a replica drives only what ``may_drive`` allows."""
    count = view.count
    if count is not None and count.shards == view.shards:
        return Phase.DRIVE
    if _other_live(view, now):
        return Phase.WAIT
    if count is not None and any(m.live(now) and m.shards == count.shards
                                 and m.identity != view.me for m in view.members):
        return Phase.WAIT
    return Phase.SWITCH


def may_drive(view: View, now: float) -> bool:
    """Whether a shard just taken may be driven, judged on reads made *after* taking it: the
    count in force is this replica's and no Lease of another count is live. A replica that
    switched the count, then took a shard, asks the same after its take: so of two replicas
    of different counts, the later one to write sees the other's write and does not drive.
    A shard held but not driven yet is asked about again each round (on that round's reads).

    This is the safety gate; ``phase`` only keeps replicas from contending needlessly."""
    count = view.count
    return count is not None and count.shards == view.shards and not _other_live(view, now)


def foreign_claims(view: View, now: float) -> list[Claim]:
    """Live Leases of another count while this replica's count is in force: a process that
    does not follow the count (an older gitray), or for a round a replica of the old count
    woken from a pause (it takes, reads the count, lets go). To report when it lasts."""
    return _other_live(view, now) if phase(view, now) is Phase.DRIVE else []


def switch_epoch_base(view: View) -> int:
    """The epoch base written with a new count: above every epoch any shard Lease of the
    instance reached (and never below the base before), so a run record written under the old
    count always has a lower epoch than the Lease of the new count that resumes it."""
    prior = view.count.epoch_base if view.count is not None else 0
    return max([prior, *(c.epoch + 1 for c in view.claims)])


def next_epoch(transitions: int | None, base: int) -> int:
    """The epoch (``leaseTransitions``) to write when taking a shard Lease: one more than it
    had, and at least the count's base; ``transitions`` None when the Lease is created."""
    return base if transitions is None else max(transitions + 1, base)


# ---- balancing -------------------------------------------------------------------------------


def _members(view: View, now: float) -> list[str]:
    """The live replicas of this count (this one always among them), sorted."""
    return sorted({m.identity for m in view.members if m.live(now) and m.shards == view.shards}
                  | {view.me})


def _holdings(view: View, now: float) -> dict[int, str]:
    """Shard -> its live holder, among this count's shards."""
    return {c.shard: c.holder for c in view.claims
            if c.shards == view.shards and 0 <= c.shard < view.shards and c.live(now)}


def decide(view: View, now: float) -> Decision:
    """This replica's moves for the round (see the module docstring), with ``n`` live
    replicas of its count, floor ``S // n`` and cap ``ceil(S / n)``:

    1. over the cap: release down to it;
    2. below the floor: take free shards up to it;
    3. at the floor, below the cap: take one free shard when the free shards outnumber what
       replicas below the floor still need, and this replica ranks (by identity) among the
       first of those at the floor that the spare shards can serve;
    4. at the cap (> floor), when replicas below the floor need more than is free or about to
       be freed, and more replicas hold the cap than ``S mod n``: the replicas holding the
       most (ties by identity) release one each, as many as needed.

    Released shards are the ones this replica prefers least. Outside DRIVE it releases every
    shard it holds of its count (it should hold none) and takes nothing.
    """
    ph = phase(view, now)
    holders = _holdings(view, now)
    mine = sorted(s for s, h in holders.items() if h == view.me)
    if ph is not Phase.DRIVE:
        count = ShardCount(view.shards, switch_epoch_base(view)) if ph is Phase.SWITCH else None
        return Decision(ph, release=tuple(mine), count=count)
    members = _members(view, now)
    n, shards = len(members), view.shards
    floor, cap = fair_share(shards, n)
    held = {m: sum(1 for h in holders.values() if h == m) for m in members}
    free = sorted((s for s in range(shards) if s not in holders),
                  key=lambda s: (-preference(view.me, s), s))
    least_liked = sorted(mine, key=lambda s: (preference(view.me, s), s))
    h = held[view.me]
    decision = Decision(Phase.DRIVE, floor=floor, cap=cap, replicas=n)
    deficit = sum(floor - c for c in held.values() if c < floor)
    if h > cap or h == cap > floor:
        over = sum(c - cap for c in held.values() if c > cap)
        need = deficit - len(free) - over
        top = sorted((m for m in members if held[m] >= cap), key=lambda m: (-held[m], m))
        releasers = top[:max(0, min(need, len(top) - (shards - floor * n)))]
        n_release = max(0, h - cap) + (1 if view.me in releasers else 0)
        return _with(decision, release=least_liked[:n_release])
    if h < floor:
        return _with(decision, take=free, want=min(floor - h, len(free)))
    if h < cap:
        at_floor = [m for m in members if held[m] == floor]
        if at_floor.index(view.me) < len(free) - deficit:
            return _with(decision, take=free, want=1)
    return decision


def _with(decision: Decision, *, take: Iterable[int] = (), want: int = 0,
          release: Iterable[int] = ()) -> Decision:
    return replace(decision, take=tuple(take) if want else (), want=want,
                   release=tuple(release))


def forgotten_members(view: View, now: float, keep_s: float) -> list[str]:
    """Member identities whose Lease lapsed more than ``keep_s`` ago: their Leases may be
    deleted (every restart makes a new identity, so they would pile up otherwise)."""
    return sorted(m.identity for m in view.members
                  if m.identity != view.me and now >= m.lapses_at + keep_s)
