"""``gitray sync``: follow a branch, apply each new commit, heal drift, clean up. I/O.

Every replica serves HTTP (/healthz, /readyz, /metrics, /hooks/git) and contends for the
Lease (``gitray.daemon.owners``, ``gitray.daemon.leadership``; a standby watches it and keeps
warm: ``gitray.daemon.standby``); only the holder fetches and executes. apscheduler runs the poll
job (every ``interval``: git fetch; a new commit, a due retry, a changed control, a run that
ended or a due drift check starts a pass) and the deletions job (every ``deletion_interval``).

A pass only plans and dispatches, one at a time: each workload's run goes on on its own worker
(``gitray.engine.fleet``, ``gitray.daemon.dispatch``), so a long wait holds no other workload,
commit or deletion; a wait parks, holding no worker, and is released for the next pass to resume
at its wait step by a watch of what it waits on (``gitray.daemon.waitwatch``) or the rechecks
job (every second: due waits only, one LIST per kind and namespace, ``gitray.daemon.rechecks``);
a commit gets its verdict from its workloads' runs (``gitray.daemon.verdicts``). A pass never
prunes on an invalid revision; a workload whose run failed at a revision is retried there only
by ``gitray retry``; freeze windows and suspensions hold workloads (``gitray.daemon.holds``). A
newer commit wanting another spec for a RayService whose upgrade waits (no traffic moved yet)
ends that run (``gitray.daemon.newer``). SIGTERM interrupts the runs, leaves their records
"running" for the next leader, and releases the Lease.

With ``--shards S`` (S > 1) the Lease is one per shard (``gitray.daemon.owners``): a replica
drives the workloads of the shards it holds (``gitray.engine.ownership``), each shard's runs
fenced by its own Lease and epoch, and leaves the others to their holders.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler

from gitray.core.credentials import redact_url
from gitray.core.errors import (
    GitrayError,
    Interrupted,
    LeaseLostError,
    SourceError,
    TransientError,
    ValidationError,
)
from gitray.core.model import ObjectKey
from gitray.core.snapshot import Snapshot
from gitray.daemon.dispatch import Dispatcher
from gitray.daemon.healthwatch import HealthJob, HealthWatch
from gitray.daemon.holds import Holds
from gitray.daemon.http import HttpEndpoints, Probes
from gitray.daemon.lifecycle import STOP_GRACE_S, run_until_signalled
from gitray.daemon.metrics import Metrics
from gitray.daemon.newer import NewerCommit, Source
from gitray.daemon.owners import owned_desired, owner_for
from gitray.daemon.rechecks import Rechecks
from gitray.daemon.reporting import StatusBridge, step_reporter
from gitray.daemon.settings import DaemonSettings
from gitray.daemon.signals import Signals
from gitray.daemon.standby import Revisions, Standby
from gitray.daemon.state import PassLock, StateBox, poll_trigger
from gitray.daemon.verdicts import VERDICT_TRIGGERS, Verdicts
from gitray.daemon.waitwatch import WaitWatches
from gitray.engine.apply import Desired, desired_from, live_plan, resumable
from gitray.engine.controls import retry_wanted
from gitray.engine.executor import Executor, StepEvent, SupersedeCheck, WorkloadOutcome
from gitray.engine.fleet import Fleet, Flight
from gitray.engine.health import health_of
from gitray.engine.ownership import Ownership, owned, posts_overall, shard_labels
from gitray.engine.record import RunState
from gitray.engine.shards import shard_label
from gitray.engine.wiring import Wiring
from gitray.git.signing import is_ancestor, verify_commit
from gitray.git.source import default_cache_dir, fetch_branch
from gitray.k8s.client import Kube
from gitray.k8s.events import EventRecorder
from gitray.plans.filters import in_sync, only_deletions, skip_failed
from gitray.plans.plan import WorkloadPlan

__all__ = ["Daemon", "PostStatus"]

log = logging.getLogger("gitray.sync")  # the `gitray sync` logger (log pipelines match it)

# (sha, workload or None for the overall context, state, description) -> None
PostStatus = Callable[[str, ObjectKey | None, str, str], None]


class Daemon:
    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.statuses = StatusBridge(settings, self.metrics)
        self.post_status: PostStatus = self._post_status
        self.signals = Signals(self.metrics, settings.overrides, redact_url(settings.repo))
        self.kube = Kube.connect(settings.kube)
        self.wiring = Wiring(self.kube, settings.execution)
        self.events = EventRecorder(self.kube, settings.execution.identity)
        self.state = StateBox()  # shared by the jobs, the webhook and the probes
        self.revisions = Revisions()  # the last commit's files, each file's validated result
        self._lock = PassLock()  # one sync pass at a time
        self.standby = Standby(settings, self.kube, self.revisions, self._lock)
        self._stopping = threading.Event()
        self._poked = threading.Event()  # a webhook came in: a pass waiting looks at Git now
        self._ended = threading.Event()  # a run ended: the next poll plans its commit again
        self.verdicts = Verdicts(self.post_status, self.metrics, self.signals, self.state,
                                 self._health)
        self.fleet = Fleet(settings.workers, self._run_ended)  # the runs in flight
        self.scheduler = BackgroundScheduler(timezone="UTC")
        self.owner = owner_for(settings.shards, self.wiring, self.scheduler, self.metrics,
                               self.fleet, self._stopping, self.trigger_poll,
                               self._api_problem, on_gained=self._resume_released,
                               post_overall=lambda sha, *s: self.statuses.post_later(sha, None, *s))
        self.dispatch = Dispatcher(self.fleet, self.verdicts, self.post_status, self._executor,
                                   Ownership(settings.shards).shard)
        self.wait_watches = WaitWatches(self.kube, self.fleet, self._resume_released)
        self.rechecks = Rechecks(self.kube, self.fleet, self._resume_released,
                                 self.owner.leading, stopping=self._stopping.is_set,
                                 follow=self.wait_watches.follow)
        self.holds = Holds(self.kube, settings.execution.lease_namespace, self.post_status,
                           self.state)
        self.metrics.in_flight.set_function(lambda: len(self.fleet.in_flight()))
        self.metrics.shards_held.set_function(lambda: len(self.owner.ownership().held))
        self.health_job = HealthJob(  # health watched after convergence
            HealthWatch(self.signals, self.post_status), self.state, self.revisions, self._lock,
            lambda: self.owner.leading() and not self._stopping.is_set(), self._health,
            lambda snap: desired_from(snap, settings.overrides, self.revisions.memo, self.kube),
            self.owner.ownership)
        self.http = HttpEndpoints(
            (settings.http_host, settings.http_port),
            Probes(healthy=self._healthy, ready=lambda: self.state.current.ready,
                   leader=self.owner.leading, detail=self._detail),
            self.metrics, self.trigger_poll, settings.webhook_secret,
            page=lambda: self.signals.page(self.state.current, self.owner.leading()),
            plan=self.signals.plan)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self.http.start()
        self.scheduler.add_job(self._poll_job, "interval", seconds=self.settings.interval_s,
                               id="poll", max_instances=1, coalesce=True,
                               next_run_time=datetime.now(UTC))
        self.scheduler.add_job(self._deletion_job, "interval",
                               seconds=self.settings.deletion_interval_s, id="deletions",
                               max_instances=1, coalesce=True)
        self.scheduler.add_job(self.rechecks.job, "interval", seconds=1.0, id="rechecks",
                               max_instances=1, coalesce=True)
        self.scheduler.add_job(self.health_job, "interval", seconds=self.settings.interval_s,
                               id="health", max_instances=1, coalesce=True)
        self.scheduler.add_job(self.owner.attempt, "interval",
                               seconds=self.settings.execution.retry_period_s, id="lease",
                               max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
        self.scheduler.start()
        self.owner.start()
        self.state.update(ready=True)
        log.info("gitray sync started", extra={"repo": redact_url(self.settings.repo),
                                               "identity": self.settings.execution.identity,
                                               "http_port": self.http.port})

    def run_forever(self) -> int:
        """Run until SIGTERM/SIGINT, then hand over gracefully (within a bound)."""
        return run_until_signalled(self.start, self.stop)

    def stop(self) -> list[str]:
        """Hand over; returns what is left behind still running (not to be waited for)."""
        left: list[str] = []
        self._stopping.set()
        self.fleet.stop()  # a run still queued never starts
        self.wiring.interrupt()  # a step waiting now ends at once
        self.scheduler.shutdown(wait=False)
        if self._lock.acquire(timeout=STOP_GRACE_S / 4):  # a pass planning now ends, or is
            self._lock.release()  # left behind (the fleet is stopped: its runs never start)
        else:
            log.warning("a sync pass is still planning: handing over without waiting for it")
            left.append("the pass still planning")
        # parked runs stay as they are; runs on workers stop at their next progress point,
        # records "running" for the next leader ("sync of ... interrupted" for each)
        self.fleet.hand_over()
        if not self.fleet.wait(STOP_GRACE_S / 2):
            left.append(f"runs still stopping: {', '.join(map(str, self.fleet.in_flight()))}")
            log.warning("%s", left[-1])
        self.fleet.shutdown()
        self.owner.release()  # the Lease, or every shard held (first: the others wait for it)
        self.wait_watches.stop()
        self.metrics.leader.set(0)
        self.http.stop()
        self.kube.close()
        log.info("gitray sync stopped")
        return left

    def trigger_poll(self) -> None:
        """Poll now (webhook)."""
        self._poked.set()
        job = self.scheduler.get_job("poll")
        if job is not None:
            job.modify(next_run_time=datetime.now(UTC))

    def _healthy(self) -> bool:
        return not self._stopping.is_set() and self.scheduler.running

    def _detail(self) -> dict[str, object]:
        s = self.state.current
        own = self.owner.ownership()
        return {"synced": s.synced, "fetched": s.fetched, "git": s.git_problem or "ok",
                "api": s.api_problem or "ok", "inFlight": self.fleet.detail(),
                **({"shards": own.describe()} if own.sharded else {})}

    def _post_status(self, sha: str, key: ObjectKey | None, state: str, text: str) -> None:
        """A replica of a sharded instance speaks for its own workloads, not for the commit
        (``posts_overall``)."""
        if key is not None or posts_overall(state, self.settings.shards):
            self.statuses.post(sha, key, state, text)

    # ---- jobs ---------------------------------------------------------------------------

    def _poll_job(self) -> None:
        if self._stopping.is_set():
            return
        if not self.owner.leading():
            self.standby.prepare()
            if not self.owner.leading():  # (it may have become leader meanwhile: poll now)
                return
        self.statuses.flush()
        self.metrics.polls.inc()
        self.state.change(lambda s: replace(s, polls=s.polls + 1))
        started = time.monotonic()
        try:
            fetched = fetch_branch(self.settings.repo, self.settings.branch,
                                   cache_dir=self.settings.cache_dir)
        except GitrayError as e:
            self.metrics.git_errors.inc()
            problem = str(e)
            before, _ = self.state.change(lambda s: replace(s, git_problem=problem))
            if before.git_problem != problem:
                log.error("git: %s (nothing is applied or pruned until it reads again)", e)
            return
        finally:
            self.metrics.git_fetch.observe(time.monotonic() - started)
        ended = self._ended.is_set()
        self._ended.clear()  # (a run ending from now on sets it again)
        before, state = self.state.change(
            lambda s: replace(s, git_problem="", fetched=fetched.sha))
        if before.git_problem:
            log.info("git: reading again")
        drift = bool(self.settings.drift_every) and \
            state.polls % self.settings.drift_every == 0
        retry = bool(state.retry_at) and time.monotonic() >= state.retry_at
        if fetched.sha == state.refused:  # (a refused commit stops no parked run: it goes on
            if ended and (released := self.fleet.released()):  # for its own commit)
                self.sync(fetched.cache, next(iter(released.values())).sha, "deletions")
            return
        trigger = poll_trigger(state, fetched.sha, retry_due=retry, ended=ended,
                               drift_due=drift, controls_changed=self.holds.changed)
        synced = state.synced
        if trigger == "commit" and synced and not is_ancestor(fetched.cache, synced, fetched.sha):
            log.warning("the history of %s was rewritten: the synced commit %s is not an "
                        "ancestor of %s; syncing the new tip", fetched.branch, synced[:7],
                        fetched.sha[:7])
        if trigger is not None:
            self.sync(fetched.cache, fetched.sha, trigger)

    def _resume_released(self) -> None:
        self._ended.set()
        self.trigger_poll()

    def _deletion_job(self) -> None:
        state = self.state.current
        if (self._stopping.is_set() or not self.owner.leading() or not state.synced
                or time.time() < state.next_deletion):  # (no old cluster due: nothing to read)
            return
        cache = self.settings.cache_dir or default_cache_dir(self.settings.repo)
        a = state.attempted  # the newest commit passed (with runs going on: not "synced" yet)
        sha = a if a and a != state.refused else state.synced  # (its old clusters are due)
        self.sync(cache, sha, "deletions")

    # ---- one pass -----------------------------------------------------------------------

    def sync(self, cache: Path, sha: str, trigger: str) -> list[WorkloadPlan]:
        """Plan ``sha`` against the live cluster and start the runs whose turn has come
        (under the Lease); returns them, without waiting for them."""
        with self._lock:
            if self._stopping.is_set():
                return []
            started = time.monotonic()
            try:
                started_runs = self._pass(cache, sha, trigger)
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
            self.state.update(api_problem="")
            return started_runs

    def _backoff(self) -> None:
        _, state = self.state.change(lambda s: replace(s, failures=s.failures + 1))
        delay = min(self.settings.interval_s * 2 ** state.failures, self.settings.max_backoff_s)
        self.state.update(retry_at=time.monotonic() + delay)
        log.info("will retry in %.0f s", delay)

    def _api_problem(self, e: GitrayError) -> None:
        self.metrics.api_errors.labels(type(e).__name__).inc()
        problem = str(e)
        before, _ = self.state.change(lambda s: replace(s, api_problem=problem))
        if before.api_problem != problem:
            log.error("Kubernetes API: %s", e)

    def _pass(self, cache: Path, sha: str, trigger: str) -> list[WorkloadPlan]:
        if trigger != "deletions":  # a deletions pass runs the synced commit, not the newest
            self.state.update(attempted=sha)
        snapshot = self.revisions.read(cache, sha)
        if self.settings.allowed_signers is not None:
            try:
                signer = verify_commit(cache, sha, self.settings.allowed_signers)
            except SourceError as e:
                self.state.update(refused=sha)
                self.metrics.invalid_revisions.inc()
                log.error("%s not applied: %s", sha[:7], e)
                self.signals.refused(sha, str(e), self.post_status, f"not applied: {e}")
                return []
            log.info("%s is signed by %s", sha[:7], signer)
        # Only a verified revision may choose where statuses (and the status token) go.
        self.statuses.configure(snapshot, cache)
        self.signals.configure(snapshot)
        try:
            # judged by the CRDs the cluster serves (converted again only when they change)
            desired = desired_from(snapshot, self.settings.overrides, self.revisions.memo,
                                   self.kube)
            if trigger == "commit":  # once per revision, not on every drift or deletion pass
                for warning in desired.result.warnings:
                    log.warning("%s: %s: warning: %s", sha[:7], warning.location,
                                warning.message)
            own = self.owner.ownership()  # (sharded: only the held shards' workloads below)
            under_way = self.fleet.in_flight()  # (a run ending after the live read below is
            # planned by the pass its end asks for, never again from this stale read)
            records = owned(self.wiring.progress(desired.config).list(), own)  # (an input too)
            # refused against live state too (a cluster change under upgradeStrategy None)
            plan, next_deletion = live_plan(self.kube, desired, records=records,
                                            owns=own.owns if own.sharded else None,
                                            in_flight=under_way)
            self.signals.planned(sha, plan)  # (the first pass of a commit: what it changes)
        except ValidationError as e:
            self.state.update(refused=sha)
            self.metrics.invalid_revisions.inc()
            for diagnostic in e.diagnostics:
                log.error("%s: %s", sha[:7], diagnostic)
            first = str(e.diagnostics[0]) if e.diagnostics else ""
            self.signals.refused(sha, f"invalid revision: {first}", self.post_status,
                                 f"invalid revision, nothing applied: {first}")
            return []
        self.state.update(next_deletion=next_deletion)
        controls = self.holds.controls()  # gitray suspend/resume/retry: one LIST
        plan, failed_before = skip_failed(plan, {
            r.key: r.desired_hash for r in records if r.state is RunState.FAILED
            and r.revision == plan.revision and not retry_wanted(controls.get(r.key), r)})
        if trigger == "commit":
            self.owner.applying(sha)  # (sharded: the holder of shard 0 says it is pending)
            for key in failed_before:
                log.info("%s failed at %s before; a new commit retries it", key,
                         plan.revision[:7])
        if trigger == "deletions":
            plan = only_deletions(plan)
        plan, held = self.verdicts.hold_back(self.kube, sha, trigger, plan)
        resume = resumable(plan, records)
        newest = trigger != "deletions"  # (a deletions pass may plan an older commit)
        self.dispatch.resume_released(plan, records, resume, newest)
        in_flight = {**under_way, **self.fleet.in_flight()}
        plan, paused = self.holds.hold(sha, trigger, plan, desired.config, controls,
                                       {*resume, *in_flight}, failed_before)
        if newest:  # (what the health watch reads while this commit waits for its verdict)
            self.state.update(settled=(sha, in_sync(plan, resume, in_flight, failed_before,
                                                    held, paused)))
        if not any(w.steps for w in plan.workloads) and not resume:
            # (a workload that failed at this revision before is not "in sync": its failure stands)
            if trigger in VERDICT_TRIGGERS and not failed_before and not held \
                    and not in_flight and not paused:
                own = own.still_held(self.owner.ownership())  # (lost ones: the next holder's)
                self.owner.mark_synced(own, sha)  # (sharded: the overall success, when all are)
                self.verdicts.converged(sha, owned_desired(desired, own))
            return []
        return self.dispatch(sha, trigger, desired, plan, resume, in_flight, failed_before,
                             self._newer_commit(sha, snapshot), newest)

    def _run_ended(self, key: ObjectKey, flight: Flight, outcome: WorkloadOutcome | None
                   ) -> None:
        """A run ended (on its worker): report it, and plan its commit again at once."""
        if outcome is None:  # the Lease lost, an API error, or its shard's renew late: a
            if not self._stopping.is_set():  # retry pass resumes it here if this replica still
                self._backoff()  # (or again) drives it; a shard lost: its next holder does
            return
        self.verdicts.run_ended(key, flight, outcome, self.fleet.flights(),
                                self.state.current.attempted)
        self.state.update(next_deletion=0.0)  # steps may have scheduled or done deletions
        self._ended.set()
        self.trigger_poll()

    def _newer_commit(self, sha: str, snapshot: Snapshot) -> NewerCommit:
        s = self.settings
        self._poked.clear()
        return NewerCommit(Source(s.repo, s.branch, s.cache_dir, s.overrides, s.allowed_signers),
                           sha, snapshot, self.revisions.memo, s.interval_s, self._poked)

    def _health(self, desired: Desired) -> dict[ObjectKey, str]:
        """Each workload's health line for its success status (best effort: display only)."""
        try:
            return health_of(self.kube, self.wiring.resolver, desired)
        except GitrayError as e:
            log.info("health for the commit statuses not read: %s", e)
            return {}

    def _executor(self, sha: str, desired: Desired, superseded: SupersedeCheck, shard: int
                  ) -> Executor:
        """An executor of ``shard``'s workloads (fenced by its Lease) whose runs report to
        ``sha`` and park at their waits."""
        fence, count = self.owner.fence(shard), self.settings.shards
        progress = self.wiring.progress(desired.config, fence,
                                        shard_label(shard, count) if count > 1 else "")
        return self.wiring.executor(desired.config, progress, self._reporter(sha),
                                    desired.sensitive, superseded=superseded, park=True,
                                    fence=fence, labels=shard_labels(shard, count))

    def _reporter(self, sha: str) -> Callable[[StepEvent], None]:
        inner = self.signals.reporter(sha, step_reporter(sha, self.post_status, self.metrics,
                                                         self.events, self._stopping))

        def report(event: StepEvent) -> None:
            if not self.owner.ownership().owns(event.key):  # a run stops at its next progress
                raise LeaseLostError(  # point, not only at its next mutation
                    "the Lease was lost" if self.settings.shards == 1
                    else f"the shard of {event.key} was lost")
            if event.phase == "start" and not self.fleet.stepped(
                    event.key, f"{event.index}/{event.total} {event.step.type.value} "
                    f"{event.step.target}"):
                return  # a parked wait checked again: its start was said
            inner(event)
        return report
