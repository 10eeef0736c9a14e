"""The Lease objects of the shard keeper (:mod:`gitray.engine.shardkeeper`): the bodies it
writes (a record, the instance's label, annotations) and what it reads back from one. Sends
no request (the keeper does); reads the wall clock for the times a record shows people.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gitray.core.model import LABEL_MANAGED_BY, MANAGED_BY
from gitray.core.timefmt import utc_timestamp
from gitray.engine import shards as sharding
from gitray.engine import shardview
from gitray.k8s import election
from gitray.k8s.election import LeaseRecord, LeaseSettings

__all__ = ["Obj", "body", "lease_seen", "meta", "next_record", "record_of", "released",
           "wall_now"]

Obj = dict[str, Any]


def wall_now() -> str:
    # MicroTime: written for people and other tools; never read back for decisions.
    return utc_timestamp(digits=6)


def record_of(obj: Mapping[str, Any]) -> LeaseRecord:
    return LeaseRecord.from_spec(obj.get("spec"))


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def lease_seen(obj: Mapping[str, Any], lapses_at: float = 0.0) -> shardview.LeaseSeen:
    """A Lease as read; ``lapses_at`` 0 for a reader that judges no lapse (``gitray status``)."""
    record = record_of(obj)
    return shardview.LeaseSeen(str(meta(obj).get("name")), record.holder, record.transitions,
                               lapses_at, dict(meta(obj).get("annotations") or {}))


def body(settings: LeaseSettings, live: Obj | None, name: str, record: LeaseRecord | None,
         annotations: Mapping[str, str] | None = None) -> Obj:
    """``live`` replaced by ``record`` (its resourceVersion: the compare-and-swap), or a new
    Lease ``name`` in the instance's namespace; labelled for the instance's LIST. No
    ``record``: an empty spec (the count Lease is never held)."""
    base = live or {"metadata": {"name": name, "namespace": settings.namespace}}
    result = election.lease_body(base, record or LeaseRecord())
    result["metadata"]["labels"] = {**(meta(base).get("labels") or {}),
                                    LABEL_MANAGED_BY: MANAGED_BY,
                                    shardview.LABEL_LEASE: shardview.lease_label(settings.name)}
    if annotations:
        result["metadata"]["annotations"] = {**(meta(base).get("annotations") or {}),
                                             **annotations}
    if record is None:
        result["spec"] = {}
    return result


def next_record(settings: LeaseSettings, live: Obj | None, *, renewing: bool,
                epoch_base: int = 0) -> LeaseRecord:
    """The record ``settings.identity`` writes over ``live``: renewed in its epoch, or taken
    in the next epoch (``sharding.next_epoch``, at least ``epoch_base``)."""
    current = record_of(live) if live is not None else None
    record = election.next_record(current or LeaseRecord(), settings.identity,
                                  renewing=renewing, duration_s=settings.lease_duration_s,
                                  now_wall=wall_now())
    if renewing:
        return record
    before = current.transitions if current is not None else None
    return replace(record, transitions=sharding.next_epoch(before, epoch_base))


def released(live: Obj) -> LeaseRecord:
    """``live``'s record written free (its epoch kept: the next holder counts from it)."""
    return election.released_record(record_of(live), wall_now())
