"""The step registry (gitray.plans.steptypes): every step type has a row and an engine handler,
the committed plan schema's step types and per-type params are the ones generated from the rows
(scripts/gen-schemas --only plan), and each row's params codec reads and writes back the params
the planner really makes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from gitray.core.config import Config
from gitray.core.waits import Clock
from gitray.engine.actions import Actions
from gitray.engine.incremental.traffic import TRAFFIC_STEPS
from gitray.git.source import read_snapshot
from gitray.plans.load import load_snapshot
from gitray.plans.plan import Step
from gitray.plans.planner import compute_plan
from gitray.plans.stepschema import plan_schema, plan_schema_text
from gitray.plans.steptypes import STEP_KINDS, StepType, describe_step, params_of
from tests.unit.builders import NOW, cluster_for, live, with_objects
from tests.unit.plans.test_plan_incremental import ANALYSIS, NEW, OLD, incremental, one, plan_of

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_TEXT = (ROOT / "schemas" / "plan.schema.json").read_text()
SCHEMA = json.loads(SCHEMA_TEXT)


def test_every_step_type_has_a_row() -> None:
    assert set(STEP_KINDS) == set(StepType)
    assert all(kind.step_type is t for t, kind in STEP_KINDS.items())


def handled() -> dict[str, set[StepType]]:
    """The engine's handler tables (built with the adapters unused: only their keys count)."""
    actions = Actions(cast(Any, None), cast(Any, None), cast(Any, None), Clock())
    return {"actions": set(actions._handlers), "timed": set(actions._timed),
            "traffic": set(TRAFFIC_STEPS)}


def test_every_step_type_has_exactly_one_engine_handler() -> None:
    tables = handled()
    for t in StepType:
        assert sum(t in table for table in tables.values()) == 1, t


def test_the_timed_handlers_are_the_steps_with_a_timeout() -> None:
    timed = {t for t, kind in STEP_KINDS.items() if kind.timeout_s is not None}
    assert timed == handled()["timed"]


def schema_required() -> dict[str, set[str]]:
    """step type -> the params keys plan.schema.json requires of it."""
    found: dict[str, set[str]] = {t.value: set() for t in StepType}
    for rule in SCHEMA["$defs"]["step"]["allOf"]:
        condition = rule["if"]["properties"]["type"]
        types = condition.get("enum") or [condition["const"]]
        required = set(rule["then"]["properties"]["params"].get("required", ()))
        for t in types:
            found[t] |= required
    return found


def test_the_plan_schema_requires_the_params_each_row_requires() -> None:
    schema = schema_required()
    assert set(schema) == {t.value for t in StepType}
    assert set(SCHEMA["$defs"]["step"]["properties"]["type"]["enum"]) == set(schema)
    rows = {t.value: set(kind.params.required()) for t, kind in STEP_KINDS.items()}
    assert rows == schema


def test_the_committed_plan_schema_is_generated_from_the_registry() -> None:
    assert plan_schema_text(SCHEMA) == SCHEMA_TEXT, "run scripts/gen-schemas --only plan"


def test_the_schema_check_would_catch_a_step_type_the_schema_lacks() -> None:
    stale = json.loads(SCHEMA_TEXT)
    stale["$defs"]["step"]["properties"]["type"]["enum"].remove("pause")
    rules = stale["$defs"]["step"]["allOf"]
    rules.remove(next(r for r in rules if r["if"]["properties"]["type"].get("const") == "pause"))
    assert json.dumps(stale, indent=2) + "\n" != plan_schema_text(stale)
    assert plan_schema(stale) == SCHEMA


def planned_steps() -> list[Step]:
    """The steps of examples-repo planned against an empty cluster, of an incremental upgrade
    with analysis and pauses, and of one left half-way by a new commit."""
    result = load_snapshot(read_snapshot(str(ROOT / "examples-repo")))
    examples = compute_plan(result.workloads, live(), Config(), revision="e" * 40,
                            against="empty", now=NOW)
    upgrade = one(plan_of(incremental("ray:new", analysis=ANALYSIS), live(OLD)))
    left = one(plan_of(incremental("ray:newer"), with_objects(live(OLD), cluster_for(NEW))))
    return [s for w in examples.workloads for s in w.steps] + list(upgrade.steps) + \
        list(left.steps)


STEPS = planned_steps()


def test_the_planned_steps_cover_most_step_types() -> None:
    assert len({s.type for s in STEPS}) >= 12


@pytest.mark.parametrize("step", STEPS, ids=lambda s: f"{s.id}")
def test_the_params_codec_reads_and_writes_back_what_the_planner_made(step: Step) -> None:
    typed = params_of(step)
    assert type(typed) is STEP_KINDS[step.type].params
    assert typed.to_json() == dict(step.params)
    assert describe_step(step)


def test_a_missing_required_param_is_named() -> None:
    step = Step("1-wait", StepType.WAIT_CLUSTER_READY, "c", {"cluster": "c"})
    with pytest.raises(KeyError, match="timeoutSeconds"):
        params_of(step)


def test_the_flags_the_engine_reads() -> None:
    k = STEP_KINDS
    assert {t for t in StepType if not k[t].mutates} == {
        StepType.WAIT_CLUSTER_READY, StepType.WAIT_SERVE_RUNNING, StepType.WAIT_JOB,
        StepType.WAIT_INTERVAL, StepType.PAUSE, StepType.AWAIT_APPROVAL}
    assert {t for t in StepType if k[t].moves_traffic} == {
        StepType.SWITCH_SERVICE, StepType.CREATE_SERVICE, StepType.SHIFT_TRAFFIC}
    assert {t for t in StepType if k[t].supersedable} == {
        StepType.WAIT_CLUSTER_READY, StepType.DEPLOY_SERVE, StepType.WAIT_SERVE_RUNNING,
        StepType.AWAIT_APPROVAL}
    assert {t for t in StepType if k[t].holds} == {StepType.WAIT_INTERVAL, StepType.PAUSE}
    assert {t for t in StepType if k[t].dry_run} == {
        StepType.CREATE_CLUSTER, StepType.UPDATE_CLUSTER, StepType.CREATE_SERVICE,
        StepType.CREATE_JOB, StepType.APPLY_OBJECT}
