"""The shard keeper: the decisions of :mod:`gitray.engine.shards` carried out on real Leases.
Does I/O (the API server, through :class:`~gitray.k8s.client.Kube`).

One :meth:`ShardKeeper.round` per retry period, from start to start (:meth:`ShardKeeper.run`
loops them):

1. one LIST of the instance's Leases by label (and a GET of an unlabelled ``<lease>`` of an
   older release), each noted with an ``Observation``: a claim lapses its duration after
   *this* process saw it change (client-go's rule, as in ``election.py``);
2. the shard Leases it holds renewed (with the commit it last found them in sync at, when it
   has one); one whose Lease names another holder, moved to another epoch or was deleted is
   lost; this replica's member Lease written (created, or renewed with its count);
3. ``decide``: SWITCH writes the count Lease; takes are written, a take writes epoch
   ``next_epoch``, one lost to another's compare-and-swap tries the next free shard; a shard
   to release stops being driven at once and is released once none of its runs is on a
   worker (``busy``: a step past its fence lands before the next holder takes the shard),
   renewed meanwhile, released anyway ``drain_max_s`` after;
4. the gate: a shard taken is driven only once a LIST made *after* taking it passes
   ``may_drive`` (read again at once after a round's takes); 5. lapsed members deleted.

Writes are compare-and-swap ``replace``s or ``create``s (a lost one is not an error); API
errors are logged once per outage; a shard is given up at its renew deadline, never after.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from gitray.core.errors import ConflictError, GitrayError, LeaseLostError, NotFoundError
from gitray.engine import shardleases as leases
from gitray.engine import shards as sharding
from gitray.engine import shardview
from gitray.engine.shardleases import Obj as _Obj
from gitray.engine.shardview import Changes
from gitray.k8s import election
from gitray.k8s.client import Kube
from gitray.k8s.election import LeaseRecord, LeaseSettings
from gitray.k8s.leasewrite import create_lease

__all__ = ["DRAIN_MAX_S", "FORGET_AFTER_S", "Busy", "OnChanges", "ShardFence", "ShardKeeper"]

FORGET_AFTER_S = 300.0  # a member Lease lapsed this long is deleted (restarts make new ones)
DRAIN_MAX_S = 60.0  # a shard to release is held this long at most for its runs to stop

OnChanges = Callable[[Changes], None]
Busy = Callable[[int], bool]  # shard -> whether a run of its workloads is on a worker now
_API, _KIND = election.LEASE_API_VERSION, "Lease"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Held:
    """A shard Lease this replica holds: the epoch and Lease object it took, when its last
    successful write started (local clock), whether the gate let it drive, and since when
    (local clock) it is being handed over: no longer driven, released once its runs stop."""

    epoch: int
    uid: str
    renewed_at: float
    driving: bool = False
    draining_since: float | None = None


def _idle(shard: int) -> bool:
    return False


class ShardKeeper:
    """The shard Leases of replica ``settings.identity`` of the instance whose Lease name is
    ``settings.name``, running with ``shards`` shards (thread-safe: one round at a time).
    ``on_changes`` is called from the round that changed what the caller may drive (the
    :class:`Changes` it returns); ``busy``: whether a shard has a run on a worker (a shard
    to release waits for none, ``drain_max_s`` at most); ``clock``: the monotonic clock of
    lapses and deadlines."""

    def __init__(self, kube: Kube, settings: LeaseSettings, shards: int, *,
                 forget_after_s: float = FORGET_AFTER_S, on_changes: OnChanges | None = None,
                 busy: Busy = _idle, drain_max_s: float = DRAIN_MAX_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        sharding.check_shards(shards)
        self._kube, self._s, self._count = kube, settings, shards
        self.busy, self._drain_max_s = busy, drain_max_s  # (busy: as passed in)
        self._forget_after_s, self._on_changes, self._clock = forget_after_s, on_changes, clock
        self._member = sharding.member_lease_name(settings.name, settings.identity)
        self._rounds = threading.RLock()  # one round (or release_all) at a time
        self._lock = threading.Lock()  # guards _held and _told
        self._held: dict[int, _Held] = {}
        self._told: dict[int, int] = {}  # what the caller was last told it may drive
        self._observed: dict[str, election.Observation] = {}
        self._outage = ""  # the first error of the current outage; "" while the API answers
        self._foreign: tuple[str, ...] = ()
        self._closed = False
        self._marks: dict[int, tuple[int, str]] = {}  # shard -> (epoch, commit) to write
        self.decision: sharding.Decision | None = None  # the last round's (display only)
        self.synced: str | None = None  # the commit every shard was in sync at, last read

    @property
    def identity(self) -> str:
        return self._s.identity

    def shards(self) -> dict[int, int]:
        """The shards this replica may drive now, each with its epoch: held, let through by
        the gate, not being handed over, and renewed within the renew deadline by the clock
        at this call."""
        now = self._clock()
        with self._lock:
            return {s: h.epoch for s, h in sorted(self._held.items())
                    if h.driving and h.draining_since is None and self._fresh(h, now)}

    def mark_synced(self, held: Mapping[int, int], commit: str) -> None:
        """``held``'s workloads (shard -> epoch) are in sync at ``commit``: each shard's Lease
        says so (``gitray.io/synced``) from its next renew in that epoch."""
        with self._lock:
            self._marks.update((s, (e, commit)) for s, e in held.items())

    def fence(self, shard: int) -> ShardFence:
        """The fence of ``shard``'s workloads, in the epoch this replica drives it in now (-1,
        refused at once, when it does not)."""
        return ShardFence(self, shard, self.shards().get(shard, -1))

    def ensure_held(self, shard: int, epoch: int) -> None:
        """Return only if this replica still drives ``shard`` in ``epoch``, by the clock now
        and by a read of its Lease; else :class:`LeaseLostError` (a Lease found lost is
        dropped). The fence of every mutation of the shard's workloads."""
        self._check_local(shard, epoch)
        live = self._kube.get_or_none(_API, _KIND, self._s.namespace, self._lease(shard))
        with self._lock:
            h = self._held.get(shard)
        if h is None:  # released by this replica meanwhile (not "deleted and created again")
            self._check_local(shard, epoch)
        problem = "it was deleted" if live is None else election.lost_because(
            live, self._s.identity, epoch, h.uid if h is not None else "")
        if problem:
            if h is not None and h.epoch == epoch:
                log.warning("lost shard %d of %d: %s", shard, self._count, problem)
                self._drop(shard)
            raise LeaseLostError(f"shard {shard} of {self._count} lost: {problem}; this "
                                 f"replica (epoch {epoch}) stops mutating its workloads")
        self._check_local(shard, epoch)

    def _check_local(self, shard: int, epoch: int) -> None:
        if self.shards().get(shard) != epoch:
            raise LeaseLostError(f"shard {shard} of {self._count} is no longer driven by this "
                                 f"replica in epoch {epoch}; stop mutating its workloads")

    def _fresh(self, h: _Held, now: float) -> bool:
        return election.renew_is_fresh(h.renewed_at, self._s.renew_deadline_s, now)

    def _lease(self, shard: int) -> str:
        return sharding.shard_lease_name(self._s.name, shard, self._count)

    # ---- rounds ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Rounds until ``stop`` is set (the held shards are kept: call :meth:`release_all` to
        hand them over), each due a retry period after the last one began, not after it
        ended: rounds that an API server answers late follow each other at once, so their
        renews stay a retry period apart, as the single Lease's do."""
        period = self._s.retry_period_s
        while not stop.is_set():
            began = self._clock()
            try:
                self.round()
            except Exception:  # a bug: say so, and keep renewing what is held
                log.exception("a round of the shard keeper %s failed", self._s.identity)
            stop.wait(max(0.0, began + period - self._clock()))

    def round(self) -> Changes:
        """One round (see the module docstring); what it changed for the caller."""
        with self._rounds:
            if self._closed:
                return Changes()
            try:
                # no request may outlast the renew deadline: it could not save a shard
                with self._kube.requests_within(min(self._kube.settings.request_timeout_s,
                                                    self._s.renew_deadline_s)):
                    self._round()
                if self._outage:
                    log.info("the shard Leases of %s can be read and written again (after: %s)",
                             self._s.identity, self._outage)
                    self._outage = ""
            except GitrayError as e:  # a lost compare-and-swap never gets here
                if not self._outage:
                    log.warning("the shard Leases of %s: %s; the held shards are kept until "
                                "their renew deadline", self._s.identity, e)
                    self._outage = str(e) or type(e).__name__
            return self._tell()

    def release_all(self) -> Changes:
        """A planned hand-over (SIGTERM): the member Lease first (the others' fair shares
        grow at once), then every held shard Lease is released for the others to take in
        their next round. Later rounds do nothing. Errors are logged: a Lease not released
        lapses."""
        with self._rounds:
            self._closed = True
            try:
                self._kube.delete(_API, _KIND, self._s.namespace, self._member)
            except GitrayError as e:
                log.warning("could not delete the member Lease %s: %s", self._member, e)
            with self._lock:
                held, self._held = self._held, {}
            for shard, h in sorted(held.items()):
                self._release(shard, h)
            return self._tell()

    def _round(self) -> None:
        listed = self._read()
        now = self._clock()
        view = self._view(listed, now)
        self._check_held(listed)
        decision = sharding.decide(view, now)
        self.decision = decision
        release = self._drain(decision.release, now)
        self._renew(listed, skip=release)  # first: what is held matters most
        self._write_member(listed.get(self._member))
        if decision.phase is sharding.Phase.SWITCH and decision.count is not None:
            self._switch(listed.get(sharding.count_lease_name(self._s.name)), decision.count)
        for shard in release:
            self._release_held(shard, listed)
        base = view.count.epoch_base if view.count is not None else 0
        took = self._take(decision, listed, base) if decision.want else 0
        if self._waiting():
            if took:
                listed = self._read()
                now = self._clock()
                view = self._view(listed, now)
            if sharding.may_drive(view, now):
                self._let_drive()
        self._forget(view, listed, now)
        self._report_foreign(view, now)

    def _tell(self) -> Changes:
        """Expire what passed its renew deadline; the change since the caller was last told."""
        now = self._clock()
        with self._lock:
            for shard, h in sorted(self._held.items()):
                if not self._fresh(h, now):
                    log.warning("gave up shard %d of %d: no renew succeeded within the %g s "
                                "renew deadline", shard, self._count, self._s.renew_deadline_s)
                    del self._held[shard]
        drivable = self.shards()
        with self._lock:
            told, self._told = self._told, drivable
        result = shardview.changes(told, drivable)
        if result and self._on_changes is not None:
            self._on_changes(result)
        return result

    # ---- reading --------------------------------------------------------------------------

    def _read(self) -> dict[str, _Obj]:
        """The instance's Leases by name: one LIST by label, and the unsharded Lease by name
        while the LIST does not return it (created unlabelled by an older release)."""
        items, _ = self._kube.list(_API, _KIND, namespace=self._s.namespace,
                                   label_selector=shardview.lease_selector(self._s.name))
        listed = {str(leases.meta(o).get("name")): o for o in items}
        if self._s.name not in listed:
            legacy = self._kube.get_or_none(_API, _KIND, self._s.namespace, self._s.name)
            if legacy is not None:
                listed[self._s.name] = legacy
        return listed

    def _view(self, listed: Mapping[str, _Obj], now: float) -> sharding.View:
        """Note each record as seen ``now`` (taken after the read returned: a change seen then
        is never older than that, so a lapse is never judged early); the round's View."""
        seen = []
        for name, obj in listed.items():
            record = leases.record_of(obj)
            obs = self._observed.setdefault(name, election.Observation(self._s.lease_duration_s))
            obs.see(record, now)
            seen.append(leases.lease_seen(obj, obs.lapses_at()))
        for gone in set(self._observed) - set(listed):
            del self._observed[gone]
        self.synced = shardview.synced_at(self._s.name, self._count, seen)
        return shardview.view_of(self._s.name, self._s.identity, self._count, seen)

    def _check_held(self, listed: Mapping[str, _Obj]) -> None:
        with self._lock:
            held = list(self._held.items())
        for shard, h in held:
            live = listed.get(self._lease(shard))
            problem = ("it was deleted" if live is None
                       else election.lost_because(live, self._s.identity, h.epoch, h.uid))
            if problem:
                log.warning("lost shard %d of %d: %s", shard, self._count, problem)
                self._drop(shard)

    def _waiting(self) -> bool:
        with self._lock:
            return any(not h.driving for h in self._held.values())

    def _let_drive(self) -> None:
        with self._lock:
            for shard, h in self._held.items():
                if not h.driving:
                    self._held[shard] = replace(h, driving=True)

    def _drain(self, asked: tuple[int, ...], now: float) -> tuple[int, ...]:
        """The shards to release this round: those ``decide`` asks for stop being driven at
        once (the fence of their runs refuses from now on, the caller is told they are
        lost); each is released once ``busy`` says none of its runs is on a worker, or
        ``drain_max_s`` after. Once asked for, a shard is released (never driven again in
        this epoch), even if a later round no longer asks."""
        with self._lock:
            for shard in asked:
                h = self._held.get(shard)
                if h is not None and h.draining_since is None:
                    self._held[shard] = replace(h, draining_since=now)
            draining = {s: h.draining_since for s, h in self._held.items()
                        if h.draining_since is not None}
        release = []
        for shard, since in sorted(draining.items()):
            if not self.busy(shard):
                release.append(shard)
            elif now - since >= self._drain_max_s:
                log.warning("releasing shard %d of %d with a run still on a worker after %g s "
                            "(it stops at its next fenced write)", shard, self._count,
                            self._drain_max_s)
                release.append(shard)
            elif since == now:
                log.info("handing shard %d of %d over once its runs on workers stop at a step "
                         "boundary", shard, self._count)
        return tuple(release)

    def _drop(self, shard: int) -> None:
        with self._lock:
            self._held.pop(shard, None)

    # ---- writing --------------------------------------------------------------------------

    def _write(self, live: _Obj | None, name: str, record: LeaseRecord | None,
               annotations: Mapping[str, str] | None = None) -> _Obj | None:
        """Replace ``live`` with ``record`` (or create Lease ``name``; ``leases.body``); None
        when another process wrote it first (a lost compare-and-swap: the next round reads
        again) or it was deleted since the LIST."""
        body = leases.body(self._s, live, name, record, annotations)
        try:
            return create_lease(self._kube, body) if live is None else self._kube.replace(body)
        except ConflictError as e:
            log.debug("compare-and-swap lost: %s", e)
            return None
        except NotFoundError:
            return None

    def _write_member(self, live: _Obj | None) -> None:
        ours = live is not None and leases.record_of(live).holder == self._s.identity
        self._write(live, self._member, leases.next_record(self._s, live, renewing=ours),
                    {sharding.ANN_SHARDS: str(self._count)})

    def _renew(self, listed: Mapping[str, _Obj], skip: tuple[int, ...]) -> None:
        with self._lock:
            held = [(s, self._held[s].epoch, self._marks.get(s)) for s in sorted(self._held)
                    if s not in skip]
        for shard, epoch, mark in held:
            live = listed[self._lease(shard)]
            t0 = self._clock()  # a renew counts from before its request was sent
            synced = {shardview.ANN_SYNCED: mark[1]} if mark and mark[0] == epoch else None
            if self._write(live, self._lease(shard),
                           leases.next_record(self._s, live, renewing=True), synced):
                with self._lock:
                    if shard in self._held:
                        self._held[shard] = replace(self._held[shard], renewed_at=t0)

    def _switch(self, live: _Obj | None, count: sharding.ShardCount) -> None:
        name = sharding.count_lease_name(self._s.name)
        if self._write(live, name, None, count.to_annotations()) is not None:
            log.info("put %d shards in force (epoch base %d) as %s", count.shards,
                     count.epoch_base, self._s.identity)

    def _take(self, decision: sharding.Decision, listed: Mapping[str, _Obj], base: int) -> int:
        took = 0
        for shard in decision.take:
            if took == decision.want:
                break
            name = self._lease(shard)
            live = listed.get(name)
            t0 = self._clock()
            written = self._write(live, name, leases.next_record(self._s, live, renewing=False,
                                                                 epoch_base=base))
            if written is None:
                continue
            epoch = leases.record_of(written).transitions
            with self._lock:
                self._held[shard] = _Held(epoch, str(leases.meta(written).get("uid", "")), t0)
            log.info("took shard %d of %d (epoch %d) as %s", shard, self._count, epoch,
                     self._s.identity)
            took += 1
        return took

    def _release_held(self, shard: int, listed: Mapping[str, _Obj]) -> None:
        with self._lock:
            h = self._held.pop(shard, None)
        if h is not None:
            self._release(shard, h, listed.get(self._lease(shard)))

    def _release(self, shard: int, h: _Held, live: _Obj | None = None) -> None:
        """Write shard ``shard``'s Lease free, if it still names this replica in epoch
        ``h.epoch`` (``live``: as listed this round; else read now)."""
        name = self._lease(shard)
        try:
            live = live or self._kube.get_or_none(_API, _KIND, self._s.namespace, name)
            if live is None or election.lost_because(live, self._s.identity, h.epoch, h.uid):
                return
            if self._write(live, name, leases.released(live)) is not None:
                log.info("released shard %d of %d (epoch %d)", shard, self._count, h.epoch)
        except GitrayError as e:
            log.warning("could not release shard %d of %d (it lapses): %s", shard,
                        self._count, e)

    def _forget(self, view: sharding.View, listed: Mapping[str, _Obj], now: float) -> None:
        for identity in sharding.forgotten_members(view, now, self._forget_after_s):
            name = sharding.member_lease_name(self._s.name, identity)
            version = str(leases.meta(listed.get(name) or {}).get("resourceVersion") or "")
            with contextlib.suppress(ConflictError):  # (only the version read: one renewed
                if self._kube.delete(_API, _KIND, self._s.namespace, name,  # since then stays)
                                     resource_version=version or None):
                    log.info("deleted the member Lease %s of %s (lapsed)", name, identity)

    def _report_foreign(self, view: sharding.View, now: float) -> None:
        foreign = tuple(f"{c.shard}-of-{c.shards} held by {c.holder}"
                        for c in sharding.foreign_claims(view, now))
        if foreign and foreign != self._foreign:
            log.warning("Leases of another shard count are live while %d shards are in force: "
                        "%s (an older gitray, or a replica of the old count that woke from a "
                        "pause)", self._count, ", ".join(foreign))
        self._foreign = foreign


@dataclass(frozen=True)
class ShardFence:
    """A :class:`~gitray.engine.fence.Fence` of one shard's workloads: their run records and
    mutations go on only while the keeper drives ``shard`` in ``epoch``."""

    keeper: ShardKeeper
    shard: int
    epoch: int

    def ensure_held(self) -> None:
        self.keeper.ensure_held(self.shard, self.epoch)
