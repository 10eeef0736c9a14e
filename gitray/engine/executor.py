"""Advance a plan step by step, resumably, under the Lease. I/O (through Actions/progress).

For each workload: write (or take over) its progress record before the first mutation;
before every mutating step confirm the Lease is still held (fencing); run the step's
idempotent handler, retrying transient errors with jittered backoff; record the result.

A step with a timeout has its start recorded before it runs and is bounded as a whole
(``gitray.engine.deadlines``): resumed by another leader or after a restart, it waits only for
what is left of its timeout (and says so: "resumed, 12 s of 30 s left"), or fails at once when
nothing is left; a transient error's retry does not restart it either.

Failure (SPEC §3): a RayService whose new cluster failed before any traffic was switched
gets that pending cluster deleted (or kept and marked failed with ``keepFailedClusters``);
the active cluster and both Services are left untouched.

An incremental upgrade (``gitray.engine.incremental.upgradecontrol``) is steered by ``gitray
promote`` and ``gitray abort`` (read at every step boundary before the promotion, and by its
holds); a ``run-analysis`` that fails is counted in the run record and, below its ``failureLimit``,
run again (the weight held); once traffic moved, any failure — the limit reached, an abort, a step
failed for good — rolls the upgrade back: all traffic to the old cluster, its capacity restored,
the new cluster deleted (or kept, marked failed).
A blue-green upgrade's gates (``gitray.engine.gates``): ``gitray approve`` ends its approval
gate; its after-switch analysis failing switches both Services back to the old cluster.

A newer commit (``gitray sync`` asks ``superseded`` while a RayService upgrade waits, before
any traffic moved): the run ends ``cancelled`` where it stands — no clean-up, the next pass
plans the newer commit against what exists (SPEC §3: abandon the pending cluster, or cancel the
upgrade on a revert) — and the waves after it are skipped.

Waves run in order; within a wave supporting objects go first, then Ray workloads run in
parallel up to ``maxParallel``. A failed wave stops the waves after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum

from gitray.core.config import Config
from gitray.core.errors import (
    Aborted,
    AnalysisFailed,
    LeaseLostError,
    Superseded,
    TerminalError,
    TransientError,
)
from gitray.core.model import ANN_FAILED, API_VERSION_RAY, Kind, ObjectKey
from gitray.core.timefmt import utc_timestamp
from gitray.core.waits import Backoff
from gitray.engine import failpoints
from gitray.engine.actions import Actions
from gitray.engine.deadlines import Budget, step_budget
from gitray.engine.fence import Fence
from gitray.engine.gates import gated, keep_failed, own_service, switch_back_of
from gitray.engine.incremental.signals import RunSteering, SignalStore
from gitray.engine.incremental.upgradecontrol import (
    check_failure_limit,
    failure_limit,
    promotion_index,
    rollback_of,
)
from gitray.engine.progress import ProgressStore
from gitray.engine.record import (
    Record,
    RunState,
    StepRecord,
    StepStart,
    StepStatus,
    utc_now,
)
from gitray.plans.plan import Plan, Step, WorkloadPlan
from gitray.plans.sensitive import SensitiveValues, UnknownSensitiveValue
from gitray.plans.steptypes import STEP_KINDS, StepType

__all__ = ["Executor", "Outcome", "Reporter", "StepEvent", "SupersedeCheck", "WorkloadOutcome"]

RETRY_BUDGET_S = 120.0  # transient errors of one step are retried for this long (pauses)
RETRY_FIRST_S, RETRY_CAP_S = 0.5, 10.0  # doubling, each pause jittered by ±50 %


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    SUPERSEDED = "superseded"  # a newer commit wants another spec: stopped, not failed


@dataclass(frozen=True)
class StepEvent:
    """What a reporter hears: a step starting, progressing, finishing or failing."""

    key: ObjectKey
    index: int  # 1-based
    total: int
    step: Step
    phase: str  # "start" | "progress" | "done" | "failed" | "superseded" (and "resume" from
    #             gitray apply)
    detail: str = ""  # for "start": "" or, for a resumed step, how much of its timeout is left


Reporter = Callable[[StepEvent], None]
# (workload, the desired-spec hash its run was planned for) -> why a newer commit supersedes
# that run, or None
SupersedeCheck = Callable[[ObjectKey, str], str | None]


@dataclass(frozen=True)
class WorkloadOutcome:
    key: ObjectKey
    outcome: Outcome
    reason: str = ""
    steps_done: int = 0
    steps_total: int = 0
    messages: tuple[str, ...] = field(default=(), compare=False)


@dataclass
class _Run:
    """A workload's run in progress; mutable: every write gives a new ``record``."""

    record: Record | None
    steering: RunSteering | None
    promotion: int | None  # gitray.engine.incremental.upgradecontrol.promotion_index
    failures: list[str]  # failed analyses so far


class Executor:
    def __init__(self, actions: Actions, fence: Fence, config: Config,
                 progress: ProgressStore | None = None, reporter: Reporter | None = None,
                 signals: SignalStore | None = None,
                 superseded: SupersedeCheck | None = None,
                 sensitive: SensitiveValues | None = None) -> None:
        self.actions = actions
        self.fence = fence
        self.config = config
        self.progress = progress
        self.reporter = reporter or (lambda _event: None)
        self.signals = signals
        self.superseded = superseded
        # plans hold digests of sensitive values; the revision applied holds the values
        self.sensitive = sensitive or SensitiveValues()
        self._lock = threading.Lock()

    # ---- plan level ---------------------------------------------------------------------

    def run_plan(self, plan: Plan, *, resume: dict[ObjectKey, Record] | None = None
                 ) -> list[WorkloadOutcome]:
        """Run every workload with steps; ``resume`` continues interrupted runs' records."""
        outcomes: list[WorkloadOutcome] = []
        waves = sorted({w.wave for w in plan.workloads if w.steps})
        records = resume or {}
        stopped = ""  # why the waves left are skipped
        for wave in waves:
            members = [w for w in plan.workloads if w.wave == wave and w.steps]
            if stopped:
                outcomes += [WorkloadOutcome(w.key, Outcome.SKIPPED, stopped, 0, len(w.steps))
                             for w in members]
                continue
            supporting = [w for w in members if w.key.kind not in {k.value for k in Kind}]
            ray = [w for w in members if w not in supporting]
            for wp in supporting:
                outcomes.append(self.run_workload(wp, plan.revision, records.get(wp.key)))
            with ThreadPoolExecutor(max_workers=max(1, self.config.max_parallel)) as pool:
                outcomes += list(pool.map(
                    lambda wp: self.run_workload(wp, plan.revision, records.get(wp.key)),
                    ray))
            if any(o.outcome is Outcome.FAILED for o in outcomes):
                stopped = f"wave {wave} failed"
            elif any(o.outcome is Outcome.SUPERSEDED for o in outcomes):
                stopped = f"wave {wave} was superseded by a newer commit"
        return outcomes

    # ---- workload level -----------------------------------------------------------------

    def run_workload(self, wp: WorkloadPlan, revision: str,
                     resume: Record | None = None) -> WorkloadOutcome:
        """Run ``wp`` from its first step, or continue ``resume`` (its plan, from its cursor)."""
        self.fence.ensure_held()
        record: Record | None = None
        if resume is not None:
            wp = resume.plan
            if self.progress is not None:
                record = self.progress.resume(resume, self.fence.epoch)
        elif self.progress is not None:
            record = self.progress.begin(wp, revision, self.fence.epoch)
        start = resume.cursor if resume is not None else 0
        total = len(wp.steps)
        messages: list[str] = []
        promotion = promotion_index(wp)
        steered = promotion is not None or gated(wp)
        run = _Run(record, self._steering(wp, record, revision) if steered else None,
                   promotion, list(record.analysis_failures) if record is not None else [])
        for index in range(start, total):
            step = wp.steps[index]
            record, started, budget = self._begin_step(record, step)
            self._emit(StepEvent(wp.key, index + 1, total, step, "start",
                                 budget.describe() if budget and budget.resumed else ""))
            run.record = record
            try:
                message = self._attempt(wp, index, step, budget, run)
            except TerminalError as e:
                self._emit(StepEvent(wp.key, index + 1, total, step, "failed", str(e)))
                record = self._record(run.record, step, StepStatus.FAILED, str(e), started)
                cleanup = self._clean_up_failure(wp, index)
                if isinstance(e, Aborted) and run.steering is not None:
                    run.steering.consume_abort()
                reason = f"step {index + 1}/{total} {step.type.value} failed: {e}"
                if cleanup:
                    messages.append(cleanup)
                    if cleanup.startswith(("rolled back", "rollback", "switched back",
                                           "switch-back")):
                        reason += f"; {cleanup}"
                if record is not None and self.progress is not None:
                    self.progress.finish(record, RunState.FAILED, reason)
                return WorkloadOutcome(wp.key, Outcome.FAILED, reason, index, total,
                                       tuple(messages))
            except Superseded as e:
                reason = f"step {index + 1}/{total} {step.type.value} stopped: {e}"
                self._emit(StepEvent(wp.key, index + 1, total, step, "superseded", str(e)))
                record = self._record(run.record, step, StepStatus.SKIPPED, str(e), started)
                if record is not None and self.progress is not None:
                    self.progress.finish(record, RunState.CANCELLED, reason)
                return WorkloadOutcome(wp.key, Outcome.SUPERSEDED, reason, index, total,
                                       tuple(messages))
            record = run.record
            messages.append(message)
            failpoints.hit(failpoints.Point.STEP_DONE, index + 1)
            self._emit(StepEvent(wp.key, index + 1, total, step, "done", message))
            record = self._record(record, step, StepStatus.OK, message, started)
            failpoints.hit(failpoints.Point.STEP_RECORDED, index + 1)
        if record is not None and self.progress is not None:
            self.progress.finish(record, RunState.SUCCEEDED)
        return WorkloadOutcome(wp.key, Outcome.SUCCEEDED, "", total, total, tuple(messages))

    def _record(self, record: Record | None, step: Step, status: StepStatus, message: str,
                started: str) -> Record | None:
        if record is None or self.progress is None:
            return record
        return self.progress.advance(record, StepRecord(step.id, step.type.value, status,
                                                        message, started, utc_now()))

    def _begin_step(self, record: Record | None, step: Step
                    ) -> tuple[Record | None, str, Budget | None]:
        """(record, start time, budget) of ``step`` starting now — or resumed, at the start its
        record kept. A step with a timeout gets its start stored before it runs (fenced)."""
        now = self.actions.clock.now()
        earlier = record.current if record is not None else None
        budget = (step_budget(step, now, earlier.started_at, earlier.epoch)
                  if earlier is not None and earlier.id == step.id else step_budget(step, now))
        if budget is not None and budget.resumed:
            return record, budget.started_at, budget
        started = utc_timestamp(now, digits=3)
        if budget is not None and record is not None and self.progress is not None:
            record = self.progress.start(record, StepStart(step.id, started, self.fence.epoch))
        return record, started, budget

    def _emit(self, event: StepEvent) -> None:
        with self._lock:
            self.reporter(event)

    def _attempt(self, wp: WorkloadPlan, index: int, step: Step, budget: Budget | None,
                 run: _Run) -> str:
        """Run ``step`` of an upgrade that may be aborted, again after a failed analysis
        below its failureLimit (each failure stored in ``run.record`` first)."""
        while True:
            try:
                if run.steering is not None and run.promotion is not None \
                        and index < run.promotion:
                    run.steering.aborted(step)
                check_failure_limit(step, run.failures)
                return self._run_step(wp, index, step, budget, run.steering)
            except AnalysisFailed as e:
                run.failures.append(f"{step.id}: {e}")
                if run.record is not None and self.progress is not None:
                    run.record = self.progress.count_failure(run.record, run.failures[-1])
                check_failure_limit(step, run.failures, e)
                self._emit(StepEvent(wp.key, index + 1, len(wp.steps), step, "progress",
                                     f"analysis failed ({len(run.failures)} of failureLimit "
                                     f"{failure_limit(step)}): {e}; holding the weight and "
                                     "analysing again"))

    def _steering(self, wp: WorkloadPlan, record: Record | None, revision: str
                  ) -> RunSteering | None:
        if self.signals is None:
            return None
        return RunSteering(self.signals, self.fence, self.config.instance, wp.key,
                           record.revision if record is not None else revision,
                           wp.desired_hash)

    def _run_step(self, wp: WorkloadPlan, index: int, step: Step, budget: Budget | None,
                  steering: RunSteering | None = None) -> str:
        """Run one step: fence first if it mutates; retry transient errors with backoff. A
        step with a timeout is bounded from its first start (``budget``), across retries
        (a hold whose time ran out meanwhile has done its part)."""
        if budget is not None and budget.resumed and budget.left <= 0 \
                and not STEP_KINDS[step.type].holds:
            raise TerminalError(budget.expired(step))
        total = len(wp.steps)
        check = self._supersede_check(wp, index, step)
        try:
            acting = self.sensitive.reveal(step)  # never stored, never reported
        except UnknownSensitiveValue as e:
            raise TerminalError(str(e)) from None

        def report(detail: str) -> None:
            self._emit(StepEvent(wp.key, index + 1, total, step, "progress", detail))
            if check is not None and (why := check(wp.key, wp.desired_hash)):
                raise Superseded(why)

        pauses = Backoff(RETRY_FIRST_S, factor=2.0, cap=RETRY_CAP_S, jitter=0.5)
        spent = 0.0
        clock = self.actions.clock
        began, carried = clock.monotonic(), budget.spent if budget is not None else 0.0
        while True:
            if STEP_KINDS[step.type].mutates:
                self.fence.ensure_held()
            try:
                return self.actions.run(wp.key.namespace, acting, report,
                                        spent=carried + clock.monotonic() - began,
                                        steering=steering)
            except LeaseLostError:
                raise
            except TransientError as e:
                if spent >= RETRY_BUDGET_S:
                    raise TerminalError(f"{e} (still failing after {spent:.0f} s of retries)") \
                        from e
                pause = pauses.next()
                self._emit(StepEvent(wp.key, index + 1, total, step, "progress",
                                     f"retrying in {pause:.1f} s: {e}"))
                self.actions.clock.sleep(pause)
                spent += pause

    def _roll_back(self, wp: WorkloadPlan, failed_at: int) -> str | None:
        """An incremental upgrade failed once traffic moved: take it back (None: no traffic
        had moved, or it was promoted already)."""
        rollback = rollback_of(wp, failed_at, self.config.rayservice.keep_failed_clusters)
        if rollback is None:
            return None
        problems, stuck = self._undo(wp, failed_at, rollback.steps, StepType.SHIFT_TRAFFIC)
        if stuck is not None:
            return (f"rollback incomplete: could not send all traffic back to "
                    f"{rollback.old} ({stuck[1]}); {rollback.new} is left in place")
        return (f"rolled back: all traffic to {rollback.old} at full Serve capacity, "
                + self._undone(wp, rollback.new, rollback.keep, problems))

    def _switch_back(self, wp: WorkloadPlan, failed_at: int) -> str | None:
        """A blue-green upgrade's after-switch gate failed: both Services back to the old
        cluster, the new one deleted (or kept); None when it was no such gate."""
        back = switch_back_of(wp, failed_at, self.config.rayservice.keep_failed_clusters)
        if back is None:
            return None
        problems, stuck = self._undo(wp, failed_at, back.steps, StepType.SWITCH_SERVICE)
        if stuck is not None:
            return (f"switch-back incomplete: could not point the {stuck[0].params['role']}"
                    f" Service at {back.old} ({stuck[1]}); {back.new} is left in place")
        return (f"switched back: head and serve Service to {back.old}, "
                + self._undone(wp, back.new, back.keep, problems))

    def _undo(self, wp: WorkloadPlan, failed_at: int, steps: Sequence[Step], critical: StepType
              ) -> tuple[list[str], tuple[Step, Exception] | None]:
        """Run an undo's steps: the problems of those that failed, and the first `critical`
        one that failed (the undo stops there: the new cluster must stay)."""
        problems: list[str] = []
        for step in steps:
            try:
                self._run_step(wp, failed_at, step, None)
            except (TerminalError, TransientError) as e:
                if step.type is critical:
                    return problems, (step, e)
                problems.append(f"{step.type.value} {step.target}: {e}")
        return problems, None

    def _undone(self, wp: WorkloadPlan, new: str, keep: bool, problems: list[str]) -> str:
        """The tail of an undo's line: the new cluster deleted or kept (marked), problems."""
        kept = self._mark_failed(wp, new) if keep else ""
        where = f"{new} kept for debugging" if keep else f"{new} deleted"
        return where + "".join(f"; {p}" for p in problems) + (f"; {kept}" if kept else "")

    def _mark_failed(self, wp: WorkloadPlan, cluster: str) -> str:
        """Annotate a kept failed cluster; "" or why it could not be."""
        try:
            self.fence.ensure_held()
            self.actions.kube.patch(API_VERSION_RAY, "RayCluster", wp.key.namespace, cluster,
                                    {"metadata": {"annotations": {
                                        ANN_FAILED: "upgrade failed; kept for debugging"}}})
        except (TransientError, TerminalError) as e:
            return f"could not mark {cluster} failed: {e}"
        return ""

    def _supersede_check(self, wp: WorkloadPlan, index: int, step: Step
                         ) -> SupersedeCheck | None:
        """The check for a newer commit, where one may end the run: a RayService's wait
        before any traffic moved (after a switch, the run finishes and the next plan goes on
        from there, e.g. an instant rollback)."""
        if (self.superseded is None or wp.key.kind != Kind.RAY_SERVICE.value
                or not wp.desired_hash or not STEP_KINDS[step.type].supersedable
                or _traffic_moved(wp, index)):
            return None
        return self.superseded

    def _clean_up_failure(self, wp: WorkloadPlan, failed_at: int) -> str:
        """A RayService upgrade failed: an incremental one that moved traffic is rolled back;
        one that failed before traffic moved has its new cluster removed (or marked)."""
        if wp.key.kind != Kind.RAY_SERVICE.value:
            return ""
        switched_back = self._switch_back(wp, failed_at)
        if switched_back is not None:
            return switched_back
        rolled_back = self._roll_back(wp, failed_at)
        if rolled_back is not None:
            return rolled_back
        if _traffic_moved(wp, failed_at):
            return ""  # traffic already moved: leave everything for the next plan to settle
        new = [s.target for s in wp.steps if s.type is StepType.CREATE_CLUSTER]
        if not new:
            return ""
        cluster = new[0]
        try:
            self.fence.ensure_held()
            if keep_failed(wp, self.config.rayservice.keep_failed_clusters):
                self.actions.kube.patch(API_VERSION_RAY, "RayCluster", wp.key.namespace,
                                        cluster, {"metadata": {"annotations": {
                                            ANN_FAILED: "upgrade failed; kept for debugging"}}})
                return f"kept failed cluster {cluster} for debugging"
            if (service := own_service(wp, cluster)) is not None:  # a gate's: it goes too
                self.actions.kube.delete("v1", "Service", wp.key.namespace, service)
            self.actions.kube.delete(API_VERSION_RAY, "RayCluster", wp.key.namespace, cluster)
            return f"deleted failed pending cluster {cluster}"
        except (TransientError, TerminalError) as e:
            return f"could not clean up {cluster}: {e}"


def _traffic_moved(wp: WorkloadPlan, index: int) -> bool:
    """Whether a step before ``index`` created or switched a Service (traffic may have moved)."""
    return any(STEP_KINDS[s.type].moves_traffic for s in wp.steps[:index])


def failed_outcomes(outcomes: Iterable[WorkloadOutcome]) -> list[WorkloadOutcome]:
    return [o for o in outcomes if o.outcome is Outcome.FAILED]
