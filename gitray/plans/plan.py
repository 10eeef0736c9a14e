"""Plan, WorkloadPlan and Step: a plan as data (each step of a type of the step registry,
``gitray.plans.steptypes``), with its JSON codec. Pure, no I/O.

The JSON form is the public contract in ``schemas/plan.schema.json`` (``formatVersion`` 2:
version 1 plus the progressive-delivery step types; a version-1 plan still reads).
Fields documented as *display-only* (``reason``, ``notes``, ``changes``) are for people; no
decision is ever taken on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitray.core.model import JSON, ObjectKey, SourceLocation
from gitray.plans.quantities import (
    ResourceChange,
    resource_change_from_json,
    resource_change_to_json,
)
from gitray.plans.steptypes import StepType

__all__ = [
    "FORMAT_VERSION",
    "READABLE_FORMAT_VERSIONS",
    "Action",
    "BasisObject",
    "FieldChange",
    "Plan",
    "Step",
    "WorkloadPlan",
    "plan_from_json",
    "plan_schema_problem",
    "plan_to_json",
]

FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (1, 2)  # a version-1 plan is a version-2 plan without new steps


class Action(StrEnum):
    """What a workload's plan amounts to, with its Terraform-like marker."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"  # a new RayService cluster replaces the active one (blue-green)
    DELETE = "delete"
    NOOP = "no-op"

    @property
    def marker(self) -> str:
        return {"create": "+", "update": "~", "replace": "±", "delete": "-", "no-op": " "}[
            self.value
        ]


@dataclass(frozen=True)
class Step:
    """One ordered, idempotent unit of work on one object.

    ``params`` holds everything the executor needs (the manifest to apply, the selector to
    set, timeouts); ``reason`` is display-only.
    """

    id: str
    type: StepType
    target: str  # name of the object acted on (cluster, Service, job or supporting object)
    params: Mapping[str, JSON] = field(default_factory=dict, compare=False, hash=False)
    reason: str = ""


@dataclass(frozen=True)
class FieldChange:
    """Display-only: one changed field, ``path`` like ``spec.headGroupSpec...image``."""

    path: str
    before: JSON
    after: JSON
    origin: str = ""  # the values-file lines the new value comes from (a Helm render)


@dataclass(frozen=True)
class WorkloadPlan:
    key: ObjectKey
    action: Action
    wave: int
    steps: tuple[Step, ...] = ()
    source: SourceLocation | None = None
    desired_hash: str = ""  # hash of the workload's desired spec ("" when removed from Git)
    notes: tuple[str, ...] = ()  # display-only
    changes: tuple[FieldChange, ...] = ()  # display-only
    # display-only (and capacity pre-flight): pod requests added and at peak, when the plan
    # creates, changes or deletes a Ray cluster (gitray.plans.resources)
    resources: ResourceChange | None = None
    # display-only: what a rendered workload comes from ("rendered from charts/x with ...")
    origin: str = ""

    @property
    def has_changes(self) -> bool:
        return bool(self.steps)


@dataclass(frozen=True, order=True)
class BasisObject:
    """A live object the plan was computed against, with the resourceVersion seen."""

    kind: str
    namespace: str
    name: str
    resource_version: str


@dataclass(frozen=True)
class Plan:
    revision: str  # commit SHA (or "worktree" for an uncommitted directory)
    against: str  # "live", "empty" or "revision:<sha>"
    basis: tuple[BasisObject, ...] = ()
    workloads: tuple[WorkloadPlan, ...] = ()
    notes: tuple[str, ...] = ()  # display-only
    label: str = ""  # display-only: what was read, e.g. "examples-repo (working tree)"

    @property
    def has_changes(self) -> bool:
        return any(w.has_changes for w in self.workloads)

    def workload(self, key: ObjectKey) -> WorkloadPlan | None:
        return next((w for w in self.workloads if w.key == key), None)


# ---- JSON codec ---------------------------------------------------------------------------


def _key_json(key: ObjectKey) -> dict[str, str]:
    return {"kind": key.kind, "namespace": key.namespace, "name": key.name}


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-safe data matching ``schemas/plan.schema.json``."""
    workloads = []
    for w in plan.workloads:
        item: dict[str, Any] = {
            "workload": _key_json(w.key),
            "action": w.action.value,
            "wave": w.wave,
            "desiredHash": w.desired_hash,
            "steps": [
                {
                    "id": s.id,
                    "type": s.type.value,
                    "target": s.target,
                    "params": dict(s.params),
                    "reason": s.reason,
                }
                for s in w.steps
            ],
            "notes": list(w.notes),
            "changes": [
                {"path": c.path, "before": c.before, "after": c.after,
                 **({"origin": c.origin} if c.origin else {})} for c in w.changes
            ],
        }
        if w.origin:
            item["origin"] = w.origin
        if w.source is not None:
            item["source"] = {"path": w.source.path, "line": w.source.line, "col": w.source.col}
        if w.resources is not None:
            item["resources"] = resource_change_to_json(w.resources)
        workloads.append(item)
    return {
        "formatVersion": FORMAT_VERSION,
        "revision": plan.revision,
        "against": plan.against,
        "basis": [
            {
                "kind": b.kind,
                "namespace": b.namespace,
                "name": b.name,
                "resourceVersion": b.resource_version,
            }
            for b in plan.basis
        ],
        "workloads": workloads,
        "notes": list(plan.notes),
        "label": plan.label,
        "summary": summarize(plan),
    }


def summarize(plan: Plan) -> dict[str, int]:
    counts = {a.value: 0 for a in Action}
    for w in plan.workloads:
        counts[w.action.value] += 1
    counts["steps"] = sum(len(w.steps) for w in plan.workloads)
    return counts


def plan_from_json(data: Mapping[str, Any]) -> Plan:
    """Inverse of :func:`plan_to_json`. Raises ``ValueError``/``KeyError`` on a bad document;
    callers validate against the schema first for a readable error."""
    if data.get("formatVersion") not in READABLE_FORMAT_VERSIONS:
        raise ValueError(f"unsupported plan formatVersion {data.get('formatVersion')!r}")
    workloads = []
    for item in data["workloads"]:
        k = item["workload"]
        src = item.get("source")
        res = item.get("resources")
        workloads.append(
            WorkloadPlan(
                key=ObjectKey(k["kind"], k["namespace"], k["name"]),
                action=Action(item["action"]),
                wave=int(item["wave"]),
                desired_hash=str(item.get("desiredHash", "")),
                steps=tuple(
                    Step(
                        id=s["id"],
                        type=StepType(s["type"]),
                        target=s["target"],
                        params=s.get("params", {}),
                        reason=s.get("reason", ""),
                    )
                    for s in item["steps"]
                ),
                source=SourceLocation(src["path"], src["line"], src["col"]) if src else None,
                notes=tuple(item.get("notes", ())),
                changes=tuple(
                    FieldChange(c["path"], c.get("before"), c.get("after"),
                                str(c.get("origin", "")))
                    for c in item.get("changes", ())
                ),
                resources=resource_change_from_json(res) if res else None,
                origin=str(item.get("origin", "")),
            )
        )
    return Plan(
        revision=data["revision"],
        against=data["against"],
        basis=tuple(
            BasisObject(b["kind"], b["namespace"], b["name"], b["resourceVersion"])
            for b in data["basis"]
        ),
        workloads=tuple(workloads),
        notes=tuple(data.get("notes", ())),
        label=str(data.get("label", "")),
    )


def plan_schema_problem(data: Any) -> str:
    """The first way ``data`` breaks ``schemas/plan.schema.json``, or "" when it conforms."""
    from gitray.parsing.jsonschemas import schema_errors

    for path, message in schema_errors("plan.schema.json", data):
        where = ".".join(str(p) for p in path)
        return f"{where}: {message}" if where else message
    return ""
