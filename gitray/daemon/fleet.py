"""``gitray sync`` as a fleet controller: each workload's run on its own worker. I/O (threads).

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

When a run ends, the daemon hears it (``on_end``): statuses, metrics, and a poll that plans the
next wave or gives the commit its verdict. On shutdown the runs stop at their next progress
point (``Interrupted``), their records left "running" for the next leader; a run whose Lease is
lost stops at its next progress point or fence (``LeaseLostError``) and is forgotten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, replace

from gitray.core.errors import GitrayError, Interrupted, LeaseLostError
from gitray.core.model import Kind, ObjectKey
from gitray.engine.executor import WorkloadOutcome
from gitray.plans.plan import Plan, WorkloadPlan

__all__ = ["Fleet", "Flight", "dispatchable", "order_of"]

log = logging.getLogger("gitray.sync")

_RAY_KINDS = frozenset(k.value for k in Kind)


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
        self._stopping = threading.Event()  # runs not started yet never start

    def in_flight(self) -> dict[ObjectKey, Flight]:
        with self._lock:
            return dict(self._flights)

    def dispatch(self, wp: WorkloadPlan, sha: str, trigger: str, run: Run) -> bool:
        """Start ``run`` for ``wp`` at ``sha`` on a worker (False: one is in flight)."""
        with self._lock:
            if wp.key in self._flights:
                return False
            flight = Flight(sha, wp.desired_hash, wp.wave, self._monotonic(), trigger)
            self._flights[wp.key] = flight
            self._futures[wp.key] = self._pool.submit(self._run, wp.key, flight, run)
            return True

    def stepped(self, key: ObjectKey, step: str) -> None:
        """The run of ``key`` started a step (its reporter says so)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                self._flights[key] = replace(flight, step=step, step_started=self._monotonic())

    def detail(self) -> list[dict[str, object]]:
        """The runs in flight, for /readyz: workload, commit, step, seconds in the step."""
        now = self._monotonic()
        return [{"workload": str(key), "revision": f.sha[:12], "step": f.step or "-",
                 "secondsInStep": round(now - (f.step_started or f.started), 1),
                 "seconds": round(now - f.started, 1)}
                for key, f in sorted(self.in_flight().items())]

    def wait(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for the runs in flight to end; True when they did."""
        with self._lock:
            futures = list(self._futures.values())
        _, running = wait_futures(futures, timeout=timeout)
        return not running

    def stop(self) -> None:
        """No run starts from now on (the runs going on stop at their progress points)."""
        self._stopping.set()

    def shutdown(self) -> None:
        self.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, key: ObjectKey, flight: Flight, run: Run) -> None:
        outcome: WorkloadOutcome | None = None
        try:
            if self._stopping.is_set():
                raise Interrupted("shutting down")
            outcome = run()
        except Interrupted:
            log.info("sync of %s interrupted: the next leader resumes %s", flight.sha[:7], key)
        except LeaseLostError as e:
            log.warning("sync of %s stopped: %s: %s (the next leader resumes it)",
                        flight.sha[:7], key, e)
        except GitrayError as e:
            log.error("sync of %s failed: %s: %s", flight.sha[:7], key, e)
        except Exception:  # a bug must not leave the workload "in flight" for good
            log.exception("run of %s crashed", key)
        finally:
            with self._lock:
                self._flights.pop(key, None)
                self._futures.pop(key, None)
        try:
            self._on_end(key, flight, outcome)
        except Exception:
            log.exception("reporting the end of the run of %s failed", key)
