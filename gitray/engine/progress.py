"""Durable per-workload run records, one ConfigMap each. Does I/O (through :class:`Kube`).

A run record holds what a new leader or a restarted process needs to resume a workload's plan
mid-way (SPEC §4): the plan itself, the cursor (index of the next step), each finished step's
result, the state of the run and the epoch of the leader that wrote it. It is written before
the first mutation and after every step — and before a step with a timeout begins, with that
step's start (``current``), so that a leader resuming it keeps its deadline
(``gitray.engine.deadlines``). A record without ``currentStep`` (written before starts were
kept) reads as one with no start: its step's timeout then counts from when it is resumed.

Storage: ConfigMap ``gitray-run-<12 hex of the workload key's hash>`` in the Lease's namespace,
labelled ``app.kubernetes.io/managed-by=gitray``, ``gitray.io/instance=<instance>``,
``gitray.io/role=progress``, annotated ``gitray.io/progress-for=<namespace>/<Kind>/<name>``,
with one JSON document under ``record.json``. (Not ``gitray.io/workload-key``: the planner
treats objects carrying it as owned by the workload.)

Writes are fenced: every write first calls ``fence.ensure_held()``, then replaces the
ConfigMap with the ``resourceVersion`` last read (compare-and-swap). When the swap is lost the
record is read again; if a newer epoch wrote it the writer gets ``LeaseLostError`` — a record
is never overwritten by an older epoch's writer.

:class:`Record` and :class:`StepRecord` (``gitray.engine.record``, re-exported here) are the
persisted, JSON-safe form; the executor's in-memory outcomes are converted into them, never
stored directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gitray.core.errors import ConflictError, LeaseLostError, TerminalError
from gitray.core.model import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_PROGRESS,
    ObjectKey,
)
from gitray.engine.fence import Fence
from gitray.engine.record import (
    ANN_PROGRESS_FOR,
    DATA_KEY,
    MAX_MESSAGE_CHARS,
    MAX_RECORD_BYTES,
    RECORD_FORMAT_VERSION,
    Record,
    RunState,
    StepRecord,
    StepStart,
    StepStatus,
    encode_record,
    record_from_json,
    record_name,
    record_to_json,
    remember_run,
    trim_message,
    utc_now,
    workload_plan_from_json,
    workload_plan_to_json,
)
from gitray.k8s.client import Kube
from gitray.plans.plan import WorkloadPlan

__all__ = [
    "ANN_PROGRESS_FOR",
    "DATA_KEY",
    "MAX_MESSAGE_CHARS",
    "MAX_RECORD_BYTES",
    "RECORD_FORMAT_VERSION",
    "ProgressStore",
    "Record",
    "RunState",
    "StepRecord",
    "StepStart",
    "StepStatus",
    "record_from_json",
    "record_name",
    "record_to_json",
    "trim_message",
    "utc_now",
    "workload_plan_from_json",
    "workload_plan_to_json",
]


# ---- the store (I/O) ----------------------------------------------------------------------


class ProgressStore:
    """Run records of one gitray instance, in ConfigMaps of ``namespace``."""

    def __init__(self, kube: Kube, namespace: str, instance: str, fence: Fence) -> None:
        self._kube = kube
        self._namespace = namespace
        self._instance = instance
        self._fence = fence

    @property
    def selector(self) -> str:
        return (f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={self._instance},"
                f"{LABEL_ROLE}={ROLE_PROGRESS}")

    # ---- reads --------------------------------------------------------------------------

    def load(self, key: ObjectKey) -> Record | None:
        cm = self._kube.get_or_none("v1", "ConfigMap", self._namespace, record_name(key))
        return None if cm is None else self._decode(cm)

    def list(self) -> list[Record]:
        """Every record of this instance, from one LIST by label selector, sorted by key."""
        items, _ = self._kube.list("v1", "ConfigMap", namespace=self._namespace,
                                   label_selector=self.selector)
        return sorted((self._decode(cm) for cm in items), key=lambda r: r.key)

    # ---- writes -------------------------------------------------------------------------

    def begin(self, wp: WorkloadPlan, revision: str, epoch: int) -> Record:
        """Start a run of ``wp`` (cursor 0), replacing any earlier record of the workload
        unless a newer epoch wrote it. Call before the plan's first mutation."""
        record = Record(key=wp.key, revision=revision, desired_hash=wp.desired_hash, plan=wp,
                        cursor=0, steps=(), state=RunState.RUNNING, reason="", epoch=epoch,
                        updated_at="")
        return self._take_over(record)

    def resume(self, record: Record, epoch: int) -> Record:
        """Continue ``record`` (as loaded) under ``epoch``: same plan, cursor and results.
        Refused when a newer epoch wrote it; a conflict when it changed since it was loaded."""
        if record.state is not RunState.RUNNING:
            raise ValueError(f"{record.key}: cannot resume a run that is {record.state}")
        self._refuse_newer(record, epoch)
        return self._write(replace(record, epoch=epoch))

    def start(self, record: Record, start: StepStart) -> Record:
        """Store when the step at the cursor began. Call before the step runs. A step that
        already has a start (a resumed one) keeps it: nothing is written then."""
        if record.next_step != start.id:
            raise ValueError(f"{record.key}: start of step {start.id!r} but the cursor is at "
                             f"{record.next_step!r}")
        if record.current is not None and record.current.id == start.id:
            return record
        return self._write(replace(record, current=start))

    def advance(self, record: Record, result: StepRecord) -> Record:
        """Store the result of the step at the cursor; ``ok``/``skipped`` move the cursor on,
        ``failed`` leaves it on the failed step."""
        step = record.next_step
        if step != result.id:
            raise ValueError(f"{record.key}: result for step {result.id!r} but the cursor is "
                             f"at {step!r}")
        result = replace(result, message=trim_message(result.message))
        steps = (*(s for s in record.steps if s.id != result.id), result)
        order = {s.id: i for i, s in enumerate(record.plan.steps)}
        steps = tuple(sorted(steps, key=lambda s: order.get(s.id, len(order))))
        cursor = record.cursor if result.status is StepStatus.FAILED else record.cursor + 1
        runs = remember_run(record.runs, result.type, record.plan.steps[record.cursor].target,
                            result.status.value, result.message)
        return self._write(replace(record, steps=steps, cursor=cursor, current=None, runs=runs))

    def count_failure(self, record: Record, message: str) -> Record:
        """Store one more failed analysis of the run (counted against its failureLimit)."""
        failures = (*record.analysis_failures, trim_message(message, 500))
        return self._write(replace(record, analysis_failures=failures))

    def finish(self, record: Record, state: RunState, reason: str = "") -> Record:
        """End the run as ``succeeded``, ``failed`` or ``cancelled``."""
        if state is RunState.RUNNING:
            raise ValueError(f"{record.key}: finish() needs a final state, not {state}")
        return self._write(replace(record, state=state, reason=trim_message(reason)))

    # ---- internals ----------------------------------------------------------------------

    def _check_epoch(self, epoch: int) -> None:
        current = self._fence.epoch
        if current != epoch:
            raise LeaseLostError(f"run records written in epoch {epoch} but this process holds "
                                 f"the Lease in epoch {current}; stop mutating")

    def _take_over(self, record: Record) -> Record:
        self._check_epoch(record.epoch)
        self._fence.ensure_held()
        name = record_name(record.key)
        current = self._kube.get_or_none("v1", "ConfigMap", self._namespace, name)
        if current is None:
            record = replace(record, updated_at=utc_now())
            try:
                created = self._kube.create(self._body(record, resource_version=""))
            except ConflictError:
                return self._refuse_or_conflict(record, "created")
            return replace(record, resource_version=_version(created))
        stored = self._decode(current)
        self._refuse_newer(stored, record.epoch)
        # the runs it started outlive a run record: a new plan keeps them
        return self._write(replace(record, resource_version=_version(current),
                                   runs=stored.runs), check=False)

    def _write(self, record: Record, *, check: bool = True) -> Record:
        if not record.resource_version:
            raise ValueError(f"{record.key}: only a record read from or written to the store "
                             f"can be updated")
        if check:
            self._check_epoch(record.epoch)
            self._fence.ensure_held()
        record = replace(record, updated_at=utc_now())
        try:
            written = self._kube.replace(self._body(record, record.resource_version))
        except ConflictError:
            return self._refuse_or_conflict(record, "changed")
        return replace(record, resource_version=_version(written))

    def _refuse_or_conflict(self, record: Record, what: str) -> Record:
        stored = self.load(record.key)
        if stored is not None:
            self._refuse_newer(stored, record.epoch)
        raise ConflictError(
            f"{record.key}: the run record was {what} by another writer "
            f"(epoch {stored.epoch if stored else '?'}) while epoch {record.epoch} was writing "
            f"it; read it again")

    def _refuse_newer(self, stored: Record, epoch: int) -> None:
        if stored.epoch > epoch:
            raise LeaseLostError(f"{stored.key}: a newer leader (epoch {stored.epoch}) owns this "
                                 f"run record; epoch {epoch} must stop")

    def _decode(self, cm: Mapping[str, Any]) -> Record:
        meta = cm.get("metadata") or {}
        where = f"run record ConfigMap {meta.get('namespace')}/{meta.get('name')}"
        text = (cm.get("data") or {}).get(DATA_KEY)
        if text is None:
            raise TerminalError(f"{where} has no {DATA_KEY}; delete it to start the run afresh")
        try:
            return record_from_json(json.loads(text), _version(cm))
        except (ValueError, KeyError, TypeError) as e:
            raise TerminalError(f"{where} is unreadable ({type(e).__name__}: {e}); delete it to "
                                f"start the run afresh") from e

    def _body(self, record: Record, resource_version: str) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": record_name(record.key),
            "namespace": self._namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: self._instance,
                       LABEL_ROLE: ROLE_PROGRESS},
            "annotations": {ANN_PROGRESS_FOR: str(record.key)},
        }
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                "data": {DATA_KEY: encode_record(record)}}


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
