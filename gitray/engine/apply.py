"""One apply pass: read Git and the cluster, plan (or check a saved plan), take the Lease,
resume or start each workload's run, execute, report. I/O; shared by ``gitray apply`` and the
``gitray sync`` daemon.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from gitray.core.config import CONFIG_FILE, Config
from gitray.core.errors import StalePlanError, UserError, ValidationError
from gitray.core.livestore import LiveStore
from gitray.core.model import Diagnostic, Kind, LiveState, ObjectKey, Workload
from gitray.core.snapshot import Snapshot, snapshot_revision
from gitray.engine.capacity import preflight
from gitray.engine.controls import Control, ControlStore, suspension
from gitray.engine.dryrun import dry_run
from gitray.engine.executor import Outcome, Reporter, StepEvent, WorkloadOutcome
from gitray.engine.foreground import run_to_end
from gitray.engine.progress import RecordReader
from gitray.engine.record import Record, RunState, remembered_runs
from gitray.engine.schemas import cluster_schemas
from gitray.engine.wiring import Wiring
from gitray.k8s.client import Kube
from gitray.k8s.live import GATEWAY_API, absent_apis, live_pages, read_live_state
from gitray.parsing.config import parse_config
from gitray.parsing.kuberay import packaged
from gitray.plans.filters import earliest_deadline, hold_back
from gitray.plans.freeze import freeze_note, frozen_workloads
from gitray.plans.load import LoadMemo, LoadResult, load_snapshot
from gitray.plans.plan import Plan
from gitray.plans.planner import Planner
from gitray.plans.prerequisites import blocked_workloads, needed_apis
from gitray.plans.rayservice.fields import UPGRADE_INCREMENTAL, upgrade_type
from gitray.plans.sensitive import SensitiveValues
from gitray.plans.stale import stale_reasons
from gitray.plans.transitions import transition_problems
from gitray.render import runners

__all__ = ["Desired", "check_saved_plan", "desired_config", "desired_from", "execute", "freeze",
           "live_plan", "read_live", "read_live_store", "read_records", "refuse_unappliable",
           "resumable", "suspended", "unappliable"]


@dataclass(frozen=True)
class Desired:
    snapshot: Snapshot
    result: LoadResult
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def revision(self) -> str:
        return snapshot_revision(self.snapshot)

    @property
    def config(self) -> Config:
        return self.result.config

    @property
    def workloads(self) -> tuple[Workload, ...]:
        return self.result.workloads

    @property
    def sensitive(self) -> SensitiveValues:
        """The sensitive values of this revision, by the digest plans refer to them."""
        return SensitiveValues.of(self.workloads, self.config.sensitive_fields)


def desired_config(snapshot: Snapshot, overrides: dict[str, Any]) -> Config:
    """Only the settings of a revision (its gitray.yaml + overrides), even if its manifests
    are invalid."""
    data = next((f.data for f in snapshot.files if f.path == CONFIG_FILE), None)
    return parse_config(data, CONFIG_FILE, overrides)


def desired_from(snapshot: Snapshot, overrides: dict[str, Any],
                 memo: LoadMemo | None = None, kube: Kube | None = None) -> Desired:
    """The validated revision; judged by the CRDs ``kube``'s cluster serves when given, else
    by the packaged schemas of its ``kuberayVersion``."""
    kuberay = None
    if kube is not None:
        try:
            config = desired_config(snapshot, overrides)
        except UserError:
            config = None  # the load reports it, with its place
        if config is not None:
            kuberay = cluster_schemas(kube, packaged(config.kuberay_version))
    result = load_snapshot(snapshot, overrides, memo, kuberay, **runners())
    if result.diagnostics:
        raise ValidationError(result.diagnostics)
    return Desired(snapshot, result, overrides)


def _scope(desired: Desired) -> list[str]:
    namespaces = {w.key.namespace for w in desired.workloads}
    namespaces |= desired.config.literal_namespaces()
    return sorted(namespaces)


def _api_versions(desired: Desired) -> dict[str, str]:
    return {w.key.kind: w.api_version for w in desired.workloads if not w.is_ray}


def _incremental(desired: Desired) -> list[str]:
    """The RayServices (as text) whose upgrades go through the Gateway API."""
    return [str(w.key) for w in desired.workloads
            if w.key.kind == Kind.RAY_SERVICE.value
            and upgrade_type(w.spec) == UPGRADE_INCREMENTAL]


def read_live(kube: Kube, desired: Desired) -> LiveState:
    """What gitray manages in this repository's allowed namespaces, all at once. Objects
    elsewhere are never touched, so they neither change a plan nor make a saved plan stale."""
    live = read_live_state(kube, desired.config, namespaces=_scope(desired),
                           desired_api_versions=_api_versions(desired),
                           gateway_needed_by=_incremental(desired))
    return LiveState(tuple(o for o in live.objects if desired.config.allows(o.namespace)))


def read_live_store(kube: Kube, desired: Desired,
                    owns: Callable[[ObjectKey], bool] | None = None) -> LiveStore:
    """The same objects as :func:`read_live`, kept compact by batch (one LIST page decoded
    at a time); with ``owns``, only those of the workloads it says yes to (a shard's part:
    the others are dropped page by page, never kept)."""
    store = LiveStore()
    allows = desired.config.allows
    for page in live_pages(kube, desired.config, namespaces=_scope(desired),
                           desired_api_versions=_api_versions(desired),
                           gateway_needed_by=_incremental(desired)):
        store.add(o for o in page if allows(o.namespace) and (
            owns is None or (o.owner is not None and owns(o.owner))))
    return store


def live_plan(kube: Kube, desired: Desired, now: Callable[[], datetime] | None = None, *,
              records: Sequence[Record], owns: Callable[[ObjectKey], bool] | None = None,
              in_flight: Collection[ObjectKey] = ()) -> tuple[Plan, float]:
    """The plan against the live cluster, and the earliest persisted deletion deadline
    (wall time; inf when none). ``records``: the run records of the instance, for the runs
    gitray started (a RayJob run KubeRay deleted when it finished stays done).

    Planned one batch (namespace) at a time from a :class:`LiveStore`: only one batch's
    objects are ever decoded, so memory does not grow with the whole live state. The plan
    is the one ``compute_plan`` gives for all of it (tests/unit/plans/test_plan_batches.py).
    ``owns``: only the workloads of a replica's shards are read and planned (and their
    deletion deadlines counted); all when None. ``in_flight``: workloads whose runs go on
    (``gitray sync``): planned, but their objects are not dry-run again on every pass.
    """
    store = read_live_store(kube, desired, owns)
    # without the Gateway API CRDs an incremental RayService is still planned, with a note
    absent = absent_apis(kube, [GATEWAY_API]) if _incremental(desired) else frozenset()
    planner = Planner(desired.workloads, desired.config,
                      now=(now or (lambda: datetime.now(UTC)))(), absent_apis=absent,
                      remembered=remembered_runs(records), owns=owns)
    deadline = math.inf
    by_key = {w.key: w for w in desired.workloads}
    kuberay = desired.result.kuberay or packaged(desired.config.kuberay_version)
    refused: list[Diagnostic] = []
    unevaluated: list[Diagnostic] = []
    for batch in store.batches():
        live = store.take(batch)
        deadline = min(deadline, earliest_deadline(live))
        problems, warnings = transition_problems(by_key, live.objects, kuberay,
                                                   desired.snapshot)
        refused += problems
        unevaluated += warnings
        planner.add([batch], live)
    if refused:  # the API server would refuse these updates: nothing is applied
        raise ValidationError(sorted(refused))
    plan = planner.finish(revision=desired.revision, against="live",
                          label=desired.snapshot.label)
    if unevaluated:  # said, never taken as passed
        notes = sorted({f"{w.location}: warning: {w.message}" for w in unevaluated})
        plan = replace(plan, notes=(*plan.notes, *notes))
    # before anything is changed: admission (server-side dry-run) and capacity (quotas, nodes;
    # refused or noted, per gitray.yaml) speak now, every problem at once
    refused, dry_notes = dry_run(kube, plan, desired.sensitive, skip=in_flight)
    plan, short = preflight(kube, plan, desired.config)
    if refused or short:
        raise ValidationError(sorted({*refused, *short}))
    if dry_notes:
        plan = replace(plan, notes=(*plan.notes, *dry_notes))
    return plan, deadline


def check_saved_plan(saved: Plan, kube: Kube, desired: Desired,
                     records: Sequence[Record]) -> None:
    """Raise StalePlanError unless ``saved`` still describes what applying would do."""
    replanned, _ = live_plan(kube, desired, records=records)
    reasons = stale_reasons(saved, desired.revision, replanned)
    if reasons:
        raise StalePlanError("stale plan: " + "; ".join(reasons)
                             + ". Run gitray plan again and review the new plan.")


def read_records(kube: Kube, lease_namespace: str, config: Config) -> list[Record]:
    """The run records of ``config``'s instance, read without holding the Lease."""
    return RecordReader(kube, lease_namespace, config.instance).list()


def resumable(plan: Plan, records: list[Record]) -> dict[ObjectKey, Record]:
    """Runs interrupted for the same desired spec: they continue from their cursor.

    A run that was ``running`` for the spec Git still wants resumes with its stored plan
    (steps are idempotent, so repeating the interrupted one is safe) — also one stopped after
    its last step and before its end, which resuming ends. Anything else starts afresh from
    the new plan, which was computed from the live state.
    """
    wanted = {w.key: w.desired_hash for w in plan.workloads}
    return {r.key: r for r in records
            if r.state is RunState.RUNNING and r.key in wanted and wanted[r.key]
            and r.desired_hash == wanted[r.key]}


def freeze(plan: Plan, config: Config, resume: Collection[ObjectKey],
           now: datetime, override: str = "") -> tuple[Plan, list[WorkloadOutcome]]:
    """``plan`` without the workloads an open freeze window holds (a run already under way
    goes on), and their outcomes (not run, saying until when). With ``override`` (the reason
    given), nothing is held: each such workload's plan gets a note saying which window was
    overridden and why, which its run record keeps."""
    held = {k: f for k, f in frozen_workloads(plan, config.freeze_windows, now).items()
            if k not in resume}
    if not held:
        return plan, []
    if override:
        return replace(plan, workloads=tuple(
            replace(w, notes=(*w.notes, f"freeze window {held[w.key].window} overridden: "
                                        f"{override}")) if w.key in held else w
            for w in plan.workloads)), []
    outcomes = [WorkloadOutcome(w.key, Outcome.SKIPPED, freeze_note(held[w.key])
                                + " (gitray apply --override-freeze REASON applies it now)",
                                0, len(w.steps))
                for w in plan.workloads if w.key in held]
    return hold_back(plan, held), outcomes


def suspended(plan: Plan, controls: Mapping[ObjectKey, Control],
              resume: Collection[ObjectKey]) -> tuple[Plan, list[WorkloadOutcome]]:
    """``plan`` without the workloads ``gitray suspend`` holds (a run already under way goes
    on), and their outcomes (not run, saying who suspended them)."""
    held = {w.key: line for w in plan.workloads if w.steps and w.key not in resume
            and (line := suspension(controls.get(w.key)))}
    outcomes = [WorkloadOutcome(w.key, Outcome.SKIPPED, held[w.key], 0, len(w.steps))
                for w in plan.workloads if w.key in held]
    return hold_back(plan, held), outcomes


def execute(wiring: Wiring, desired: Desired, plan: Plan, reporter: Reporter,
            on_wait: Callable[[str, float], None], *, replan: bool,
            override_freeze: str = "") -> list[WorkloadOutcome]:
    """Take the Lease, resume or run every workload, release the Lease.

    With ``replan`` (an unsaved plan shown before the Lease was taken), the plan is computed
    again under the Lease and must still have the same steps. Workloads an open freeze window
    holds are not run (:func:`freeze`).
    """
    lease, kube = wiring.lease, wiring.kube
    refuse_unappliable(kube, plan)
    lease.acquire(wiring.settings.lease_timeout_s, on_wait)
    lease.start_renewing()
    try:
        progress = wiring.progress(desired.config)
        records = progress.list()
        if replan:
            again, _ = live_plan(kube, desired, records=records)
            if _steps(again) != _steps(plan) and not resumable(again, records):
                raise StalePlanError("the cluster changed while waiting for the Lease; "
                                     "run gitray apply again to see the new plan")
            plan = again
        resume = resumable(plan, records)
        plan, held = freeze(plan, desired.config, resume, datetime.now(UTC), override_freeze)
        plan, stopped = suspended(plan, ControlStore(kube, wiring.settings.lease_namespace)
                                  .load_all(), resume)
        held += stopped
        for key, record in sorted(resume.items()):
            step = record.plan.steps[record.cursor]
            reporter(StepEvent(key, record.cursor + 1, len(record.plan.steps), step, "resume",
                               f"started by epoch {record.epoch} at revision "
                               f"{record.revision[:12]}"))
        executor = wiring.executor(desired.config, progress, reporter, desired.sensitive)
        return held + run_to_end(
            plan, lambda wp: executor.run_workload(wp, plan.revision, resume.get(wp.key)),
            desired.config.max_parallel, resume, interrupt=wiring.interrupt)
    finally:
        lease.stop_renewing()
        lease.release()


def unappliable(kube: Kube, plan: Plan) -> dict[ObjectKey, list[str]]:
    """The workloads of ``plan`` that must not be started, and why: steps whose objects the
    API server does not serve (an incremental RayService's Gateway and HTTPRoute without the
    Gateway API CRDs). Asks the API server (discovery) rather than the plan's notes, so a saved
    plan is checked too."""
    return blocked_workloads(plan, absent_apis(kube, needed_apis(plan)))


def refuse_unappliable(kube: Kube, plan: Plan) -> None:
    """Raise UserError, before anything is changed, when ``unappliable`` names a workload."""
    blocked = unappliable(kube, plan)
    if blocked:
        lines = [f"  {key}: {reason}" for key, reasons in sorted(blocked.items())
                 for reason in reasons]
        raise UserError("not applied, nothing was changed:\n" + "\n".join(lines))


def _steps(plan: Plan) -> dict[str, list[tuple[str, str]]]:
    return {str(w.key): [(s.type.value, s.target) for s in w.steps] for w in plan.workloads}
