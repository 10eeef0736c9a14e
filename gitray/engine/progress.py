"""Durable per-workload run records, one ConfigMap each. Does I/O (through :class:`Kube`).

A run record holds what a new leader or a restarted process needs to resume a workload's plan
mid-way (SPEC §4): the plan itself, the cursor (index of the next step), each finished step's
result, the state of the run and the epoch of the leader that wrote it. It is written before
the first mutation and after every step — and before a step with a timeout begins, with that
step's start (``current``), so that a leader resuming it keeps its deadline
(``gitray.engine.deadlines``). A record without ``currentStep`` (written before starts were
kept) reads as one with no start: its step's timeout then counts from when it is resumed.

Storage: one ConfigMap per workload in the Lease's namespace (its form:
``gitray.engine.record``, the codec of this pair).

Reading needs no Lease: :class:`RecordReader` (``gitray plan``, ``gitray status``, ``gitray
promote``/``abort``, tests). Writing does: :class:`ProgressStore` is the reader with a fenced
writer on top. Writes are fenced: every write first calls ``fence.ensure_held()``, then replaces the
ConfigMap with the ``resourceVersion`` last read (compare-and-swap). When the swap is lost the
record is read again; if a newer epoch wrote it the writer gets ``LeaseLostError`` — a record
is never overwritten by an older epoch's writer.
"""

from __future__ import annotations

from dataclasses import replace

from gitray.core.errors import ConflictError, LeaseLostError
from gitray.core.model import ObjectKey
from gitray.engine.fence import Fence
from gitray.engine.record import (
    Record,
    RunState,
    StepRecord,
    StepStart,
    StepStatus,
    configmap_of,
    record_name,
    record_of_configmap,
    record_selector,
    remember_run,
    resource_version_of,
    trim_message,
    utc_now,
)
from gitray.k8s.client import Kube
from gitray.plans.plan import WorkloadPlan

__all__ = ["ProgressStore", "RecordReader"]


class RecordReader:
    """Run records of one gitray instance, in ConfigMaps of ``namespace``: read only, no Lease.

    ``instance`` selects what :meth:`list` returns; :meth:`load` reads a workload's record
    whichever instance wrote it."""

    def __init__(self, kube: Kube, namespace: str, instance: str = "") -> None:
        self._kube = kube
        self._namespace = namespace
        self._instance = instance

    def load(self, key: ObjectKey) -> Record | None:
        cm = self._kube.get_or_none("v1", "ConfigMap", self._namespace, record_name(key))
        return None if cm is None else record_of_configmap(cm)

    def list(self) -> list[Record]:
        """Every record of this instance, from one LIST by label selector, sorted by key."""
        items, _ = self._kube.list("v1", "ConfigMap", namespace=self._namespace,
                                   label_selector=record_selector(self._instance))
        return sorted((record_of_configmap(cm) for cm in items), key=lambda r: r.key)


class ProgressStore(RecordReader):
    """The fenced writer of ``instance``'s run records (reads as :class:`RecordReader`).

    ``fence`` is the Lease of the workloads written: the one Lease when unsharded, else the
    Lease of their shard ``shard`` (``2-of-6``), which every record begun or resumed here
    names beside its epoch."""

    def __init__(self, kube: Kube, namespace: str, instance: str, fence: Fence,
                 shard: str = "") -> None:
        super().__init__(kube, namespace, instance)
        self._fence = fence
        self._shard = shard

    # ---- writes -------------------------------------------------------------------------

    def begin(self, wp: WorkloadPlan, revision: str, epoch: int) -> Record:
        """Start a run of ``wp`` (cursor 0), replacing any earlier record of the workload
        unless a newer epoch wrote it. Call before the plan's first mutation."""
        record = Record(key=wp.key, revision=revision, desired_hash=wp.desired_hash, plan=wp,
                        cursor=0, steps=(), state=RunState.RUNNING, reason="", epoch=epoch,
                        updated_at="", shard=self._shard)
        return self._take_over(record)

    def resume(self, record: Record, epoch: int) -> Record:
        """Continue ``record`` (as loaded) under ``epoch``: same plan, cursor and results.
        Refused when a newer epoch wrote it; a conflict when it changed since it was loaded."""
        if record.state is not RunState.RUNNING:
            raise ValueError(f"{record.key}: cannot resume a run that is {record.state}")
        self._refuse_newer(record, epoch)
        return self._write(replace(record, epoch=epoch, shard=self._shard))

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
                created = self._kube.create(
                    configmap_of(record, self._namespace, self._instance, ""))
            except ConflictError:
                return self._refuse_or_conflict(record, "created")
            return replace(record, resource_version=resource_version_of(created))
        stored = record_of_configmap(current)
        self._refuse_newer(stored, record.epoch)
        # the runs it started outlive a run record: a new plan keeps them
        return self._write(replace(record, resource_version=resource_version_of(current),
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
            written = self._kube.replace(configmap_of(record, self._namespace, self._instance,
                                                       record.resource_version))
        except ConflictError:
            return self._refuse_or_conflict(record, "changed")
        return replace(record, resource_version=resource_version_of(written))

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
