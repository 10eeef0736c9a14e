"""Keeping and taking the Lease for ``gitray sync``. I/O (through the Lease).

Leadership is kept by the Lease's own threads; this contends for it: an attempt every retry
period (the scheduler's ``lease`` job), one right when the holder seen lapses if that comes
before the next regular attempt, and one at once when the Lease's watch sees it released. A
new leader starts renewing and polls Git at once (``on_leader``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.base import BaseScheduler

from gitray.core.errors import GitrayError
from gitray.daemon.metrics import Metrics
from gitray.k8s.election import LeaseRecord
from gitray.k8s.lease import LAPSE_MARGIN_S, Lease

__all__ = ["Leadership"]

log = logging.getLogger("gitray.sync")  # the `gitray sync` logger (log pipelines match it)


class Leadership:
    def __init__(self, lease: Lease, scheduler: BaseScheduler, retry_period_s: float,
                 metrics: Metrics, stopping: threading.Event, on_leader: Callable[[], None],
                 on_api_problem: Callable[[GitrayError], None]) -> None:
        self.lease = lease
        self._scheduler = scheduler
        self._retry_period_s = retry_period_s
        self._metrics = metrics
        self._stopping = stopping
        self._on_leader = on_leader
        self._on_api_problem = on_api_problem
        self._lock = threading.Lock()  # one election attempt at a time

    def attempt(self) -> None:
        """One attempt (the scheduler's ticks and the Lease watch's events)."""
        with self._lock:
            self._try()

    def changed(self, record: LeaseRecord | None) -> None:
        """A watch event on the Lease (its thread): note it; a standby that sees the Lease free
        tries at once, instead of on its next retry tick."""
        self.lease.observe(record)
        if self._stopping.is_set() or self.lease.is_leader:
            return
        if record is None or not record.holder:
            log.info("the Lease is free: trying to take it now")
            self.attempt()
        else:
            self._attempt_at_lapse()

    def _try(self) -> None:
        if self._stopping.is_set() or self.lease.is_leader:
            self._metrics.leader.set(1 if self.lease.is_leader else 0)
            return
        try:
            if self.lease.try_acquire_or_renew():
                log.info("became leader (epoch %s)", self.lease.epoch)
                self.lease.start_renewing(on_lost=self._lost)
                self._metrics.leader.set(1)
                self._on_leader()
                return
        except GitrayError as e:
            self._on_api_problem(e)
            return
        self._attempt_at_lapse()

    def _attempt_at_lapse(self) -> None:
        """When the holder seen lapses before the next regular attempt, try right then (the
        take-over is bounded by lease duration + one retry period, not two)."""
        lapse = self.lease.lapses_in()
        if lapse is not None and lapse + LAPSE_MARGIN_S < self._retry_period_s:
            with contextlib.suppress(SchedulerNotRunningError):
                self._scheduler.add_job(
                    self.attempt, "date", id="lease-at-lapse", replace_existing=True,
                    run_date=datetime.now(UTC) + timedelta(seconds=lapse + LAPSE_MARGIN_S))

    def _lost(self, reason: str) -> None:
        log.warning("lost the Lease: %s", reason)
        self._metrics.leader.set(0)
