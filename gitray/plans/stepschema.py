"""The step part of ``schemas/plan.schema.json`` (its list of step types and each type's params),
generated from the step registry (``gitray.plans.steptypes``); ``scripts/gen-schemas --only plan``
writes it, and a unit test holds the committed file to it. Pure, no I/O."""

from __future__ import annotations

import copy
import json
from typing import Any

from gitray.plans.stepcodec import Params
from gitray.plans.steptypes import STEP_KINDS

__all__ = ["plan_schema", "plan_schema_text", "step_rules"]


def _params(params: type[Params]) -> dict[str, Any]:
    required = [key for key in params.json_keys().values() if key in params.required()]
    return {**({"required": required} if required else {}), **params.schema}


def step_rules() -> list[dict[str, Any]]:
    """One ``if type is ... then params ...`` rule per distinct params schema, in the registry's
    order (step types whose params schemas are the same share a rule)."""
    groups: dict[str, list[str]] = {}
    for step_type, kind in STEP_KINDS.items():
        params = _params(kind.params)
        if params:
            groups.setdefault(json.dumps(params), []).append(step_type.value)
    rules = []
    for params_text, types in groups.items():
        condition = {"const": types[0]} if len(types) == 1 else {"enum": types}
        rules.append({"if": {"properties": {"type": condition}},
                      "then": {"properties": {"params": json.loads(params_text)}}})
    return rules


def plan_schema(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (the plan schema) with its step types and their params from the registry."""
    out = copy.deepcopy(document)
    step = out["$defs"]["step"]
    step["properties"]["type"]["enum"] = [t.value for t in STEP_KINDS]
    step["allOf"] = step_rules()
    return out


def plan_schema_text(document: dict[str, Any]) -> str:
    """The plan schema's file text (``document`` regenerated)."""
    return json.dumps(plan_schema(document), indent=2) + "\n"
