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

:class:`Record` and :class:`StepRecord` are the persisted, JSON-safe form; the executor's
in-memory outcomes are converted into them, never stored directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from gitray.core.errors import ConflictError, LeaseLostError, TerminalError
from gitray.core.model import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_PROGRESS,
    ObjectKey,
    stable_hash,
)
from gitray.core.timefmt import utc_timestamp
from gitray.engine.fence import Fence
from gitray.k8s.client import Kube
from gitray.plans.plan import FORMAT_VERSION as PLAN_FORMAT_VERSION
from gitray.plans.plan import Plan, WorkloadPlan, plan_from_json, plan_to_json

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

RECORD_FORMAT_VERSION = 1
ANN_PROGRESS_FOR = "gitray.io/progress-for"
DATA_KEY = "record.json"
# A ConfigMap's data may hold 1 MiB; keep a margin for metadata and the JSON string escaping
# the API server applies when storing it.
MAX_RECORD_BYTES = 1024 * 1024 - 16 * 1024
MAX_MESSAGE_CHARS = 4000  # per step message / reason (Serve tracebacks can be long)


class RunState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


def utc_now() -> str:
    """Now as ISO 8601 UTC with milliseconds, e.g. ``2026-11-30T09:35:49.123Z``."""
    return utc_timestamp(digits=3)


def trim_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, keeping its head and its tail (where a
    traceback's cause is)."""
    if len(text) <= limit:
        return text
    marker = f" … [{len(text) - limit} chars cut] … "
    head = (limit - len(marker)) // 3
    tail = limit - len(marker) - head
    return text[:head] + marker + text[len(text) - tail:]


@dataclass(frozen=True)
class StepRecord:
    """The persisted result of one step."""

    id: str
    type: str  # a StepType value
    status: StepStatus
    message: str = ""
    started_at: str = ""  # ISO 8601 UTC
    finished_at: str = ""


@dataclass(frozen=True)
class StepStart:
    """When the step at the cursor first began, and under which Lease epoch (persisted)."""

    id: str
    started_at: str  # ISO 8601 UTC
    epoch: int


@dataclass(frozen=True)
class Record:
    """One workload's run, as stored.

    ``resource_version`` is the ConfigMap version this record was read or written as: storage
    metadata for the compare-and-swap, not part of the stored document."""

    key: ObjectKey
    revision: str
    desired_hash: str
    plan: WorkloadPlan
    cursor: int  # index of the next step to run
    steps: tuple[StepRecord, ...]  # results in plan order, one per step id
    state: RunState
    reason: str
    epoch: int
    updated_at: str
    current: StepStart | None = None  # the running step's start (steps with a timeout only)
    resource_version: str = field(default="", compare=False)

    @property
    def next_step(self) -> str | None:
        """Id of the step at the cursor (None when every step has run)."""
        steps = self.plan.steps
        return steps[self.cursor].id if self.cursor < len(steps) else None


# ---- JSON codec (pure) ----------------------------------------------------------------------


def workload_plan_to_json(wp: WorkloadPlan) -> dict[str, Any]:
    """One workload's entry in the plan JSON (the ``workloads[]`` shape of ``plan_to_json``)."""
    item: dict[str, Any] = plan_to_json(Plan(revision="", against="", workloads=(wp,)))[
        "workloads"][0]
    return item


def workload_plan_from_json(item: Mapping[str, Any]) -> WorkloadPlan:
    document = {"formatVersion": PLAN_FORMAT_VERSION, "revision": "", "against": "",
                "basis": [], "workloads": [item]}
    return plan_from_json(document).workloads[0]


def record_to_json(record: Record) -> dict[str, Any]:
    data: dict[str, Any] = {
        "formatVersion": RECORD_FORMAT_VERSION,
        "workload": {"kind": record.key.kind, "namespace": record.key.namespace,
                     "name": record.key.name},
        "revision": record.revision,
        "desiredHash": record.desired_hash,
        "plan": workload_plan_to_json(record.plan),
        "cursor": record.cursor,
        "steps": [{"id": s.id, "type": s.type, "status": s.status.value, "message": s.message,
                   "startedAt": s.started_at, "finishedAt": s.finished_at}
                  for s in record.steps],
        "state": record.state.value,
        "reason": record.reason,
        "epoch": record.epoch,
        "updatedAt": record.updated_at,
    }
    if record.current is not None:  # absent, not null: the document stays as it was without
        c = record.current
        data["currentStep"] = {"id": c.id, "startedAt": c.started_at, "epoch": c.epoch}
    return data


def record_from_json(data: Mapping[str, Any], resource_version: str = "") -> Record:
    """Inverse of :func:`record_to_json`; ``ValueError``/``KeyError``/``TypeError`` on a bad
    document."""
    if data.get("formatVersion") != RECORD_FORMAT_VERSION:
        raise ValueError(f"unsupported formatVersion {data.get('formatVersion')!r}")
    k = data["workload"]
    c = data.get("currentStep")
    return Record(
        key=ObjectKey(kind=k["kind"], namespace=k["namespace"], name=k["name"]),
        revision=str(data["revision"]),
        desired_hash=str(data["desiredHash"]),
        plan=workload_plan_from_json(data["plan"]),
        cursor=int(data["cursor"]),
        steps=tuple(StepRecord(id=s["id"], type=s["type"], status=StepStatus(s["status"]),
                               message=s.get("message", ""), started_at=s.get("startedAt", ""),
                               finished_at=s.get("finishedAt", ""))
                    for s in data["steps"]),
        state=RunState(data["state"]),
        reason=str(data.get("reason", "")),
        epoch=int(data["epoch"]),
        updated_at=str(data.get("updatedAt", "")),
        current=None if c is None else StepStart(id=str(c["id"]),
                                                 started_at=str(c["startedAt"]),
                                                 epoch=int(c["epoch"])),
        resource_version=resource_version,
    )


def record_name(key: ObjectKey) -> str:
    """Name of the ConfigMap holding ``key``'s run record."""
    return f"gitray-run-{stable_hash(str(key), 12)}"


def _encode(record: Record) -> str:
    text = json.dumps(record_to_json(record), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    size = len(text.encode())
    if size > MAX_RECORD_BYTES:
        raise TerminalError(
            f"{record.key}: the run record would be {size} bytes, over the ConfigMap limit of "
            f"{MAX_RECORD_BYTES} bytes; split the workload's plan (fewer or smaller steps)")
    return text


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
        return self._write(replace(record, steps=steps, cursor=cursor, current=None))

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
        return self._write(replace(record, resource_version=_version(current)), check=False)

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
                "data": {DATA_KEY: _encode(record)}}


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
