"""Suspend, resume and retry: what people ask of one workload, stored next to its run record.
I/O (:class:`ControlStore`, through :class:`Kube`), beside the document's codec and the
decisions it feeds.

Storage: ConfigMap ``gitray-control-<12 hex of the workload key's hash>`` (the same hash as the
run record ``gitray-run-...``) in the Lease's namespace, labelled like the run records with
``gitray.io/role=control``, one JSON document under ``control.json``. Commands
(``gitray suspend|resume|retry``, no Lease) create it or replace it by compare-and-swap;
``gitray sync`` and ``gitray apply`` only read it (one LIST per pass). Never part of the live
state; never deleted by gitray.

- **suspended**: neither ``gitray sync`` nor ``gitray apply`` starts a run of the workload
  (its commit status stays pending, saying who suspended it and when); a run already under way
  goes on to its end. ``resume`` lifts it.
- **retry**: a workload whose run failed at a revision is not run again at that revision
  (a later commit retries it). ``retry`` asks for one more run at the same revision: honoured
  when the request is newer than the failed run's end, so it is used once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gitray.core.errors import TerminalError
from gitray.core.model import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_CONTROL,
    ObjectKey,
)
from gitray.engine.record import ANN_PROGRESS_FOR, Record, RunState, record_name
from gitray.k8s.client import Kube

__all__ = ["DATA_KEY", "Control", "ControlStore", "control_name", "retry_wanted",
           "suspension"]

DATA_KEY = "control.json"


@dataclass(frozen=True)
class Control:
    key: ObjectKey
    suspended_by: str = ""
    suspended_at: str = ""  # "" when not suspended
    retry_by: str = ""
    retry_at: str = ""  # the latest retry request ("" when none)
    resource_version: str = ""  # storage metadata for the compare-and-swap

    @property
    def suspended(self) -> bool:
        return bool(self.suspended_at)


def control_name(key: ObjectKey) -> str:
    return record_name(key).replace("gitray-run-", "gitray-control-", 1)


def suspension(control: Control | None) -> str:
    """The line a held workload's status says, "" when it is not suspended."""
    if control is None or not control.suspended:
        return ""
    by = f" by {control.suspended_by}" if control.suspended_by else ""
    return (f"suspended{by} at {control.suspended_at} (gitray resume {control.key} lets it "
            "run)")


def retry_wanted(control: Control | None, record: Record) -> bool:
    """Whether a retry was asked for after ``record``'s failed run ended (RFC 3339 UTC
    timestamps of one format compare as text)."""
    return (control is not None and record.state is RunState.FAILED
            and bool(control.retry_at) and control.retry_at > record.updated_at)


def control_to_json(control: Control) -> dict[str, Any]:
    return {"workload": {"kind": control.key.kind, "namespace": control.key.namespace,
                         "name": control.key.name},
            "suspended": {"by": control.suspended_by, "at": control.suspended_at}
            if control.suspended else None,
            "retry": {"by": control.retry_by, "at": control.retry_at}
            if control.retry_at else None}


def control_from_json(data: Mapping[str, Any], resource_version: str = "") -> Control:
    w = data["workload"]
    suspended = data.get("suspended") or {}
    retry = data.get("retry") or {}
    return Control(ObjectKey(str(w["kind"]), str(w["namespace"]), str(w["name"])),
                   str(suspended.get("by", "")), str(suspended.get("at", "")),
                   str(retry.get("by", "")), str(retry.get("at", "")), resource_version)


class ControlStore:
    """The controls of the workloads whose run records are in ``namespace``."""

    def __init__(self, kube: Kube, namespace: str, instance: str = "gitray") -> None:
        self._kube, self._namespace, self._instance = kube, namespace, instance
        # (the instance label is informational: controls are found by workload in the
        # Lease's namespace, as run records and signals are)

    def load(self, key: ObjectKey) -> Control | None:
        cm = self._kube.get_or_none("v1", "ConfigMap", self._namespace, control_name(key))
        return None if cm is None else _decode(cm)

    def load_all(self) -> dict[ObjectKey, Control]:
        """Every control, from one LIST by label selector."""
        items, _ = self._kube.list("v1", "ConfigMap", namespace=self._namespace,
                                   label_selector=self.selector())
        return {c.key: c for c in (_decode(cm) for cm in items)}

    def put(self, control: Control) -> Control:
        """Create it, or replace the one read as ``control.resource_version``
        (compare-and-swap: ``ConflictError`` when it changed since)."""
        metadata: dict[str, Any] = {
            "name": control_name(control.key), "namespace": self._namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: self._instance,
                       LABEL_ROLE: ROLE_CONTROL},
            "annotations": {ANN_PROGRESS_FOR: str(control.key)}}
        if control.resource_version:
            metadata["resourceVersion"] = control.resource_version
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                "data": {DATA_KEY: json.dumps(control_to_json(control), sort_keys=True)}}
        written = (self._kube.replace(body) if control.resource_version
                   else self._kube.create(body))
        return replace(control, resource_version=_version(written))

    @staticmethod
    def selector() -> str:
        return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_ROLE}={ROLE_CONTROL}"


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _decode(cm: Mapping[str, Any]) -> Control:
    meta = cm.get("metadata") or {}
    try:
        return control_from_json(json.loads((cm.get("data") or {}).get(DATA_KEY) or ""),
                                 _version(cm))
    except (ValueError, KeyError, TypeError) as e:
        raise TerminalError(f"control ConfigMap {meta.get('namespace')}/{meta.get('name')} is "
                            f"unreadable ({type(e).__name__}: {e}); delete it and run gitray "
                            "suspend/resume/retry again") from e
