"""A step's timeout counts from its first start, across leaders: the pure parts.

The deadline arithmetic of ``gitray.engine.deadlines`` and the run record's ``currentStep``
(its JSON codec, and records written before it existed). The store's writes and a resumed wait
at another leader are tested against the real API server and real ``gitray sync`` processes
(tests/integration/test_progress.py, tests/integration/test_handover.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from gitray.core.model import ObjectKey, SourceLocation
from gitray.engine.actions import Actions
from gitray.engine.deadlines import Budget, seconds_since, step_budget, step_timeout
from gitray.engine.record import (
    RECORD_FORMAT_VERSION,
    Record,
    RunState,
    StepRecord,
    StepStart,
    StepStatus,
    record_from_json,
    record_to_json,
)
from gitray.plans.plan import Action, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
STARTED = "2026-11-30T11:59:40.250Z"  # 19.75 s before NOW


def step(kind: StepType, timeout: float | None = None, target: str = "svc-1a2b3") -> Step:
    params = {} if timeout is None else {"timeoutSeconds": timeout}
    return Step(id=f"2-{kind.value}", type=kind, target=target, params=params)


@pytest.mark.parametrize(("case", "given", "expected"), [
    ("wait-cluster-ready uses the plan's timeout", step(StepType.WAIT_CLUSTER_READY, 180), 180),
    ("wait-cluster-ready without one: 15 min", step(StepType.WAIT_CLUSTER_READY), 900),
    ("wait-serve-running without one: 10 min", step(StepType.WAIT_SERVE_RUNNING), 600),
    ("wait-job without one: 1 h", step(StepType.WAIT_JOB), 3600),
    ("deploy-serve retries for the Serve timeout", step(StepType.DEPLOY_SERVE, 600), 600),
    ("deploy-serve retries for 180 s at least", step(StepType.DEPLOY_SERVE, 30), 180),
    ("create-cluster has no timeout", step(StepType.CREATE_CLUSTER), None),
    ("schedule-cluster-deletion has no timeout (its timer is on the cluster)",
     step(StepType.SCHEDULE_CLUSTER_DELETION), None),
])
def test_step_timeout(case: str, given: Step, expected: float | None) -> None:
    assert step_timeout(given) == expected, case


def test_every_step_with_a_timeout_is_handed_its_deadline_by_the_actions() -> None:
    nothing = cast(Any, None)
    timed = {t for t in StepType if step_timeout(step(t)) is not None}
    assert timed == set(Actions(nothing, nothing, nothing)._timed)


def hold(kind: StepType, **params: Any) -> Step:
    return Step(id=f"9-{kind.value}", type=kind, target="svc-1a2b3", params=params)


@pytest.mark.parametrize(("case", "given", "expected"), [
    ("wait-interval holds its seconds", hold(StepType.WAIT_INTERVAL, seconds=60), 60),
    ("a timed pause holds its seconds", hold(StepType.PAUSE, seconds=300), 300),
    ("a pause until promoted has no timeout", hold(StepType.PAUSE, untilPromoted=True), None),
    ("run-analysis is not timed: a resumed one measures a whole window afresh",
     hold(StepType.RUN_ANALYSIS, windowSeconds=60), None),
])
def test_holds_are_timed_by_how_long_they_hold(case: str, given: Step,
                                               expected: float | None) -> None:
    assert step_timeout(given) == expected, case


def test_a_resumed_hold_keeps_what_is_left_of_it() -> None:
    budget = step_budget(hold(StepType.WAIT_INTERVAL, seconds=60), NOW, STARTED, 4)
    assert budget is not None and budget.left == pytest.approx(40.25)
    assert budget.describe() == "resumed, 40 s of 60 s left"


def test_a_step_begun_here_has_its_whole_timeout() -> None:
    assert step_budget(step(StepType.WAIT_CLUSTER_READY, 30), NOW) == Budget(30)
    assert step_budget(step(StepType.SWITCH_SERVICE), NOW) is None


def test_a_resumed_step_has_what_is_left_of_its_timeout() -> None:
    budget = step_budget(step(StepType.WAIT_CLUSTER_READY, 30), NOW, STARTED, 3)
    assert budget == Budget(30, 19.75, STARTED, 3)
    assert budget.resumed and budget.left == pytest.approx(10.25)
    assert budget.describe() == "resumed, 10 s of 30 s left"


def test_a_resumed_step_whose_timeout_passed_says_which_how_long_and_since_when() -> None:
    budget = step_budget(step(StepType.WAIT_SERVE_RUNNING, 12), NOW, STARTED, 3)
    assert budget is not None and budget.left < 0
    assert budget.describe() == "resumed, 0 s of 12 s left"
    assert budget.expired(step(StepType.WAIT_SERVE_RUNNING, 12)) == (
        "not resumed: the 12 s timeout of wait-serve-running svc-1a2b3 ran out 8 s ago (the "
        "step started 20 s ago, at 2026-11-30T11:59:40.250Z under Lease epoch 3, and its "
        "run was interrupted)")


@pytest.mark.parametrize(("case", "started_at", "expected"), [
    ("a time before now", STARTED, 19.75),
    ("a time a little ahead (another replica's clock): none spent", "2026-11-30T12:00:02Z", 0.0),
    ("not a time", "soon", None),
    ("no zone", "2026-11-30T11:59:40", None),
])
def test_seconds_since(case: str, started_at: str, expected: float | None) -> None:
    assert seconds_since(started_at, NOW) == expected, case


def test_an_unreadable_start_counts_as_a_fresh_start() -> None:
    assert step_budget(step(StepType.WAIT_JOB, 60), NOW, "garbage", 2) == Budget(60)


def test_a_long_gap_is_arithmetic_not_a_special_case() -> None:
    long_ago = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    budget = step_budget(step(StepType.WAIT_JOB), NOW, long_ago, 0)
    assert budget is not None and (budget.spent, budget.left) == (7200, -3600)


# ---- the run record's currentStep -----------------------------------------------------------


def record(current: StepStart | None) -> Record:
    key = ObjectKey("RayService", "apps", "svc")
    steps = (Step("1-create-cluster", StepType.CREATE_CLUSTER, "svc-1a2b3",
                  {"manifest": {"kind": "RayCluster"}}),
             step(StepType.WAIT_CLUSTER_READY, 30))
    wp = WorkloadPlan(key=key, action=Action.CREATE, wave=0, steps=steps,
                      source=SourceLocation("svc.yaml", 1, 1), desired_hash="h" * 64)
    return Record(key=key, revision="abc123", desired_hash=wp.desired_hash, plan=wp, cursor=1,
                  steps=(StepRecord("1-create-cluster", "create-cluster", StepStatus.OK,
                                    "created", "t0", "t1"),),
                  state=RunState.RUNNING, reason="", epoch=4, updated_at="t2", current=current)


def test_the_running_steps_start_round_trips() -> None:
    kept = record(StepStart("2-wait-cluster-ready", STARTED, 3))
    data = json.loads(json.dumps(record_to_json(kept)))
    assert data["currentStep"] == {"id": "2-wait-cluster-ready", "startedAt": STARTED,
                                   "epoch": 3}
    assert data["formatVersion"] == RECORD_FORMAT_VERSION == 1  # an additive field
    assert record_from_json(data) == kept


OLD_KEYS = {"formatVersion", "workload", "revision", "desiredHash", "plan", "cursor", "steps",
            "state", "reason", "epoch", "updatedAt"}


def test_a_record_with_no_running_start_is_written_as_before() -> None:
    data = record_to_json(record(None))
    assert set(data) == OLD_KEYS  # so a replica of the previous version reads it unchanged


def test_a_record_written_before_starts_were_kept_resumes_as_before() -> None:
    old = {k: v for k, v in record_to_json(record(None)).items() if k in OLD_KEYS}
    loaded = record_from_json(json.loads(json.dumps(old)))
    assert loaded.current is None
    # no start kept: the resumed wait gets its whole timeout, as it did before
    assert step_budget(loaded.plan.steps[loaded.cursor], NOW) == Budget(30)
    assert record_from_json({**old, "currentStep": None}).current is None
