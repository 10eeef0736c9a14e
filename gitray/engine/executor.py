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
the new cluster deleted (or kept, marked failed) (``gitray.engine.undo``).
A blue-green upgrade's gates (``gitray.engine.gates``): ``gitray approve`` ends its approval
gate; its after-switch analysis failing switches both Services back to the old cluster.

A newer commit (``gitray sync`` asks ``superseded`` while a RayService upgrade waits, before
any traffic moved): the run ends ``cancelled`` where it stands — no clean-up, the next pass
plans the newer commit against what exists (SPEC §3: abandon the pending cluster, or cancel the
upgrade on a revert) — and the waves after it are skipped.

The executor runs one workload at a time per call (``run_workload``); which workloads run
when, and how many at once, is the fleet's (``gitray.engine.fleet``), driven by a sync pass or,
for ``gitray apply``, in the foreground (``gitray.engine.foreground``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
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
from gitray.core.model import Kind, ObjectKey
from gitray.core.timefmt import utc_timestamp
from gitray.core.waits import Backoff
from gitray.engine import failpoints
from gitray.engine.actions import Actions
from gitray.engine.deadlines import Budget, step_budget
from gitray.engine.fence import Fence
from gitray.engine.gates import gated
from gitray.engine.incremental.signals import RunSteering, SignalStore
from gitray.engine.incremental.upgradecontrol import (
    check_failure_limit,
    failure_limit,
    promotion_index,
)
from gitray.engine.parking import PARKABLE, Parked, parking, parks_now
from gitray.engine.progress import ProgressStore
from gitray.engine.record import (
    Record,
    RunState,
    StepRecord,
    StepStart,
    StepStatus,
    utc_now,
)
from gitray.engine.undo import Undoing, traffic_moved
from gitray.plans.plan import Step, WorkloadPlan
from gitray.plans.sensitive import SensitiveValues, UnknownSensitiveValue
from gitray.plans.steptypes import STEP_KINDS

__all__ = ["Executor", "Outcome", "Reporter", "StepEvent", "SupersedeCheck", "Waiting",
           "WorkloadOutcome"]

RETRY_BUDGET_S = 120.0  # transient errors of one step are retried for this long (pauses)
RETRY_FIRST_S, RETRY_CAP_S = 0.5, 10.0  # doubling, each pause jittered by ±50 %


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    SUPERSEDED = "superseded"  # a newer commit wants another spec: stopped, not failed
    WAITING = "waiting"  # parked at a wait step (``gitray.engine.parking``): resumed later


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
    waiting: Waiting | None = field(default=None, compare=False)  # for Outcome.WAITING


@dataclass(frozen=True)
class Waiting:
    """Where a parked run waits: its step, and what is left of the step's timeout."""

    step: Step
    detail: str
    left: float | None  # seconds (None: the step has no timeout, e.g. a pause until promoted)


@dataclass
class _Run:
    """A workload's run in progress; mutable: every write gives a new ``record``."""

    record: Record | None
    steering: RunSteering | None
    promotion: int | None  # gitray.engine.incremental.upgradecontrol.promotion_index
    failures: list[str]  # failed analyses so far


class Executor(Undoing):
    def __init__(self, actions: Actions, fence: Fence, config: Config,
                 progress: ProgressStore | None = None, reporter: Reporter | None = None,
                 signals: SignalStore | None = None,
                 superseded: SupersedeCheck | None = None,
                 sensitive: SensitiveValues | None = None, park: bool = False) -> None:
        self.actions = actions
        self.fence = fence
        self.config = config
        self.progress = progress
        self.reporter = reporter or (lambda _event: None)
        self.signals = signals
        self.superseded = superseded
        # plans hold digests of sensitive values; the revision applied holds the values
        self.sensitive = sensitive or SensitiveValues()
        self.park = park  # waits park (gitray sync) instead of holding their worker
        # runs resumed from their own parked wait (not interrupted): timed out, the wait's own
        # check says what it saw
        self.unparked: frozenset[ObjectKey] = frozenset()
        self._lock = threading.Lock()

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
            began = self.actions.clock.monotonic()
            try:
                message = self._attempt(wp, index, step, budget, run)
            except TerminalError as e:
                return self._failed(wp, index, e, run, started, messages)
            except Parked as e:
                return WorkloadOutcome(wp.key, Outcome.WAITING, e.detail, index, total,
                                       tuple(messages), self._waiting(step, e, budget, began))
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

    def _failed(self, wp: WorkloadPlan, index: int, e: TerminalError, run: _Run, started: str,
                messages: list[str]) -> WorkloadOutcome:
        """Step ``index`` failed for good: say so, record it, clean up (a RayService upgrade is
        taken back: ``gitray.engine.undo``), and end the run failed."""
        step, total = wp.steps[index], len(wp.steps)
        self._emit(StepEvent(wp.key, index + 1, total, step, "failed", str(e)))
        record = self._record(run.record, step, StepStatus.FAILED, str(e), started)
        cleanup = self._clean_up_failure(wp, index)
        if isinstance(e, Aborted) and run.steering is not None:
            run.steering.consume_abort()
        reason = f"step {index + 1}/{total} {step.type.value} failed: {e}"
        if cleanup:
            messages.append(cleanup)
            if cleanup.startswith(("rolled back", "rollback", "switched back", "switch-back")):
                reason += f"; {cleanup}"
        if record is not None and self.progress is not None:
            self.progress.finish(record, RunState.FAILED, reason)
        return WorkloadOutcome(wp.key, Outcome.FAILED, reason, index, total, tuple(messages))

    def _waiting(self, step: Step, parked: Parked, budget: Budget | None,
                 began: float) -> Waiting:
        """Where a run parks: its step, and what is left of its timeout."""
        left = None if budget is None else \
            budget.timeout - budget.spent - (self.actions.clock.monotonic() - began)
        return Waiting(step, parked.detail, left)

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
        parks = self.park and step.type in PARKABLE
        if budget is not None and budget.resumed and budget.left <= 0 \
                and not STEP_KINDS[step.type].holds and not (parks and wp.key in self.unparked):
            raise TerminalError(budget.expired(step))
        total = len(wp.steps)
        check = self._supersede_check(wp, index, step)
        try:
            acting = self.sensitive.reveal(step)  # never stored, never reported
        except UnknownSensitiveValue as e:
            raise TerminalError(str(e)) from None

        pauses = Backoff(RETRY_FIRST_S, factor=2.0, cap=RETRY_CAP_S, jitter=0.5)
        spent = 0.0
        clock = self.actions.clock
        began, carried = clock.monotonic(), budget.spent if budget is not None else 0.0

        def parks_here() -> bool:  # (a brief wait is waited for on its worker at first)
            return parks and parks_now(step.type, None if budget is None
                                       else carried + clock.monotonic() - began)

        def report(detail: str) -> None:
            self._emit(StepEvent(wp.key, index + 1, total, step, "progress", detail))
            if check is not None and (why := check(wp.key, wp.desired_hash)):
                raise Superseded(why)
            if parks_here():  # the wait would block now: it waits parked, holding no worker
                raise Parked(detail)

        while True:
            if STEP_KINDS[step.type].mutates:
                self.fence.ensure_held()
            try:
                with parking(parks_here()):
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

    def _supersede_check(self, wp: WorkloadPlan, index: int, step: Step
                         ) -> SupersedeCheck | None:
        """The check for a newer commit, where one may end the run: a RayService's wait
        before any traffic moved (after a switch, the run finishes and the next plan goes on
        from there, e.g. an instant rollback)."""
        if (self.superseded is None or wp.key.kind != Kind.RAY_SERVICE.value
                or not wp.desired_hash or not STEP_KINDS[step.type].supersedable
                or traffic_moved(wp, index)):
            return None
        return self.superseded

def failed_outcomes(outcomes: Iterable[WorkloadOutcome]) -> list[WorkloadOutcome]:
    return [o for o in outcomes if o.outcome is Outcome.FAILED]
