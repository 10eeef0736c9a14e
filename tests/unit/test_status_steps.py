"""The pending commit status of each step of an incremental upgrade names its traffic share
(issue 16: "step 7/14: 40 % → new"), from the steps the planner really makes."""

from __future__ import annotations

from gitray.daemon.reporting import status_what
from gitray.hosts.status import step_description
from gitray.plans.plan import StepType
from tests.unit.builders import cluster_for, live, with_objects
from tests.unit.test_plan_incremental import ANALYSIS, NEW, OLD, A, B, incremental, one, plan_of

T = StepType


def test_weight_steps_say_where_the_traffic_goes() -> None:
    plan = one(plan_of(incremental("ray:new", analysis=ANALYSIS), live(OLD)))
    said = [step_description(i, len(plan.steps), status_what(s))
            for i, s in enumerate(plan.steps, 1)
            if s.type in {T.SHIFT_TRAFFIC, T.RUN_ANALYSIS, T.PAUSE}]
    n = len(plan.steps)
    assert f"step 6/{n}: shift-traffic svc-httproute: 25 % → {B}" in said
    assert f"step 7/{n}: run-analysis {B} at 25 %" in said
    assert any(d.endswith(f"shift-traffic svc-httproute: 100 % → {B}") for d in said)
    assert any(d.endswith(" at 50 %") and "pause" in d for d in said), said
    # other steps: their type and target, as before
    first = plan.steps[0]
    assert status_what(first) == f"create-cluster {B}"


def test_taking_the_traffic_back_says_all_of_it_goes_to_the_active_cluster() -> None:
    """A new commit mid-upgrade: the route's first write sends everything back."""
    state = with_objects(live(OLD), cluster_for(NEW))
    restore = one(plan_of(incremental("ray:newer"), state)).steps[0]
    assert status_what(restore) == f"shift-traffic svc-httproute: 100 % → {A}"
