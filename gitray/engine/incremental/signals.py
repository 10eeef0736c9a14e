"""Promote and abort signals, stored next to the run records. Does I/O (through :class:`Kube`).

Storage: ConfigMap ``gitray-signal-<12 hex of the workload key's hash>`` (the same hash as the
run record ``gitray-run-...``) in the Lease's namespace, labelled like the run records but with
``gitray.io/role=signal``, holding one JSON document under ``signal.json``
(``gitray.engine.incremental.upgradecontrol.Signal``). It is never part of the live state.

Who writes what, and how:

- ``gitray promote``/``gitray abort`` (no Lease: the daemon holds it) *create* the ConfigMap,
  or *replace* it with the ``resourceVersion`` they read (compare-and-swap), so two commands
  racing cannot both win and a signal the executor just consumed is not lost unseen.
- the executor, holding the Lease, marks a signal consumed (fenced, then compare-and-swap) when
  it acted on it — or found it stale. Signals are never deleted by gitray (so it needs no
  ``delete`` on ConfigMaps of its namespace); there is at most one per workload.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gitray.core.errors import Aborted, ConflictError, TerminalError, TransientError
from gitray.core.model import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_SIGNAL,
    ObjectKey,
)
from gitray.engine.fence import Fence
from gitray.engine.incremental.upgradecontrol import (
    Control,
    Signal,
    SignalAction,
    consumes,
    control,
    signal_from_json,
    signal_to_json,
)
from gitray.engine.record import ANN_PROGRESS_FOR, record_name, utc_now
from gitray.k8s.client import Kube
from gitray.plans.plan import Step

__all__ = ["DATA_KEY", "RunSteering", "SignalStore", "signal_name"]

DATA_KEY = "signal.json"


FENCE_EVERY_S = 10.0  # how often a hold confirms the Lease (LeaseLostError ends it)


def signal_name(key: ObjectKey) -> str:
    return record_name(key).replace("gitray-run-", "gitray-signal-", 1)


class SignalStore:
    """The signals of the run records in ``namespace``."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self._kube = kube
        self._namespace = namespace

    def load(self, key: ObjectKey) -> Signal | None:
        cm = self._kube.get_or_none("v1", "ConfigMap", self._namespace, signal_name(key))
        return None if cm is None else self._decode(cm)

    def put(self, signal: Signal, instance: str) -> Signal:
        """Create the signal, or replace the one read as ``signal.resource_version``
        (compare-and-swap: ``ConflictError`` when it changed since)."""
        body = self._body(signal, instance)
        written = (self._kube.replace(body) if signal.resource_version
                   else self._kube.create(body))
        return replace(signal, resource_version=_version(written))

    def consume(self, signal: Signal, fence: Fence, instance: str) -> None:
        """Mark ``signal`` acted on (fenced). Lost to a newer write (a command's new signal):
        nothing is done, the newer signal stays pending."""
        fence.ensure_held()
        with contextlib.suppress(ConflictError):
            self._kube.replace(self._body(replace(signal, consumed_at=utc_now()), instance))

    def _body(self, signal: Signal, instance: str) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": signal_name(signal.key), "namespace": self._namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: instance,
                       LABEL_ROLE: ROLE_SIGNAL},
            "annotations": {ANN_PROGRESS_FOR: str(signal.key)},
        }
        if signal.resource_version:
            metadata["resourceVersion"] = signal.resource_version
        text = json.dumps(signal_to_json(signal), sort_keys=True, separators=(",", ":"))
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                "data": {DATA_KEY: text}}

    def _decode(self, cm: Mapping[str, Any]) -> Signal:
        meta = cm.get("metadata") or {}
        text = (cm.get("data") or {}).get(DATA_KEY)
        try:
            return signal_from_json(json.loads(text or ""), _version(cm))
        except (ValueError, KeyError, TypeError) as e:
            raise TerminalError(f"signal ConfigMap {meta.get('namespace')}/{meta.get('name')} "
                                f"is unreadable ({type(e).__name__}: {e}); delete it and "
                                "send the signal again") from e


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class RunSteering:
    """One run's signals as its steps see them (``gitray.engine.incremental.traffic.Steering``): a
    promote ends the pause it names, an abort rolls the upgrade back; a signal of another run
    is marked consumed and ignored. A failed read counts as no signal (the next look, ~2 s
    later, reads again)."""

    def __init__(self, store: SignalStore, fence: Fence, instance: str, key: ObjectKey,
                 revision: str, desired_hash: str) -> None:
        self._store, self._fence, self._instance = store, fence, instance
        self._run = (key, revision, desired_hash)
        self._fenced = time.monotonic()

    def check(self, step: Step, *, at_boundary: bool = False) -> tuple[Control, str]:
        """What the run's signal means for ``step`` (a promote or an approval it names is
        consumed, unless only looked at ``at_boundary``: ``upgradecontrol.consumes``)."""
        key, revision, desired_hash = self._run
        if time.monotonic() - self._fenced >= FENCE_EVERY_S:
            # a long hold (a pause until promoted) must not outlive this process's leadership
            self._fence.ensure_held()
            self._fenced = time.monotonic()
        try:
            signal = self._store.load(key)
        except TransientError:
            return Control.NONE, ""
        what = control(signal, key, revision, desired_hash, step)
        if signal is None or what is Control.NONE:
            return Control.NONE, ""
        if consumes(what, at_boundary=at_boundary):
            self._store.consume(signal, self._fence, self._instance)
        if what is Control.STALE:
            return Control.NONE, ""
        return what, f"requested {signal.requested_at}" + (
            f" by {signal.requested_by}" if signal.requested_by else "")

    def aborted(self, step: Step) -> None:
        """Raise ``Aborted`` when an abort of this run is pending (at a step boundary)."""
        what, who = self.check(step, at_boundary=True)
        if what is Control.ABORT:
            raise Aborted(f"aborted by gitray abort ({who})")

    def consume_abort(self) -> None:
        """The abort was acted on (the upgrade rolled back): mark it consumed."""
        key, revision, desired_hash = self._run
        signal = self._store.load(key)
        if signal is not None and signal.pending and signal.action is SignalAction.ABORT \
                and signal.is_for(key, revision, desired_hash):
            self._store.consume(signal, self._fence, self._instance)
