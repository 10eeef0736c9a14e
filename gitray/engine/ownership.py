"""Which workloads this replica of ``gitray sync`` may drive, from the shards it holds. Pure,
no I/O.

With ``S`` shards (``gitray sync --shards S``) a replica drives the workloads of the shards its
shard keeper reports (``ShardKeeper.shards()``: shard -> epoch) and leaves every other workload
alone: not dispatched, resumed, pruned, re-checked, nor reported on. With ``S = 1`` (unsharded)
the one shard is the Lease, and the leader owns everything: every function here then returns
its input as it is, so an unsharded daemon plans, labels and posts exactly as before.

Everything gitray does for a workload is done by the holder of its shard (docs/sharding.md):
:meth:`Ownership.owns` is what the planner plans (new runs, resumed runs, deletions of old
clusters, pruning of workloads gone from Git — each keyed by its workload; the Planner's
``owns``), :func:`owned` keeps run records or workloads, and :func:`shard_labels` is the
``gitray.io/shard`` label of the objects created for a shard's workloads (none when
unsharded), added by :func:`labelled`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from gitray.core.model import ObjectKey
from gitray.engine.shards import LABEL_SHARD, check_shards, shard_label, shard_of

__all__ = ["Keyed", "Ownership", "in_shards", "labelled", "owned", "posts_overall",
           "shard_labels"]


@dataclass(frozen=True)
class Ownership:
    """The shards (of ``count``) this replica may drive now, each with its Lease's epoch.
    Unsharded (``count`` 1), shard 0 is the Lease: held while this replica leads."""

    count: int = 1
    held: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_shards(self.count)

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def shard(self, key: ObjectKey) -> int:
        return shard_of(key, self.count) if self.sharded else 0

    def owns(self, key: ObjectKey) -> bool:
        return self.shard(key) in self.held

    def epoch(self, key: ObjectKey) -> int | None:
        """The epoch of the Lease of ``key``'s shard (None: not held)."""
        return self.held.get(self.shard(key))

    def still_held(self, now: Ownership) -> Ownership:
        """The shards of this ownership that ``now`` still holds in the same epoch: what a
        pass planned with this one may still report on when it ends (a shard lost meanwhile
        is its next holder's to report)."""
        return replace(self, held={s: e for s, e in self.held.items() if now.held.get(s) == e})

    def describe(self) -> dict[str, object]:
        """For ``/readyz``: the count and each held shard (``2-of-6``) with its epoch."""
        return {"count": self.count, "held": {
            shard_label(s, self.count): e for s, e in sorted(self.held.items())}}


class Keyed(Protocol):
    @property
    def key(self) -> ObjectKey: ...


K = TypeVar("K", bound=Keyed)


def owned(items: Iterable[K], own: Ownership) -> list[K]:
    """The items (run records, workload plans, workloads) of the workloads ``own`` holds;
    all of them when unsharded (the one Lease is checked where it always was: by the pass
    that starts and the fence of every write)."""
    return [i for i in items if not own.sharded or own.owns(i.key)]


def in_shards(keys: Iterable[ObjectKey], shards: Iterable[int], count: int
              ) -> list[ObjectKey]:
    """The workloads among ``keys`` that belong to ``shards`` (of ``count``), sorted: what a
    replica gives up with shards it lost (its parked runs, its metrics rows)."""
    lost = Ownership(count, dict.fromkeys(shards, 0))
    return sorted(k for k in keys if lost.owns(k))


def shard_labels(shard: int, count: int) -> dict[str, str]:
    """The ``gitray.io/shard`` label of what gitray creates for a workload of ``shard`` (none
    when unsharded: objects are labelled as before sharding)."""
    name = shard_label(shard, count)  # (checks both)
    return {} if count == 1 else {LABEL_SHARD: name}


def labelled(manifest: Mapping[str, Any], labels: Mapping[str, str]) -> Mapping[str, Any]:
    """``manifest`` with ``labels`` added to its metadata (a copy of the metadata only);
    ``manifest`` itself when there are none."""
    if not labels:
        return manifest
    meta = dict(manifest.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    return {**manifest, "metadata": meta}


# The commit's overall status context: a replica of a sharded instance sees only its own
# shards' workloads, so it cannot say the commit is in sync from them (the holder of shard 0
# does, from every shard Lease: gitray.daemon.owners), nor that it is still applying ("pending"
# with no success to follow would never be replaced). A failure or an error is true whichever
# replica sees it.
_OVERALL_WHEN_SHARDED = frozenset({"failure", "error"})


def posts_overall(state: str, count: int) -> bool:
    """Whether a replica posts the commit's overall status ``state`` with ``count`` shards."""
    return count == 1 or state in _OVERALL_WHEN_SHARDED
