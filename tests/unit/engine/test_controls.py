"""Suspend, resume and retry: the control document, what it holds and when a retry is due
(pure), the workload names the commands take, and the CLI's refusals of bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gitray.cli.control import parse_any_workload, parse_for
from gitray.core.errors import UserError
from gitray.core.model import ObjectKey
from gitray.engine.apply import suspended
from gitray.engine.controls import (
    Control,
    control_from_json,
    control_name,
    control_to_json,
    retry_wanted,
    suspension,
)
from gitray.engine.executor import Outcome
from gitray.engine.record import Record, RunState, record_name
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

SVC = ObjectKey("RayService", "ray", "fruit")
CM = ObjectKey("ConfigMap", "ray", "code")


def test_the_document_round_trips_and_sits_next_to_the_run_record() -> None:
    for control in (Control(SVC), Control(SVC, "ana@host", "2026-12-03T10:00:00.000Z"),
                    Control(CM, retry_by="bo@host", retry_at="2026-12-03T11:00:00.000Z"),
                    Control(SVC, "a", "2026-12-03T10:00:00.000Z", "b",
                            "2026-12-03T11:00:00.000Z")):
        assert control_from_json(control_to_json(control)) == control
    assert control_name(SVC) == record_name(SVC).replace("gitray-run-", "gitray-control-")


def test_suspension_says_who_and_how_to_lift_it() -> None:
    assert suspension(None) == "" and suspension(Control(SVC)) == ""
    assert suspension(Control(SVC, "ana@host", "2026-12-03T10:00:00.000Z")) == (
        "suspended by ana@host at 2026-12-03T10:00:00.000Z (gitray resume "
        "ray/RayService/fruit lets it run)")


def record(state: RunState, updated: str) -> Record:
    wp = WorkloadPlan(SVC, Action.UPDATE, 0)
    return Record(SVC, "abc", "h", wp, 0, (), state, "", 1, updated)


@pytest.mark.parametrize(("retry_at", "state", "wanted"), [
    ("", RunState.FAILED, False),  # never asked
    ("2026-12-03T10:00:01.000Z", RunState.FAILED, True),  # asked after the failure
    ("2026-12-03T09:59:59.000Z", RunState.FAILED, False),  # asked before: used already
    ("2026-12-03T10:00:01.000Z", RunState.SUCCEEDED, False),  # nothing failed
    ("2026-12-03T10:00:01.000Z", RunState.RUNNING, False),  # the retry is running
])
def test_a_retry_is_due_once_after_the_failed_run(retry_at: str, state: RunState,
                                                   wanted: bool) -> None:
    control = Control(SVC, retry_at=retry_at)
    assert retry_wanted(control, record(state, "2026-12-03T10:00:00.000Z")) is wanted
    assert retry_wanted(None, record(state, "2026-12-03T10:00:00.000Z")) is False


def wp(key: ObjectKey, steps: int) -> WorkloadPlan:
    return WorkloadPlan(key, Action.UPDATE, 0,
                        tuple(Step(f"s{i}", StepType.APPLY_OBJECT, key.name)
                              for i in range(steps)))


def test_a_suspended_workload_is_not_run_unless_its_run_is_under_way() -> None:
    plan = Plan("abc", "live", workloads=(wp(SVC, 3), wp(CM, 1)))
    held = {SVC: Control(SVC, "ana@host", "2026-12-03T10:00:00.000Z"), CM: Control(CM)}
    left, outcomes = suspended(plan, held, {})
    assert [len(w.steps) for w in left.workloads] == [0, 1]
    [o] = outcomes
    assert o.key == SVC and o.outcome is Outcome.SKIPPED and o.reason.startswith(
        "suspended by ana@host")
    running = record(RunState.RUNNING, "")
    assert suspended(plan, held, {SVC: running}) == (plan, [])


@pytest.mark.parametrize(("text", "key"), [
    ("ray/RayService/fruit", SVC),
    ("ray/rayservice/fruit", SVC),
    ("ray/ConfigMap/code", CM),
    ("ml/rayjob/train", ObjectKey("RayJob", "ml", "train")),
])
def test_workloads_are_named_as_gitray_prints_them(text: str, key: ObjectKey) -> None:
    assert parse_any_workload(text) == key
    assert parse_for("suspend", text) == key


@pytest.mark.parametrize("text", ["ray/fruit", "fruit", "ray//fruit", "a/b/c/d", "/RayJob/x"])
def test_other_names_are_refused(text: str) -> None:
    with pytest.raises(UserError, match="expected NAMESPACE/KIND/NAME"):
        parse_any_workload(text)
    assert parse_for("promote", "ray/fruit") == SVC  # promote takes NAMESPACE/RAYSERVICE


def test_a_bad_workload_name_is_one_line_and_no_request(tmp_path: Path) -> None:
    for command in ("suspend", "resume", "retry"):
        run = subprocess.run([sys.executable, "-m", "gitray", command, "fruit",
                              "--kubeconfig", str(tmp_path / "none")], capture_output=True,
                             text=True, check=False, timeout=60)
        assert run.returncode == 1, run.stderr
        assert "expected NAMESPACE/KIND/NAME" in run.stderr and "Traceback" not in run.stderr
