"""Views of a plan: text (like ``terraform plan``), markdown (for a PR comment), json. Pure.

All three render from the same :class:`~gitray.plans.plan.Plan`; output is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import StrEnum
from typing import TextIO

from gitray.core.model import JSON
from gitray.plans.plan import Action, FieldChange, Plan, WorkloadPlan, plan_to_json
from gitray.plans.quantities import summary_line as resource_summary
from gitray.plans.sensitive import SENSITIVE
from gitray.plans.steptypes import StepType, describe_step

__all__ = ["COMMENT_MARKER", "Format", "json_chunks", "render", "summary_line", "write_plan"]

COMMENT_MARKER = "<!-- gitray-plan -->"
_PODS_NOTE = "pod requests; a range is minReplicas..maxReplicas"


class Format(StrEnum):
    TEXT = "text"
    MARKDOWN = "markdown"
    JSON = "json"


_VERBS = {
    Action.CREATE: "will be created",
    Action.UPDATE: "will be updated in place",
    Action.REPLACE: "will get a new cluster (blue-green)",
    Action.DELETE: "will be deleted",
    Action.NOOP: "is up to date",
}
_COLOURS = {Action.CREATE: "32", Action.UPDATE: "33", Action.REPLACE: "35",
            Action.DELETE: "31", Action.NOOP: "0"}


def _value(value: JSON) -> str:
    text = json.dumps(value, sort_keys=True) if value is not None else "(none)"
    return text if len(text) <= 80 else text[:77] + "..."


def _change_line(change: FieldChange) -> str:
    line = _change(change)
    return f"{line}  (set in {change.origin})" if change.origin else line


def _change(change: FieldChange) -> str:
    if SENSITIVE in (change.before, change.after):  # never a value, only that it changed
        marker = "+" if change.before is None else "-" if change.after is None else "~"
        what = f"{SENSITIVE[:-1]} changed)" if marker == "~" else SENSITIVE
        return f"{marker} {change.path}: {what}"
    if change.before is None:
        return f"+ {change.path}: {_value(change.after)}"
    if change.after is None:
        return f"- {change.path}: {_value(change.before)}"
    return f"~ {change.path}: {_value(change.before)} -> {_value(change.after)}"


def summary_line(plan: Plan) -> str:
    counts = {a: sum(1 for w in plan.workloads if w.action is a) for a in Action}
    if not plan.has_changes:
        return "No changes. The cluster matches this revision."
    steps = sum(len(w.steps) for w in plan.workloads)
    replaced = [w for w in plan.workloads if w.action is Action.REPLACE]
    gradual = sum(1 for w in replaced if _traffic_steps(w))
    how = "blue-green" if not gradual else "incremental" if gradual == len(replaced) \
        else "blue-green or incremental"
    return (f"Plan: {counts[Action.CREATE]} to create, {counts[Action.UPDATE]} to update, "
            f"{counts[Action.REPLACE]} to replace ({how}), {counts[Action.DELETE]} to "
            f"delete; {steps} step{'s' if steps != 1 else ''}.")


def _against(plan: Plan) -> str:
    if plan.against == "empty":
        return "an empty cluster"
    if plan.against.startswith("revision:"):
        return f"the cluster as of revision {plan.against.split(':', 1)[1][:12]}"
    return "the live cluster"


def _what(plan: Plan) -> str:
    return plan.label or f"revision {plan.revision[:12]}"


def _traffic_steps(w: WorkloadPlan) -> int:
    return sum(1 for s in w.steps if s.type is StepType.SHIFT_TRAFFIC and s.params.get("step"))


def _verb(w: WorkloadPlan) -> str:
    if any(s.params.get("recreatePods") for s in w.steps):
        return "will be updated; KubeRay recreates its pods"
    if any(s.params.get("newPodsOnly") for s in w.steps):
        return "will be updated (its running pods keep the old template)"
    steps = _traffic_steps(w)
    if w.action is Action.REPLACE and steps:
        return f"will get a new cluster (incremental: {steps} traffic steps)"
    return _VERBS[w.action]


def _heading(w: WorkloadPlan) -> str:
    return f"{w.key.kind} {w.key.namespace}/{w.key.name}"


def _text(plan: Plan, colour: bool) -> str:
    def paint(code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour and code != "0" else text

    out = [f"gitray plan for {_what(plan)} against {_against(plan)}", ""]
    out += [f"Note: {n}" for n in plan.notes]
    if plan.notes:
        out.append("")
    for w in plan.workloads:
        if not w.has_changes and not w.notes:
            continue
        where = f"  ({w.source})" if w.source else ""
        out.append(f"  # {_heading(w)}{where}")
        line = f"  {w.action.marker} {_heading(w)} {_verb(w)}"
        out.append(paint(_COLOURS[w.action], line))
        if w.origin:
            out.append(f"      {w.origin}")
        if w.resources is not None and w.has_changes:
            out.append(f"      resources: {resource_summary(w.resources)}")
        out += [f"      {_change_line(c)}" for c in w.changes]
        out += [f"      {i}. {describe_step(s)}" for i, s in enumerate(w.steps, 1)]
        out += [f"      note: {n}" for n in w.notes]
        out.append("")
    unchanged = sum(1 for w in plan.workloads if not w.has_changes)
    if unchanged:
        out.append(f"{unchanged} workload{'s' if unchanged != 1 else ''} unchanged.")
    out.append(summary_line(plan))
    return "\n".join(out) + "\n"


def _markdown(plan: Plan) -> str:
    out = [COMMENT_MARKER, f"### gitray plan for {_what(plan)}", "",
           f"Against {_against(plan)}. **{summary_line(plan)}**", ""]
    out += [f"> {n}" for n in plan.notes]
    changed = [w for w in plan.workloads if w.has_changes]
    if changed:
        out += ["| | Workload | Action | Steps |", "|---|---|---|---|"]
        out += [f"| `{w.action.marker}` | `{w.key.namespace}/{w.key.kind}/{w.key.name}` | "
                f"{w.action.value} | {len(w.steps)} |" for w in changed]
        out.append("")
    for w in changed:
        out += ["<details>", f"<summary><code>{w.action.marker} {_heading(w)}</code> "
                f"{_verb(w)}</summary>", ""]
        if w.origin:
            out += [f"_{w.origin}_", ""]
        if w.resources is not None:
            out += [f"**Resources** ({_PODS_NOTE}): {resource_summary(w.resources)}", ""]
        if w.changes:
            out += ["```diff", *(_change_line(c) for c in w.changes), "```"]
        out += [f"{i}. {describe_step(s)}" for i, s in enumerate(w.steps, 1)]
        out += [f"- _{n}_" for n in w.notes]
        out += ["", "</details>", ""]
    return "\n".join(out) + "\n"


def json_chunks(plan: Plan) -> Iterator[str]:
    """``render(plan, Format.JSON)`` in pieces, for writing as they come: ``json.dumps`` with
    an indent joins a list of every piece (~2 million for a plan of 1,000 changed workloads,
    about 100 MB) before returning one string."""
    yield from json.JSONEncoder(indent=2, sort_keys=True).iterencode(plan_to_json(plan))
    yield "\n"


def write_plan(plan: Plan, fmt: Format, out: TextIO, *, colour: bool = False) -> None:
    """``out.write(render(plan, fmt, colour=colour))``; the JSON view written piece by piece."""
    if fmt is not Format.JSON:
        out.write(render(plan, fmt, colour=colour))
        return
    buffer: list[str] = []
    size = 0
    for chunk in json_chunks(plan):
        buffer.append(chunk)
        size += len(chunk)
        if size >= 1 << 16:
            out.write("".join(buffer))
            buffer, size = [], 0
    out.write("".join(buffer))


def render(plan: Plan, fmt: Format, *, colour: bool = False) -> str:
    if fmt is Format.JSON:
        return "".join(json_chunks(plan))
    if fmt is Format.MARKDOWN:
        return _markdown(plan)
    return _text(plan, colour)
