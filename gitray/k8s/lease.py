"""Leader election on a ``coordination.k8s.io/v1`` Lease, with an epoch and fencing. Does I/O.

Only the holder of the Lease executes plans (SPEC §4). The election follows client-go's rules
(:mod:`gitray.k8s.election`: record fields, 15 s / 10 s / 2 s durations, expiry judged on this
process's own monotonic clock by when it last saw the record change) and adds:

- an **epoch**: ``leaseTransitions`` when this process took the Lease; it grows on every change
  of holder, so work started under an old epoch is told apart from the current leader's;
- **fencing**: :meth:`Lease.ensure_held` raises ``LeaseLostError`` unless the last renew is
  younger than the renew deadline (checked locally first: a process woken from a pause refuses
  before touching the network) *and* a fresh read still names this process in the same epoch.

Every write is a ``replace`` carrying the ``resourceVersion`` read (compare-and-swap), so two
candidates never both believe they took the Lease; the holder renews by one write over the Lease
as it last wrote it, reading first only when that write fails (client-go's fast path). This
module keeps the holder's state and runs the renewing threads; the writes are
:mod:`gitray.k8s.leasewrite`.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gitray.core.errors import (
    GitrayError,
    LeaseBusyError,
    LeaseLostError,
    TransientError,
)
from gitray.core.waits import Clock, Deadline, poll
from gitray.k8s.client import Kube
from gitray.k8s.election import (
    LEASE_API_VERSION,
    LeaseRecord,
    LeaseSettings,
    Observation,
    lease_body,
    lost_because,
    new_lease_body,
    released_record,
    renew_is_fresh,
    renew_stall,
    retry_delay,
)
from gitray.k8s.leasewrite import create_lease, renew_in_place, wall_now, write_next

__all__ = ["LAPSE_MARGIN_S", "LEASE_API_VERSION", "Lease"]

_KIND = "Lease"
RENEW_ERROR_MARGIN_S = 0.5
LAPSE_MARGIN_S = 0.05  # try this long after the observed lapse (clock granularity)

log = logging.getLogger(__name__)


OnLost = Callable[[str], None]


class Lease:
    """Leader election for one process on one Lease (thread-safe).

    ``clock`` is the monotonic clock all expiry is judged by (``time.monotonic``); the
    renewing threads wait in real time. Give the Lease a :class:`Kube` whose request timeout
    is not much longer than the renew deadline: the deadline is enforced by a separate thread,
    but a renew stuck in a long request cannot help.
    """

    def __init__(self, kube: Kube, settings: LeaseSettings, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._settings = settings
        self._clock = clock
        self._rng = random.Random()
        self._lock = threading.Lock()  # guards the fields below
        # one API round-trip on the Lease at a time; re-entrant so that an on_lost callback
        # run from a renewing thread may call release()
        self._attempts = threading.RLock()
        self._observed = Observation(settings.lease_duration_s)
        self._leader = False
        self._term = 0  # bumped on every acquisition and step-down (detects races)
        self._epoch: int | None = None
        self._uid = ""
        self._last_renew = 0.0
        self._lost_reason = "it was never acquired"
        self._last_error = ""
        self._renew_started: float | None = None  # when the renew in flight began, if any
        self._written: dict[str, Any] | None = None  # the Lease as this process last wrote it
        self._on_lost: OnLost | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ---- state --------------------------------------------------------------------------

    @property
    def settings(self) -> LeaseSettings:
        return self._settings

    @property
    def where(self) -> str:
        return f"Lease {self._settings.namespace}/{self._settings.name}"

    @property
    def is_leader(self) -> bool:
        """Leader, and the last renew is within the renew deadline (no API call)."""
        now = self._clock()
        with self._lock:
            return self._leader and renew_is_fresh(self._last_renew,
                                                   self._settings.renew_deadline_s, now)

    @property
    def epoch(self) -> int:
        """``leaseTransitions`` when this process last took the Lease; ``LeaseLostError``
        if it never did."""
        with self._lock:
            epoch = self._epoch
        if epoch is None:
            raise LeaseLostError(f"{self.where} was never acquired by this process")
        return epoch

    @property
    def holder(self) -> str:
        """The holder this process last saw in the Lease ("" when free or not yet read)."""
        with self._lock:
            record = self._observed.record
        return record.holder if record else ""

    def lapses_in(self) -> float | None:
        """Seconds until the other holder this process last saw lapses, by this process's
        clock (0 when already lapsed); None when the Lease is free, ours or not yet read.

        Lets a standby try again right at the lapse instead of up to a retry period later."""
        with self._lock:
            record = self._observed.record
            if record is None or not record.holder or record.holder == self._settings.identity:
                return None
            return max(0.0, self._observed.lapses_at() - self._clock())

    def observe(self, record: LeaseRecord | None) -> None:
        """Take note of the record as read elsewhere (a watch event), now; None when the
        Lease does not exist. Only moves this process's view forward: it never writes."""
        now = self._clock()
        with self._lock:
            self._observed.see(record or LeaseRecord(), now)

    # ---- election -----------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or renew the Lease. True when this process now holds it.

        Transient API errors and lost compare-and-swaps count as a failed attempt; terminal
        errors (RBAC, a missing Lease kind) are raised."""
        with self._attempts:
            return self._attempt(renew_only=False)

    def acquire(self, timeout_s: float,
                on_wait: Callable[[str, float], None] | None = None) -> int:
        """Take the Lease, retrying every (jittered) retry period; returns the epoch.

        ``on_wait(holder, seconds_waited)`` is called after each failed attempt. After
        ``timeout_s`` (0: a single attempt) raises :class:`LeaseBusyError`."""
        deadline = Deadline(timeout_s, Clock(monotonic=self._clock))

        def timed_out() -> LeaseBusyError:
            waited, holder = deadline.elapsed(), self.holder
            if holder and holder != self._settings.identity:
                return LeaseBusyError(
                    f"{self.where} is held by {holder}; gave up after {waited:.0f} s "
                    f"(another gitray is applying: wait for it or raise the timeout)")
            return LeaseBusyError(f"could not take the {self.where} within {waited:.0f} s: "
                                  f"{self._last_error or 'lost every compare-and-swap'}")

        def wait(left: float) -> None:
            if on_wait is not None:
                on_wait(self.holder, deadline.elapsed())
            pause = retry_delay(self._settings.retry_period_s, self._rng)
            lapse = self.lapses_in()
            if lapse is not None:
                pause = min(pause, lapse + LAPSE_MARGIN_S)
            time.sleep(max(0.0, min(pause, left)))

        return poll(lambda: self.epoch if self.try_acquire_or_renew() else None, deadline,
                    wait=wait, timeout=timed_out)

    def start_renewing(self, on_lost: OnLost | None = None) -> None:
        """Renew every retry period in the background; when no renew succeeds within the
        renew deadline (or another process took the Lease), step down and call
        ``on_lost(reason)`` once."""
        with self._lock:
            if not self._leader:
                raise LeaseLostError(f"{self.where}: cannot renew, this process does not hold "
                                     f"it ({self._lost_reason})")
            self._on_lost = on_lost
            running = not self._stop.is_set() and any(t.is_alive() for t in self._threads)
        if running:
            return
        self.stop_renewing()  # threads of an earlier term, if any
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._renew_loop, name="gitray-lease-renew", daemon=True),
            threading.Thread(target=self._deadline_loop, name="gitray-lease-deadline",
                             daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop_renewing(self) -> None:
        """Stop the background renewing (the Lease stays held until it lapses)."""
        self._stop.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=self._settings.renew_deadline_s)
        self._threads = []

    def release(self) -> bool:
        """Hand the Lease over at once: stop renewing, clear the holder and shorten the
        duration (as client-go does). Returns whether the Lease was released; False when this
        process no longer held it or the API server could not be reached (it then lapses)."""
        self.stop_renewing()
        with self._attempts:
            with self._lock:
                if not self._leader:
                    return False
                epoch, uid = self._epoch, self._uid
            s = self._settings
            try:
                live = self._kube.get_or_none(LEASE_API_VERSION, _KIND, s.namespace, s.name)
                if live is None or lost_because(live, self._settings.identity, epoch, uid):
                    return False
                released = released_record(LeaseRecord.from_spec(live.get("spec")), wall_now())
                written = self._kube.replace(lease_body(live, released))
                with self._lock:
                    self._observed.see(LeaseRecord.from_spec(written.get("spec")), self._clock())
                return True
            except TransientError as e:
                log.warning("could not release the %s: %s", self.where, e)
                return False
            finally:
                with self._lock:
                    self._leader = False
                    self._term += 1
                    self._lost_reason = "it was released"

    # ---- fencing ------------------------------------------------------------------------

    def ensure_held(self) -> None:
        """Return only if this process still holds the Lease in the same epoch; otherwise
        raise :class:`LeaseLostError` (stepping down). Call it before every mutation.

        Local expiry is checked before any API call, and again after the read (which may
        itself have been slow)."""
        self._check_local()
        s = self._settings
        live = self._kube.get_or_none(LEASE_API_VERSION, _KIND, s.namespace, s.name)
        with self._lock:
            epoch, uid = self._epoch, self._uid
        problem = ("it was deleted" if live is None
                   else lost_because(live, self._settings.identity, epoch, uid))
        if problem:
            self._step_down(problem)
            raise LeaseLostError(f"{self.where} lost: {problem}; this process (epoch {epoch}) "
                                 f"stops mutating")
        self._check_local()

    # ---- internals ----------------------------------------------------------------------

    def _check_local(self) -> None:
        now = self._clock()
        with self._lock:
            if not self._leader:
                raise LeaseLostError(f"{self.where} is not held by this process "
                                     f"({self._lost_reason}); stop mutating")
            age = now - self._last_renew
            fresh = renew_is_fresh(self._last_renew, self._settings.renew_deadline_s, now)
        if not fresh:
            reason = (f"last renewed {age:.1f} s ago, beyond the "
                      f"{self._settings.renew_deadline_s:g} s renew deadline "
                      f"(was this process paused?)")
            self._step_down(reason)
            raise LeaseLostError(f"{self.where}: {reason}; refusing to act")

    def _step_down(self, reason: str) -> None:
        with self._lock:
            if not self._leader:
                return
            self._leader = False
            self._term += 1
            self._lost_reason = reason
            callback = self._on_lost
        self._stop.set()
        log.warning("stepped down from the %s: %s", self.where, reason)
        if callback is not None:
            try:
                callback(reason)
            except Exception:  # a broken callback must not kill the renewing thread silently
                log.exception("the on_lost callback of the %s failed", self.where)

    def _attempt(self, *, renew_only: bool) -> bool:
        s = self._settings
        t0 = self._clock()  # a renew counts from before its request was sent
        with self._lock:
            expired = self._leader and not renew_is_fresh(self._last_renew,
                                                          s.renew_deadline_s, t0)
        if expired:
            self._step_down("the renew deadline passed")
        with self._lock:
            renewing, term, epoch, uid = self._leader, self._term, self._epoch, self._uid
            # a renew's requests may take what is left of the renew deadline (client-go's
            # renew runs under a context of that deadline): a slow API server is not taken
            # for an unreachable one while the deadline still holds. They end a little
            # before it, so a step-down can say why the last renew failed; never sooner
            # than the client's own request timeout (short deadlines keep what they had).
            left = self._last_renew + s.renew_deadline_s - t0 - RENEW_ERROR_MARGIN_S
        if renew_only and not renewing:
            return False
        bounded = (self._kube.requests_within(max(left, self._kube.settings.request_timeout_s))
                   if renewing else contextlib.nullcontext())
        try:
            with bounded:
                return self._read_and_write(t0, renewing, renew_only, term, epoch, uid)
        except TransientError as e:  # includes a lost compare-and-swap (ConflictError)
            self._last_error = str(e)
            return False

    def _read_and_write(self, t0: float, renewing: bool, renew_only: bool, term: int,
                        epoch: int | None, uid: str) -> bool:
        if renewing and (renewed := self._renew_in_place(t0, term)) is not None:
            return renewed
        s = self._settings
        live = self._kube.get_or_none(LEASE_API_VERSION, _KIND, s.namespace, s.name)
        if live is None:
            if renewing:
                self._step_down("it was deleted")
            if renew_only:
                return False
            return self._create(t0)
        record = LeaseRecord.from_spec(live.get("spec"))
        with self._lock:
            self._observed.see(record, t0)
        if renewing:
            problem = lost_because(live, self._settings.identity, epoch, uid)
            if problem:
                self._step_down(problem)
                return False
        elif renew_only or not self._observed.claimable(s.identity, t0):
            return False
        written = write_next(self._kube, live, s.identity, renewing=renewing,
                             duration_s=s.lease_duration_s)
        return self._won(written, t0, renewing, term)

    def _renew_in_place(self, t0: float, term: int) -> bool | None:
        """Renew by one write over the Lease as last written here; None: read it first."""
        with self._lock:
            written = self._written
        replaced = written and renew_in_place(self._kube, written, self._settings.identity,
                                              self._settings.lease_duration_s)
        return self._won(replaced, t0, renewing=True, term=term) if replaced else None

    def _create(self, t0: float) -> bool:
        s = self._settings
        now = wall_now()
        record = LeaseRecord(holder=s.identity, duration_s=s.lease_duration_s,
                             acquire_time=now, renew_time=now, transitions=0)
        created = create_lease(self._kube, new_lease_body(s, record))
        return self._won(created, t0, renewing=False, term=-1)

    def _won(self, written: Mapping[str, Any], t0: float, renewing: bool, term: int) -> bool:
        record = LeaseRecord.from_spec(written.get("spec"))
        with self._lock:
            self._observed.see(record, t0)
            if renewing:
                if self._term != term:  # stepped down while the renew was in flight
                    return False
            else:
                self._term += 1
                self._leader = True
                self._epoch = record.transitions
                self._uid = str((written.get("metadata") or {}).get("uid", ""))
                self._lost_reason = ""
            self._last_renew = t0
            self._written = dict(written)
        self._last_error = ""
        if not renewing:
            log.info("took the %s as %s (epoch %d)", self.where, self._settings.identity,
                     record.transitions)
        return True

    def _renew_loop(self) -> None:
        # a renew is due a retry period after the last one began (not after it ended): renews
        # that an API server answers late follow each other at once
        period = self._settings.retry_period_s
        pause = period
        while not self._stop.wait(pause):
            began = time.monotonic()
            try:
                with self._attempts:
                    with self._lock:
                        self._renew_started = self._clock()
                    try:
                        renewed = self._attempt(renew_only=True)
                    finally:
                        with self._lock:
                            self._renew_started = None
                with self._lock:
                    if not renewed and not self._leader:
                        return
            except GitrayError as e:  # terminal (e.g. RBAC): keep trying until the deadline
                self._last_error = str(e)
                log.warning("renewing the %s failed: %s", self.where, e)
            pause = max(0.0, began + period - time.monotonic())

    def _deadline_loop(self) -> None:
        deadline = self._settings.renew_deadline_s
        while True:
            now = self._clock()
            with self._lock:
                if not self._leader:
                    return
                left = self._last_renew + deadline - now
                why = renew_stall(self._last_error, self._renew_started, now)
            if left <= 0:
                self._step_down(f"no renew succeeded within the {deadline:g} s renew deadline"
                                f" ({why})")
                return
            if self._stop.wait(min(left, self._settings.retry_period_s)):
                return
