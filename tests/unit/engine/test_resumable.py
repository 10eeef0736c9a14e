"""Which interrupted runs a pass resumes (``gitray.engine.apply.resumable``)."""

from __future__ import annotations

from dataclasses import replace

from gitray.core.model import ObjectKey
from gitray.engine.apply import resumable
from gitray.engine.record import Record, RunState
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

KEY = ObjectKey("RayCluster", "ray", "c")
RUN = WorkloadPlan(KEY, Action.CREATE, 0, (Step("s0", StepType.CREATE_CLUSTER, "c"),),
                   desired_hash="h")
NOW_LIVE = Plan("abc", "live", workloads=(replace(RUN, action=Action.NOOP, steps=()),))


def record(cursor: int, state: RunState = RunState.RUNNING, desired: str = "h") -> Record:
    return Record(KEY, "abc", desired, RUN, cursor, (), state, "", 1, "")


def test_a_run_interrupted_before_its_step_resumes() -> None:
    assert resumable(NOW_LIVE, [record(0)]) == {KEY: record(0)}


def test_a_run_interrupted_after_its_last_step_resumes_to_be_finished() -> None:
    """Its holder stopped between the last step and the record's end (a shard handed to a
    joining replica at that moment, tests/integration/test_shard_sync.py): the live state
    needs nothing, so only resuming it ends the run; else it stays ``running`` for good."""
    assert resumable(NOW_LIVE, [record(1)]) == {KEY: record(1)}


def test_ended_runs_and_runs_of_another_spec_do_not_resume() -> None:
    assert resumable(NOW_LIVE, [record(1, RunState.SUCCEEDED), record(0, desired="old")]) == {}
