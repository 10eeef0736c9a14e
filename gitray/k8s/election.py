"""Leader election's rules, after client-go: durations, the Lease record, expiry judged on this
process's own clock, the next record to write. Pure but for ``default_identity`` (host name,
pid); the API calls and threads are :mod:`gitray.k8s.lease`.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitray.core.errors import ConfigError
from gitray.core.model import LABEL_MANAGED_BY, MANAGED_BY

__all__ = [
    "DEFAULT_LEASE_NAME",
    "LEASE_API_VERSION",
    "LeaseRecord",
    "LeaseSettings",
    "Observation",
    "check_durations",
    "default_identity",
    "lease_body",
    "lost_because",
    "new_lease_body",
    "next_record",
    "released_record",
    "renew_is_fresh",
    "renew_stall",
    "retry_delay",
]

DEFAULT_LEASE_NAME = "gitray"
LEASE_API_VERSION = "coordination.k8s.io/v1"
_JITTER = 1.2  # client-go's JitterFactor for acquire retries: wait period * [1, 2.2)
_RETRY_MARGIN = 1.2  # client-go: the renew deadline must exceed 1.2 retry periods
_RELEASED_DURATION_S = 1  # what client-go writes on release, so others take over at once


def default_identity() -> str:
    """``<hostname>_<pid>_<random>``: unique per process, readable in ``kubectl get lease``."""
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(4)}"


def check_durations(lease_duration_s: float, renew_deadline_s: float,
                    retry_period_s: float) -> None:
    """client-go's rule: lease duration > renew deadline > 1.2 * retry period (all > 0)."""
    if min(lease_duration_s, renew_deadline_s, retry_period_s) <= 0:
        raise ConfigError(
            f"lease durations must be positive (got lease duration {lease_duration_s} s, "
            f"renew deadline {renew_deadline_s} s, retry period {retry_period_s} s)")
    if not lease_duration_s > renew_deadline_s > _RETRY_MARGIN * retry_period_s:
        raise ConfigError(
            f"lease durations must satisfy lease duration > renew deadline > 1.2 * retry "
            f"period (got {lease_duration_s} s > {renew_deadline_s} s > "
            f"1.2 * {retry_period_s} s)")


@dataclass(frozen=True, kw_only=True)
class LeaseSettings:
    """Which Lease to contend for, as whom, and client-go's three durations."""

    namespace: str
    name: str = DEFAULT_LEASE_NAME
    identity: str = field(default_factory=default_identity)
    lease_duration_s: int = 15  # an int: the Lease stores whole seconds
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.namespace or not self.name or not self.identity:
            raise ConfigError("the Lease needs a namespace, a name and an identity")
        if not isinstance(self.lease_duration_s, int) or isinstance(self.lease_duration_s, bool):
            raise ConfigError(f"the lease duration must be whole seconds "
                              f"(got {self.lease_duration_s!r})")
        check_durations(self.lease_duration_s, self.renew_deadline_s, self.retry_period_s)


@dataclass(frozen=True)
class LeaseRecord:
    """The ``spec`` of a Lease, as leader election reads and writes it."""

    holder: str = ""  # "" when nobody holds it (released)
    duration_s: int = 0
    acquire_time: str = ""  # RFC 3339 (MicroTime); display only, never used for decisions
    renew_time: str = ""  # likewise: other hosts' clocks are not trusted
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(holder=str(spec.get("holderIdentity") or ""),
                   duration_s=int(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=str(spec.get("acquireTime") or ""),
                   renew_time=str(spec.get("renewTime") or ""),
                   transitions=int(spec.get("leaseTransitions") or 0))

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"leaseDurationSeconds": self.duration_s,
                                "leaseTransitions": self.transitions}
        if self.holder:
            spec["holderIdentity"] = self.holder
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class Observation:
    """What this process has seen of the Lease record, and since when (its own clock).

    A holder's claim lapses ``duration_s`` after the record was last seen to *change*; reading
    the same record again does not extend it. Pure: the caller passes the time.
    """

    def __init__(self, default_duration_s: int) -> None:
        self.default_duration_s = default_duration_s
        self.record: LeaseRecord | None = None
        self.since = 0.0

    def see(self, record: LeaseRecord, now: float) -> None:
        if record != self.record:
            self.record = record
            self.since = now

    def lapses_at(self) -> float:
        """Local time at which the observed holder's claim lapses."""
        if self.record is None:
            return self.since
        duration = self.record.duration_s if self.record.duration_s > 0 \
            else self.default_duration_s
        return self.since + duration

    def claimable(self, identity: str, now: float) -> bool:
        """Whether ``identity`` may write itself in as holder now."""
        r = self.record
        if r is None or not r.holder or r.holder == identity:
            return True
        return now >= self.lapses_at()


def next_record(current: LeaseRecord, identity: str, *, renewing: bool, duration_s: int,
                now_wall: str) -> LeaseRecord:
    """The record to write: a renewal keeps the acquire time and transition count; anything
    else starts a new term, so the transition count (the epoch) grows by one."""
    if renewing:
        return LeaseRecord(holder=identity, duration_s=duration_s,
                           acquire_time=current.acquire_time or now_wall, renew_time=now_wall,
                           transitions=current.transitions)
    return LeaseRecord(holder=identity, duration_s=duration_s, acquire_time=now_wall,
                       renew_time=now_wall, transitions=current.transitions + 1)


def released_record(current: LeaseRecord, now_wall: str) -> LeaseRecord:
    """The record that hands a Lease over at once (as client-go releases): no holder, a
    duration of 1 s, the transition count (the epoch) kept."""
    return LeaseRecord(holder="", duration_s=_RELEASED_DURATION_S, acquire_time=now_wall,
                       renew_time=now_wall, transitions=current.transitions)


def renew_is_fresh(last_renew: float, renew_deadline_s: float, now: float) -> bool:
    """Whether a renew started at ``last_renew`` still covers ``now`` (local clock).

    The renew deadline is shorter than the lease duration, so while this holds no other
    process can have seen the lease lapse, even counting from when the request was sent."""
    return now - last_renew < renew_deadline_s


def retry_delay(retry_period_s: float, rng: random.Random) -> float:
    """client-go's jittered wait between acquire attempts: period * [1, 2.2)."""
    return retry_period_s * (1 + _JITTER * rng.random())


def lease_body(live: Mapping[str, Any], record: LeaseRecord) -> dict[str, Any]:
    """The Lease to ``replace`` ``live`` with: its identity and ``resourceVersion`` (the
    compare-and-swap), ``record`` as the spec."""
    meta = live.get("metadata") or {}
    metadata = {k: meta[k] for k in ("name", "namespace", "resourceVersion", "labels",
                                     "annotations") if meta.get(k) is not None}
    return {"apiVersion": LEASE_API_VERSION, "kind": "Lease", "metadata": metadata,
            "spec": record.to_spec()}


def new_lease_body(settings: LeaseSettings, record: LeaseRecord) -> dict[str, Any]:
    """A Lease to ``create`` for ``settings``, holding ``record``."""
    return {"apiVersion": LEASE_API_VERSION, "kind": "Lease",
            "metadata": {"name": settings.name, "namespace": settings.namespace,
                         "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
            "spec": record.to_spec()}


def lost_because(live: Mapping[str, Any], identity: str, epoch: int | None, uid: str) -> str:
    """Why the live Lease shows ``identity`` (holding it in ``epoch``, Lease object ``uid``)
    no longer holds it; "" when it still does."""
    record = LeaseRecord.from_spec(live.get("spec"))
    if (live.get("metadata") or {}).get("uid", "") != uid:
        return "it was deleted and created again"
    if record.holder != identity:
        return f"it is now held by {record.holder or 'nobody'} (epoch {record.transitions})"
    if record.transitions != epoch:
        return f"it moved on to epoch {record.transitions}"
    return ""


def renew_stall(last_error: str, started: float | None, now: float) -> str:
    """Why no renew succeeded, for the step-down message: how long the renew in flight has
    waited (a slow API server) and the last error; when neither, that no renew ran at all
    (a process starved of CPU or paused)."""
    parts = ([f"a renew request has waited {now - started:.1f} s for the API server"]
             if started is not None else [])
    parts += [f"last error: {last_error}"] if last_error else []
    return "; ".join(parts) or "no renew attempt was running: was this process starved of CPU?"
