"""``gitray sync``: follow a branch, apply each new commit, heal drift, clean up. I/O.

Every replica serves HTTP (/healthz, /readyz, /metrics, /hooks/git) and contends for the
Lease; only the holder fetches and executes. apscheduler runs three jobs:

- poll (every ``interval``): git fetch; a new commit, a due retry or a due drift check starts
  a sync pass;
- deletions (every ``deletion_interval``): deletes old RayService clusters whose persisted
  deadline passed;
- leadership is kept by the Lease's own threads (acquire attempts every retry period).

A sync pass never prunes on an unreadable or invalid revision (nothing is applied at all), and
a workload whose run failed at a revision is not retried at that revision (a later commit
retries). SIGTERM interrupts the current step at its next progress point, leaves the run
record "running" for the next leader, and releases the Lease at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler

from gitray.errors import (
    GitrayError,
    Interrupted,
    SourceError,
    TransientError,
    ValidationError,
)
from gitray.model import ANN_DELETE_AFTER, LiveState, ObjectKey
from gitray.plans.load import LoadMemo, Snapshot
from gitray.plans.plan import Plan, StepType, WorkloadPlan
from gitray.plans.rayservice import parse_deadline
from gitray.sync.actions import Actions
from gitray.sync.dashboard import DashboardMode, Resolver
from gitray.sync.events import EventRecorder
from gitray.sync.executor import Executor, Outcome, StepEvent, WorkloadOutcome
from gitray.sync.http import HttpEndpoints, Probes
from gitray.sync.kube import Kube, KubeSettings
from gitray.sync.lease import LAPSE_MARGIN_S, Lease, LeaseSettings, default_identity
from gitray.sync.metrics import Metrics
from gitray.sync.progress import ProgressStore, Record, RunState
from gitray.sync.run import Desired, desired_config, desired_from, live_plan, resumable
from gitray.sync.source import (
    fetch_branch,
    is_ancestor,
    read_snapshot,
    redact,
    verify_commit,
)
from gitray.sync.statuses import (
    CommitStatus,
    PublishCounts,
    State,
    StatusPublisher,
    context_for,
    make_publisher,
    step_description,
)

__all__ = ["Daemon", "DaemonSettings", "PostStatus"]

log = logging.getLogger("gitray.sync")

STOP_GRACE_S = 20.0  # within Kubernetes' default 30 s terminationGracePeriodSeconds

# (sha, workload or None for the overall context, state, description) -> None
PostStatus = Callable[[str, ObjectKey | None, str, str], None]


@dataclass(frozen=True)
class DaemonSettings:
    repo: str
    lease_namespace: str
    branch: str | None = None
    interval_s: float = 30.0
    drift_every: int = 10  # polls between drift checks (0: never)
    deletion_interval_s: float = 15.0
    lease_name: str = "gitray"
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    identity: str = field(default_factory=default_identity)
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    webhook_secret: bytes | None = None
    dashboard_mode: DashboardMode = DashboardMode.SERVICE
    ray_token: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    kube: KubeSettings = field(default_factory=KubeSettings)
    cache_dir: Path | None = None
    max_backoff_s: float = 300.0
    status_token: str | None = None  # for the Git host's status API (never logged)
    allowed_signers: Path | None = None  # when set, only commits signed by these keys apply


@dataclass
class _State:
    """What the daemon knows between jobs (guarded by Daemon._lock)."""

    fetched: str = ""  # newest commit seen on the branch
    synced: str = ""  # commit the cluster last fully converged to
    attempted: str = ""  # commit of the last pass (converged or not)
    refused: str = ""  # commit refused as invalid (not retried, status already posted)
    retry_at: float = 0.0  # monotonic time of a due retry (0: none)
    failures: int = 0  # consecutive failed passes (backoff)
    polls: int = 0
    next_deletion: float = 0.0  # wall time of the earliest deletion deadline (inf: none)
    git_problem: str = ""
    api_problem: str = ""
    ready: bool = False


class Daemon:
    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.statuses = StatusBridge(settings, self.metrics)
        self.post_status: PostStatus = self.statuses.post
        self.kube = Kube.connect(settings.kube)
        self.lease = Lease(Kube(self.kube.api_client, KubeSettings(request_timeout_s=5.0)),
                           LeaseSettings(namespace=settings.lease_namespace,
                                         name=settings.lease_name, identity=settings.identity,
                                         lease_duration_s=settings.lease_duration_s,
                                         renew_deadline_s=settings.renew_deadline_s,
                                         retry_period_s=settings.retry_period_s))
        self.events = EventRecorder(self.kube, settings.identity)
        self.state = _State()
        # passes re-read the same commit (drift, deletions, retries) and new commits change a
        # few files: keep the last commit's files and each file's validated result
        self._snapshot: Snapshot | None = None
        self._memo = LoadMemo()
        self._lock = threading.Lock()  # one sync pass at a time
        self._state_lock = threading.Lock()
        self._stopping = threading.Event()
        self.scheduler = BackgroundScheduler(timezone="UTC")
        self.http = HttpEndpoints(
            (settings.http_host, settings.http_port),
            Probes(healthy=self._healthy, ready=lambda: self.state.ready,
                   leader=lambda: self.lease.is_leader, detail=self._detail),
            self.metrics, self.trigger_poll, settings.webhook_secret)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self.http.start()
        self.scheduler.add_job(self._poll_job, "interval", seconds=self.settings.interval_s,
                               id="poll", max_instances=1, coalesce=True,
                               next_run_time=datetime.now(UTC))
        self.scheduler.add_job(self._deletion_job, "interval",
                               seconds=self.settings.deletion_interval_s, id="deletions",
                               max_instances=1, coalesce=True)
        self.scheduler.add_job(self._lease_job, "interval",
                               seconds=self.settings.retry_period_s, id="lease",
                               max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
        self.scheduler.start()
        self.state.ready = True
        log.info("gitray sync started", extra={"repo": redact(self.settings.repo),
                                               "identity": self.settings.identity,
                                               "http_port": self.http.port})

    def run_forever(self) -> int:
        """Run until SIGTERM/SIGINT, then hand over gracefully."""
        done = threading.Event()

        def stop(signum: int, _frame: object) -> None:
            log.info("signal %s: handing over", signal.Signals(signum).name)
            done.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.start()
        # Wake up regularly: a signal may be delivered to any thread, and CPython runs the
        # Python handler only when the main thread returns to the interpreter. An untimed
        # wait here could leave SIGTERM unhandled for good.
        while not done.wait(0.5):
            pass
        # Hand over within a bound: run records are durable and the next leader resumes, so
        # a shutdown stuck behind a slow request must not outlive the Pod's grace period.
        stopper = threading.Thread(target=self.stop, name="gitray-stop", daemon=True)
        stopper.start()
        stopper.join(STOP_GRACE_S)
        if stopper.is_alive():
            log.error("shutdown took longer than %.0f s; exiting anyway", STOP_GRACE_S)
            logging.shutdown()
            os._exit(1)
        return 0

    def stop(self) -> None:
        self._stopping.set()
        self.scheduler.shutdown(wait=False)
        with self._lock:  # the running pass stops at its next progress point
            pass
        self.lease.stop_renewing()
        if self.lease.is_leader:
            self.lease.release()
        self.metrics.leader.set(0)
        self.http.stop()
        self.kube.close()
        log.info("gitray sync stopped")

    def trigger_poll(self) -> None:
        """Poll now (webhook)."""
        job = self.scheduler.get_job("poll")
        if job is not None:
            job.modify(next_run_time=datetime.now(UTC))

    def _healthy(self) -> bool:
        return not self._stopping.is_set() and self.scheduler.running

    def _detail(self) -> dict[str, object]:
        s = self.state
        return {"synced": s.synced, "fetched": s.fetched, "git": s.git_problem or "ok",
                "api": s.api_problem or "ok"}

    # ---- jobs ---------------------------------------------------------------------------

    def _lease_job(self) -> None:
        if self._stopping.is_set() or self.lease.is_leader:
            self.metrics.leader.set(1 if self.lease.is_leader else 0)
            return
        try:
            if self.lease.try_acquire_or_renew():
                log.info("became leader (epoch %s)", self.lease.epoch)
                self.lease.start_renewing(on_lost=self._lost)
                self.metrics.leader.set(1)
                self.trigger_poll()
                return
        except GitrayError as e:
            self._api_problem(e)
            return
        # the holder seen lapses before the next regular attempt: try right then (the
        # take-over is bounded by lease duration + one retry period, not two)
        lapse = self.lease.lapses_in()
        if lapse is not None and lapse + LAPSE_MARGIN_S < self.settings.retry_period_s:
            with contextlib.suppress(SchedulerNotRunningError):
                self.scheduler.add_job(
                    self._lease_job, "date", id="lease-at-lapse", replace_existing=True,
                    run_date=datetime.now(UTC) + timedelta(seconds=lapse + LAPSE_MARGIN_S))

    def _lost(self, reason: str) -> None:
        log.warning("lost the Lease: %s", reason)
        self.metrics.leader.set(0)

    def _poll_job(self) -> None:
        if self._stopping.is_set() or not self.lease.is_leader:
            return
        self.statuses.flush()
        self.metrics.polls.inc()
        self.state.polls += 1
        started = time.monotonic()
        try:
            fetched = fetch_branch(self.settings.repo, self.settings.branch,
                                   cache_dir=self.settings.cache_dir)
        except GitrayError as e:
            self.metrics.git_errors.inc()
            if self.state.git_problem != str(e):
                log.error("git: %s (nothing is applied or pruned until it reads again)", e)
            self.state.git_problem = str(e)
            return
        finally:
            self.metrics.git_fetch.observe(time.monotonic() - started)
        if self.state.git_problem:
            log.info("git: reading again")
        self.state.git_problem = ""
        self.state.fetched = fetched.sha
        drift = bool(self.settings.drift_every) and \
            self.state.polls % self.settings.drift_every == 0
        retry = bool(self.state.retry_at) and time.monotonic() >= self.state.retry_at
        if fetched.sha == self.state.refused:
            return
        if fetched.sha != self.state.attempted:
            synced = self.state.synced
            if synced and not is_ancestor(fetched.cache, synced, fetched.sha):
                log.warning("the history of %s was rewritten: the synced commit %s is not an "
                            "ancestor of %s; syncing the new tip", fetched.branch, synced[:7],
                            fetched.sha[:7])
            self.sync(fetched.cache, fetched.sha, "commit")
        elif retry:
            self.sync(fetched.cache, fetched.sha, "retry")
        elif drift and fetched.sha == self.state.synced:
            self.sync(fetched.cache, fetched.sha, "drift")

    def _deletion_job(self) -> None:
        if self._stopping.is_set() or not self.lease.is_leader or not self.state.synced:
            return
        if time.time() < self.state.next_deletion:
            return  # no old cluster is due yet: no need to read the cluster
        cache = self.settings.cache_dir
        if cache is None:
            from gitray.sync.source import default_cache_dir

            cache = default_cache_dir(self.settings.repo)
        self.sync(cache, self.state.synced, "deletions")

    # ---- one pass -----------------------------------------------------------------------

    def sync(self, cache: Path, sha: str, trigger: str) -> list[WorkloadOutcome]:
        """Plan ``sha`` against the live cluster and execute it (under the Lease)."""
        with self._lock:
            if self._stopping.is_set():
                return []
            started = time.monotonic()
            try:
                outcomes = self._pass(cache, sha, trigger)
            except Interrupted:
                log.info("sync of %s interrupted: the next leader resumes it", sha[:7])
                return []
            except TransientError as e:
                self._api_problem(e)
                self._backoff()
                return []
            except GitrayError as e:
                log.error("sync of %s failed: %s", sha[:7], e)
                self.post_status(sha, None, "error", f"gitray could not sync: {e}")
                self._backoff()
                return []
            finally:
                self.metrics.sync_duration.labels(trigger).observe(time.monotonic() - started)
                self.metrics.last_sync_time.set(time.time())
            self.state.api_problem = ""
            return outcomes

    def _backoff(self) -> None:
        self.state.failures += 1
        delay = min(self.settings.interval_s * 2 ** self.state.failures,
                    self.settings.max_backoff_s)
        self.state.retry_at = time.monotonic() + delay
        log.info("will retry in %.0f s", delay)

    def _api_problem(self, e: GitrayError) -> None:
        self.metrics.api_errors.labels(type(e).__name__).inc()
        if self.state.api_problem != str(e):
            log.error("Kubernetes API: %s", e)
        self.state.api_problem = str(e)

    def _pass(self, cache: Path, sha: str, trigger: str) -> list[WorkloadOutcome]:
        if trigger != "deletions":  # a deletions pass runs the synced commit, not the newest
            self.state.attempted = sha
        if self._snapshot is None or self._snapshot.revision != sha:
            self._snapshot = read_snapshot(str(cache), sha)
        snapshot = self._snapshot
        if self.settings.allowed_signers is not None:
            try:
                signer = verify_commit(cache, sha, self.settings.allowed_signers)
            except SourceError as e:
                self.state.refused = sha
                self.metrics.invalid_revisions.inc()
                log.error("%s not applied: %s", sha[:7], e)
                self.post_status(sha, None, "failure", f"not applied: {e}")
                return []
            log.info("%s is signed by %s", sha[:7], signer)
        # Only a verified revision may choose where statuses (and the status token) go.
        self.statuses.configure(snapshot, cache)
        try:
            desired = desired_from(snapshot, self.settings.overrides, self._memo)
        except ValidationError as e:
            self.state.refused = sha
            self.metrics.invalid_revisions.inc()
            for diagnostic in e.diagnostics:
                log.error("%s: %s", sha[:7], diagnostic)
            first = str(e.diagnostics[0]) if e.diagnostics else ""
            self.post_status(sha, None, "failure", f"invalid revision, nothing applied: {first}")
            return []
        if trigger == "commit":  # once per revision, not on every drift or deletion pass
            for warning in desired.result.warnings:
                log.warning("%s: %s: warning: %s", sha[:7], warning.location, warning.message)
        plan, live = live_plan(self.kube, desired)
        self.state.next_deletion = _earliest_deadline(live)
        progress = ProgressStore(self.kube, self.settings.lease_namespace,
                                 desired.config.instance, self.lease)
        records = progress.list()
        selected = self._select(plan, records, trigger)
        failed_before = [w.key for w, s in zip(plan.workloads, selected.workloads, strict=True)
                         if w.steps and not s.steps]
        plan = selected
        if trigger == "deletions":
            plan = _only_deletions(plan)
        resume = resumable(plan, records)
        if not any(w.steps for w in plan.workloads) and not resume:
            # "nothing to do" because a workload already failed at this revision is not "in
            # sync": its failure status stands (e.g. for a new leader polling that commit)
            if trigger in {"commit", "retry"} and not failed_before:
                self._converged(sha, desired, plan)
            return []
        log.info("sync %s (%s): %s", sha[:7], trigger,
                 ", ".join(f"{w.key} {len(w.steps)} steps" for w in plan.workloads if w.steps))
        if trigger in {"commit", "retry"}:
            changing = sum(1 for w in plan.workloads if w.steps)
            self.post_status(sha, None, "pending", f"applying: {changing} workload(s) to change")
        executor = Executor(Actions(self.kube, Resolver(self.kube, self.settings.dashboard_mode,
                                                        self.settings.ray_token)),
                            self.lease, desired.config, progress,
                            self._reporter(sha))
        outcomes = executor.run_plan(plan, resume=resume)
        self.state.next_deletion = 0.0  # steps may have scheduled or done deletions: re-read
        self._report(sha, outcomes, desired, plan)
        return outcomes

    def _report(self, sha: str, outcomes: list[WorkloadOutcome], desired: Desired,
                plan: Plan) -> None:
        """Statuses and metrics for the outcomes of one pass."""
        failed = [o for o in outcomes if o.outcome is not Outcome.SUCCEEDED]
        for o in outcomes:
            if o.outcome is Outcome.SUCCEEDED:
                self.post_status(sha, o.key, "success", f"converged at {sha[:7]}")
            else:
                self.post_status(sha, o.key, "failure", o.reason or o.outcome.value)
        for outcome in Outcome:
            self.metrics.workloads.labels(outcome.value).set(
                sum(1 for o in outcomes if o.outcome is outcome))
        if failed:
            self.post_status(sha, None, "failure",
                             f"{len(failed)} of {len(outcomes)} workload(s) failed: "
                             f"{failed[0].key.kind} {failed[0].key.name}: {failed[0].reason}")
            self.state.retry_at = 0.0
        else:
            self._converged(sha, desired, plan)

    def _converged(self, sha: str, desired: Desired, plan: Plan) -> None:
        with self._state_lock:
            first = self.state.synced != sha
            self.state.synced = sha
            self.state.failures = 0
            self.state.retry_at = 0.0
        self.metrics.synced(sha)
        if first:
            for w in desired.workloads:
                self.post_status(sha, w.key, "success", f"in sync at {sha[:7]}")
            self.post_status(sha, None, "success", f"{len(desired.workloads)} workload(s) in "
                             f"sync at {sha[:7]}")

    def _select(self, plan: Plan, records: list[Record], trigger: str) -> Plan:
        """Leave out workloads whose run already failed for this spec at this revision."""
        failed = {r.key: r for r in records
                  if r.state is RunState.FAILED and r.revision == plan.revision}
        keep: list[WorkloadPlan] = []
        for w in plan.workloads:
            record = failed.get(w.key)
            if record is not None and record.desired_hash == w.desired_hash and w.steps:
                if trigger == "commit":
                    log.info("%s failed at %s before; a new commit retries it", w.key,
                             plan.revision[:7])
                keep.append(replace(w, steps=()))
            else:
                keep.append(w)
        return replace(plan, workloads=tuple(keep))

    def _reporter(self, sha: str) -> Callable[[StepEvent], None]:
        def report(event: StepEvent) -> None:
            if self._stopping.is_set():
                raise Interrupted("shutting down")
            step = event.step
            if event.phase == "start":
                self.post_status(sha, event.key, "pending", step_description(
                    event.index, event.total, f"{step.type.value} {step.target}"))
                log.info("%s step %d/%d %s %s", event.key, event.index, event.total,
                         step.type.value, step.target)
            elif event.phase in {"done", "failed"}:
                result = "ok" if event.phase == "done" else "failed"
                self.metrics.steps.labels(step.type.value, result).inc()
                log.log(logging.INFO if result == "ok" else logging.ERROR, "%s step %d/%d %s: %s",
                        event.key, event.index, event.total, step.type.value, event.detail)
                if result == "ok" and step.type.mutates:
                    self.events.record(event.key, step, event.detail)
            elif event.phase == "progress":
                log.debug("%s step %d/%d: %s", event.key, event.index, event.total,
                          event.detail)
        return report


class StatusBridge:
    """Posts the daemon's statuses through the provider the revision's settings name."""

    def __init__(self, settings: DaemonSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.publisher: StatusPublisher | None = None
        self.prefix = "gitray"
        self._chosen: tuple[object, ...] = ()
        self._seen = PublishCounts()

    def configure(self, snapshot: Snapshot, cache: Path) -> None:
        """Pick the provider from gitray.yaml (+ overrides); keep it while they don't change.
        A revision whose settings are invalid keeps the previous provider."""
        try:
            config = desired_config(snapshot, self.settings.overrides)
        except GitrayError:
            return
        status = config.status
        chosen = (status.provider, status.url, status.repository, str(cache))
        self.prefix = status.context_prefix
        if chosen == self._chosen:
            return
        try:
            self.publisher = make_publisher(status, token=self.settings.status_token,
                                            repo_dir=cache, remote=self.settings.repo)
            self._chosen = chosen
            log.info("commit statuses: %s", status.provider.value)
        except GitrayError as e:
            log.error("commit statuses off: %s", e)

    def post(self, sha: str, key: ObjectKey | None, state: str, description: str) -> None:
        if self.publisher is None:
            return
        self.publisher.publish(CommitStatus(sha, context_for(self.prefix, key), State(state),
                                            description))
        self._count()

    def flush(self) -> None:
        if self.publisher is not None:
            self.publisher.flush()
            self._count()

    def _count(self) -> None:
        assert self.publisher is not None
        now = self.publisher.counts()
        for result in ("posted", "deduplicated", "retried", "failed"):
            delta = getattr(now, result) - getattr(self._seen, result)
            if delta > 0:
                self.metrics.status_posts.labels(result).inc(delta)
        self._seen = now


def _earliest_deadline(live: LiveState) -> float:
    """Wall time of the earliest persisted deletion deadline, inf when there is none."""
    deadlines = [parse_deadline(o.annotations.get(ANN_DELETE_AFTER, ""))
                 for o in live.objects if ANN_DELETE_AFTER in o.annotations]
    times = [d.timestamp() if d is not None else 0.0 for d in deadlines]
    return min(times, default=math.inf)


def _only_deletions(plan: Plan) -> Plan:
    """Keep only workloads whose steps are all deletions of retired clusters."""
    keep = tuple(w if w.steps and all(s.type is StepType.DELETE_CLUSTER for s in w.steps)
                 else replace(w, steps=()) for w in plan.workloads)
    return replace(plan, workloads=keep)
