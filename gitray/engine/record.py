"""A run record as stored: its types, their JSON codec and its ConfigMap form (the codec of
the pair codec/store; the store is ``gitray.engine.progress``). No I/O (``utc_now`` reads the
clock).

See ``gitray.engine.progress`` for what a record holds and how it is written. :class:`Record`
and :class:`StepRecord` are the persisted, JSON-safe form; the executor's in-memory outcomes are
converted into them, never stored directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitray.core.errors import TerminalError
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
from gitray.engine.shards import LABEL_SHARD
from gitray.plans.plan import FORMAT_VERSION as PLAN_FORMAT_VERSION
from gitray.plans.plan import Plan, WorkloadPlan, plan_from_json, plan_to_json

__all__ = [
    "ANN_PROGRESS_FOR",
    "DATA_KEY",
    "MAX_MESSAGE_CHARS",
    "MAX_RECORD_BYTES",
    "RECORD_FORMAT_VERSION",
    "Record",
    "RunOutcome",
    "RunState",
    "StepRecord",
    "StepStart",
    "StepStatus",
    "configmap_of",
    "encode_record",
    "record_from_json",
    "record_name",
    "record_of_configmap",
    "record_selector",
    "record_to_json",
    "remember_run",
    "remembered_runs",
    "resource_version_of",
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
class RunOutcome:
    """A RayJob run gitray started (persisted): its name and how it ended, as the wait step
    saw it ("started" until then). Remembered so that a run KubeRay deleted when it finished
    (``deletionStrategy``) is never started again."""

    name: str
    outcome: str


MAX_REMEMBERED_RUNS = 20  # per workload, newest kept
_RUN_STEPS = {"create-job", "wait-job"}


def remember_run(runs: tuple[RunOutcome, ...], step_type: str, target: str, status: str,
                 message: str) -> tuple[RunOutcome, ...]:
    """``runs`` after a create-job or wait-job step on run ``target`` ended (others: as is).

    A started run is remembered; its wait step's message (success or failure) becomes its
    outcome. A failed create-job started nothing."""
    if step_type not in _RUN_STEPS or (step_type == "create-job" and status != "ok"):
        return runs
    outcome = "started" if step_type == "create-job" else trim_message(message, 300)
    kept = tuple(r for r in runs if r.name != target)
    return (*kept, RunOutcome(target, outcome))[-MAX_REMEMBERED_RUNS:]


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
    # failed analyses of an incremental upgrade so far: "<step id>: <check> <value> ..."
    analysis_failures: tuple[str, ...] = ()
    # RayJob runs started for this workload (kept across its later plans)
    runs: tuple[RunOutcome, ...] = ()
    # the shard whose holder wrote it ("2-of-6", gitray.engine.shards.shard_label; "" when
    # unsharded): ``epoch`` is that shard Lease's
    shard: str = ""
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
    if record.analysis_failures:  # likewise absent when there are none
        data["analysisFailures"] = list(record.analysis_failures)
    if record.runs:
        data["runs"] = [{"name": r.name, "outcome": r.outcome} for r in record.runs]
    if record.shard:  # absent when unsharded: the document stays as it was before sharding
        data["shard"] = record.shard
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
        analysis_failures=tuple(str(f) for f in data.get("analysisFailures") or ()),
        runs=tuple(RunOutcome(str(r["name"]), str(r["outcome"]))
                   for r in data.get("runs") or ()),
        shard=str(data.get("shard", "")),
        resource_version=resource_version,
    )


def record_name(key: ObjectKey) -> str:
    """Name of the ConfigMap holding ``key``'s run record."""
    return f"gitray-run-{stable_hash(str(key), 12)}"


def encode_record(record: Record) -> str:
    text = json.dumps(record_to_json(record), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    size = len(text.encode())
    if size > MAX_RECORD_BYTES:
        raise TerminalError(
            f"{record.key}: the run record would be {size} bytes, over the ConfigMap limit of "
            f"{MAX_RECORD_BYTES} bytes; split the workload's plan (fewer or smaller steps)")
    return text


def remembered_runs(records: Sequence[Record]) -> dict[ObjectKey, dict[str, str]]:
    """Per workload, run name -> outcome of the RayJob runs gitray started (a planner input)."""
    return {r.key: {run.name: run.outcome for run in r.runs} for r in records if r.runs}


# ---- ConfigMap form (pure) ------------------------------------------------------------------
#
# ConfigMap ``gitray-run-<12 hex of the workload key's hash>``, labelled
# ``app.kubernetes.io/managed-by=gitray``, ``gitray.io/instance=<instance>``,
# ``gitray.io/role=progress``, annotated ``gitray.io/progress-for=<namespace>/<Kind>/<name>``,
# with one JSON document under ``record.json``. (Not ``gitray.io/workload-key``: the planner
# treats objects carrying it as owned by the workload.)


def record_selector(instance: str) -> str:
    """The label selector of ``instance``'s run records."""
    return (f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={instance},"
            f"{LABEL_ROLE}={ROLE_PROGRESS}")


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def record_of_configmap(cm: Mapping[str, Any]) -> Record:
    """The record a run-record ConfigMap holds; ``TerminalError`` saying how to recover when it
    is unreadable."""
    meta = cm.get("metadata") or {}
    where = f"run record ConfigMap {meta.get('namespace')}/{meta.get('name')}"
    text = (cm.get("data") or {}).get(DATA_KEY)
    if text is None:
        raise TerminalError(f"{where} has no {DATA_KEY}; delete it to start the run afresh")
    try:
        return record_from_json(json.loads(text), resource_version_of(cm))
    except (ValueError, KeyError, TypeError) as e:
        raise TerminalError(f"{where} is unreadable ({type(e).__name__}: {e}); delete it to "
                            f"start the run afresh") from e


def configmap_of(record: Record, namespace: str, instance: str,
                 resource_version: str) -> dict[str, Any]:
    """The ConfigMap storing ``record`` (with ``resource_version`` for a compare-and-swap)."""
    metadata: dict[str, Any] = {
        "name": record_name(record.key),
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: instance,
                   LABEL_ROLE: ROLE_PROGRESS},
        "annotations": {ANN_PROGRESS_FOR: str(record.key)},
    }
    if record.shard:  # (for LISTs of one shard's records)
        metadata["labels"][LABEL_SHARD] = record.shard
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": {DATA_KEY: encode_record(record)}}
