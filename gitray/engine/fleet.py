"""The fleet controller: each workload's run on its own worker. I/O (threads).

``gitray sync`` drives it from its passes (below); ``gitray apply`` drives the same decision
and pool in the foreground, its waits holding their workers (``gitray.engine.foreground``).

A sync pass only plans and dispatches (``gitray.daemon.daemon``): for each workload with work
that no run holds yet, ``dispatchable`` says whether its turn has come, and the ``Fleet`` runs
it (``Executor.run_workload``: resumable, fenced, its own run record) on a bounded pool of
workers. The pass returns at once, so one workload's wait (a RayJob running for hours, a paused
upgrade) holds no other workload, no newer commit and no deletion.

Waves keep their meaning within one commit: a workload is dispatched only when no workload
before it (a lower wave; in the same wave, a supporting object before a Ray workload) still has
work, is in flight, or failed at that commit. A workload in flight is never dispatched again:
for the same spec it is left to run; for another spec its own supersede check (today's rules)
ends it if it may, and the next pass plans it again.

A run that reaches a wait parks there (``gitray.engine.parking``): its worker is released, its
record stays "running" at the wait step, and the workload stays in flight, ``Parked``. The
daemon's re-check rounds (``gitray.daemon.rechecks``) look at the parked workloads that are due
(``due``; each re-checked later and later: ``recheck_delay``) and release those whose wait may
have ended or whose timeout ran out; the next pass resumes a released run at its wait step, as
a new leader resumes an interrupted one, with the commit it was started for.

When a run ends, the daemon hears it (``on_end``): statuses, metrics, and a poll that plans the
next wave or gives the commit its verdict. On shutdown the runs stop at their next progress
point (``Interrupted``), their records left "running" for the next leader, and the parked ones
are handed over as they are (``hand_over``); each is logged as "sync of ... interrupted". A run
whose Lease is lost stops at its next progress point or fence (``LeaseLostError``) and is
forgotten; parked runs are forgotten by the re-check job (``gitray.daemon.rechecks``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, replace

from gitray.core.errors import GitrayError, Interrupted, LeaseLostError
from gitray.core.model import Kind, ObjectKey
from gitray.engine.executor import Outcome, Waiting, WorkloadOutcome
from gitray.plans.plan import Plan, WorkloadPlan

__all__ = ["Fleet", "Flight", "Parked", "checks_at", "dispatchable", "due", "order_of",
           "recheck_delay"]

log = logging.getLogger("gitray.sync")

_RAY_KINDS = frozenset(k.value for k in Kind)
RECHECK_FIRST_S, RECHECK_CAP_S = 2.0, 15.0  # a parked wait is re-checked after 2, 4, 8, 15 s


def order_of(w: WorkloadPlan) -> tuple[int, int]:
    """Where ``w`` stands in its commit: its wave, then supporting objects before Ray
    workloads (as ``Executor.run_plan`` runs a wave)."""
    return (w.wave, 1 if w.key.kind in _RAY_KINDS else 0)


@dataclass(frozen=True)
class Flight:
    """A run in flight: the commit and spec it runs for, where it stands."""

    sha: str
    desired_hash: str
    wave: int
    started: float  # monotonic
    trigger: str = "commit"  # of the pass that dispatched it
    step: str = ""  # "3/6 wait-cluster-ready svc-1a2b3" ("" before its first step)
    step_started: float = 0.0  # monotonic
    checks: int = 0  # how often its wait was checked and parked again
    parked_at: str = ""  # the id of the step it last parked at


@dataclass(frozen=True)
class Parked:
    """A run waiting parked at a wait step: no worker holds it."""

    flight: Flight
    waiting: Waiting
    due: float  # monotonic: when it is re-checked next
    deadline: float | None  # monotonic: when the wait's timeout runs out (None: no timeout)
    released: bool = False  # its wait may have ended: the next pass resumes its run


def recheck_delay(checks: int, left: float | None) -> float:
    """How long after its ``checks``-th check a parked wait is checked again: doubling from
    ``RECHECK_FIRST_S`` up to ``RECHECK_CAP_S``, never past its deadline (``left`` seconds
    of its timeout). Pure."""
    delay = min(RECHECK_FIRST_S * 2.0 ** min(max(checks, 0), 16), RECHECK_CAP_S)
    return delay if left is None else max(0.0, min(delay, left))


def checks_at(flight: Flight, step_id: str) -> int:
    """How often the wait at ``step_id`` was checked, as the run of ``flight`` parks there:
    once more than its flight says when it parked at that step before (resumed there, checked
    by its run, parked again: the waits a LIST does not settle are counted so, the others
    also by each round that finds them not settled), 0 at a new wait step (its backoff starts
    over). Pure."""
    return flight.checks + 1 if flight.parked_at == step_id else 0


def due(parked: Mapping[ObjectKey, Parked], now: float) -> list[ObjectKey]:
    """The parked workloads to re-check at ``now`` (monotonic), in order. Pure."""
    return sorted(k for k, p in parked.items() if not p.released and now >= p.due)


def dispatchable(plan: Plan, in_flight: Collection[ObjectKey],
                 failed: Collection[ObjectKey],
                 resume: Collection[ObjectKey] = ()) -> list[WorkloadPlan]:
    """The workloads of ``plan`` to start now. Pure.

    A workload has work when it has steps or an interrupted run to resume (``resume``). One
    that is in flight is never started again (whatever spec its run is for). One that has work
    starts when nothing before it (``order_of``) in this plan still has work, is in flight, or
    failed at this commit (``failed``: left out of the plan by ``skip_failed``)."""
    def has_work(w: WorkloadPlan) -> bool:
        return bool(w.steps) or w.key in resume

    blockers = [order_of(w) for w in plan.workloads
                if has_work(w) or w.key in in_flight or w.key in failed]
    first = min(blockers, default=None)
    return [w for w in plan.workloads
            if has_work(w) and w.key not in in_flight and w.key not in failed
            and first is not None and order_of(w) <= first]


Run = Callable[[], WorkloadOutcome]
# (workload, its flight, its outcome or None when it stopped without one) -> None
OnEnd = Callable[[ObjectKey, Flight, WorkloadOutcome | None], None]


class Fleet:
    """The runs in flight, on a bounded pool of workers."""

    def __init__(self, workers: int, on_end: OnEnd,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.workers = max(1, workers)
        self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                        thread_name_prefix="gitray-run")
        self._on_end = on_end
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._flights: dict[ObjectKey, Flight] = {}
        self._futures: dict[ObjectKey, Future[None]] = {}
        self._parked: dict[ObjectKey, Parked] = {}
        self._stopping = threading.Event()  # runs not started yet never start

    def in_flight(self) -> dict[ObjectKey, Flight]:
        """The runs on a worker and those parked (but released ones: a pass resumes them)."""
        with self._lock:
            return {**{k: p.flight for k, p in self._parked.items() if not p.released},
                    **self._flights}

    def on_workers(self) -> list[ObjectKey]:
        """The workloads whose runs are on a worker (or queued for one): between step
        boundaries, unlike parked runs."""
        with self._lock:
            return list(self._flights)

    def flights(self) -> list[Flight]:
        """Every run not ended: on a worker, parked, or released for the next pass."""
        with self._lock:
            return [*self._flights.values(), *(p.flight for p in self._parked.values())]

    def parked(self) -> dict[ObjectKey, Parked]:
        with self._lock:
            return dict(self._parked)

    def released(self) -> dict[ObjectKey, Flight]:
        """The parked runs a pass is to resume (their flights: the commit each is for)."""
        with self._lock:
            return {k: p.flight for k, p in self._parked.items() if p.released}

    def rechecked(self, release: Iterable[ObjectKey], later: Iterable[ObjectKey]) -> None:
        """A re-check round's result: ``release`` for the next pass, ``later`` checked again
        later (backoff)."""
        now = self._monotonic()
        with self._lock:
            for key in release:
                if key in self._parked:
                    self._parked[key] = replace(self._parked[key], released=True)
            for key in later:
                p = self._parked.get(key)
                if p is not None and not p.released:
                    f = replace(p.flight, checks=p.flight.checks + 1)
                    left = None if p.deadline is None else p.deadline - now
                    self._parked[key] = replace(p, flight=f,
                                                due=now + recheck_delay(f.checks, left))

    def hand_over(self) -> list[ObjectKey]:
        """Shutting down: the parked runs (waiting, or released for a pass that will not come)
        are left to the next leader, their records "running" at their wait step. Each is said
        as a run stopped on its worker is ("sync of ... interrupted"), and forgotten."""
        with self._lock:
            parked, self._parked = self._parked, {}
        for key, p in sorted(parked.items()):
            _interrupted(p.flight, key)
        return sorted(parked)

    def forget(self, keys: Iterable[ObjectKey]) -> None:
        """Parked runs this replica no longer resumes (the Lease lost; a record gone)."""
        with self._lock:
            for key in keys:
                self._parked.pop(key, None)

    def dispatch(self, wp: WorkloadPlan, sha: str, trigger: str, run: Run) -> bool:
        """Start ``run`` for ``wp`` at ``sha`` on a worker (False: one is in flight, or the
        fleet is shut down). A released parked run goes on with its own flight (its commit and
        trigger)."""
        with self._lock:
            parked = self._parked.get(wp.key)
            if wp.key in self._flights or (parked is not None and not parked.released):
                return False
            if parked is not None:
                flight = self._parked.pop(wp.key).flight
            else:
                flight = Flight(sha, wp.desired_hash, wp.wave, self._monotonic(), trigger)
            self._flights[wp.key] = flight  # (first: a Ctrl-C may land as the worker starts)
            try:
                self._futures[wp.key] = self._pool.submit(self._run, wp.key, flight, run)
            except RuntimeError:  # shut down (a pass left behind by the hand-over): no run
                del self._flights[wp.key]
                return False
            return True

    def stepped(self, key: ObjectKey, step: str) -> bool:
        """The run of ``key`` started a step (its reporter says so); False when it is the
        step it was at (a parked wait resumed: said already)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is None or flight.step == step:
                return flight is None
            self._flights[key] = replace(flight, step=step, step_started=self._monotonic())
            return True

    def detail(self) -> list[dict[str, object]]:
        """The runs in flight, for /readyz: workload, commit, step, seconds in the step."""
        now = self._monotonic()
        parked = self.parked()
        return [{"workload": str(key), "revision": f.sha[:12], "step": f.step or "-",
                 "secondsInStep": round(now - (f.step_started or f.started), 1),
                 "seconds": round(now - f.started, 1),
                 "state": "waiting" if key in parked else "running",
                 **({"checks": f.checks, "nextCheckInSeconds": round(
                     max(0.0, parked[key].due - now), 1)} if key in parked else {})}
                for key, f in sorted(self.in_flight().items())]

    def _park(self, key: ObjectKey, flight: Flight, waiting: Waiting) -> bool:
        """Park the run of ``key``; False when shutting down (not parked: handed over)."""
        now = self._monotonic()
        deadline = None if waiting.left is None else now + waiting.left
        flight = replace(flight, checks=checks_at(flight, waiting.step.id),
                         parked_at=waiting.step.id)
        with self._lock:  # (``stop`` takes it too: a run parks before it, or is handed over)
            if self._stopping.is_set():
                return False
            self._parked[key] = Parked(flight, waiting,
                                       now + recheck_delay(flight.checks, waiting.left),
                                       deadline)
        log.log(logging.INFO if not flight.checks else logging.DEBUG,
                "%s waits at %s (no worker held): %s", key, flight.step or "its step",
                waiting.detail)
        return True

    def wait(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for the runs in flight to end; True when they did."""
        with self._lock:
            futures = list(self._futures.values())
        _, running = wait_futures(futures, timeout=timeout)
        return not running

    def stop(self) -> None:
        """No run starts or parks from now on (the runs going on stop at their progress
        points)."""
        with self._lock:
            self._stopping.set()

    def shutdown(self) -> None:
        self.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, key: ObjectKey, flight: Flight, run: Run) -> None:
        outcome: WorkloadOutcome | None = None
        interrupted = False
        try:
            if self._stopping.is_set():
                raise Interrupted("shutting down")
            outcome = run()
        except Interrupted:
            interrupted = True  # (said below, with the step it stopped at)
        except LeaseLostError as e:
            log.warning("sync of %s stopped: %s: %s (the next leader resumes it)",
                        flight.sha[:7], key, e)
        except GitrayError as e:
            log.error("sync of %s failed: %s: %s", flight.sha[:7], key, e)
        except Exception:  # a bug must not leave the workload "in flight" for good
            log.exception("run of %s crashed", key)
        finally:
            with self._lock:
                flight = self._flights.pop(key, flight)
                self._futures.pop(key, None)
        if interrupted:
            _interrupted(flight, key)
        if outcome is not None and outcome.outcome is Outcome.WAITING:
            if outcome.waiting is None or not self._park(key, flight, outcome.waiting):
                _interrupted(flight, key)  # its record stays "running" for the next leader
            return
        try:
            self._on_end(key, flight, outcome)
        except Exception:
            log.exception("reporting the end of the run of %s failed", key)


def _interrupted(flight: Flight, key: ObjectKey) -> None:
    """A run this replica leaves to the next leader (shutting down), at the step it was at."""
    log.info("sync of %s interrupted: the next leader resumes %s%s", flight.sha[:7], key,
             f" at {flight.step}" if flight.step else "")
