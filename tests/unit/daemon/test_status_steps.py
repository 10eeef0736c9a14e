"""The pending commit status of each step of an incremental upgrade names its traffic share
(issue 16: "step 7/14: 40 % → new"), from the steps the planner really makes."""

from __future__ import annotations

from gitray.daemon.reporting import status_what
from gitray.hosts.status import step_description
from gitray.plans.steptypes import StepType
from tests.unit.builders import cluster_for, live, with_objects
from tests.unit.plans.test_plan_incremental import (
    ANALYSIS,
    NEW,
    OLD,
    A,
    B,
    incremental,
    one,
    plan_of,
)

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


# ---- gitray status --watch --------------------------------------------------------------

def test_watch_redraws_in_place_on_a_terminal_and_goes_on_after_a_failed_read() -> None:
    from io import StringIO

    from gitray.cli.status import CLEAR, watch
    from gitray.core.errors import TransientError

    answers: list[str | Exception] = ["table 1\n", TransientError("API server unreachable"),
                                      "table 3\n"]
    slept: list[float] = []

    def table() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    out = StringIO()
    watch(table, 2.0, out, True, slept.append, rounds=3)
    frames = out.getvalue().split(CLEAR)[1:]
    assert len(frames) == 3 and slept == [2.0, 2.0]
    assert all(f.startswith("every 2 s: gitray status   ") for f in frames)
    assert frames[0].endswith("table 1\n") and frames[2].endswith("table 3\n")
    assert frames[1].endswith("gitray: API server unreachable (trying again in 2 s)\n")

    plain = StringIO()
    watch(lambda: "t\n", 0.5, plain, False, lambda _s: None, rounds=2)
    assert CLEAR not in plain.getvalue()
    assert plain.getvalue().count("every 0.5 s: gitray status") == 2


def test_watch_ends_cleanly_on_ctrl_c() -> None:
    from io import StringIO

    from gitray.cli.status import watch

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    out = StringIO()
    watch(lambda: "t\n", 1.0, out, False, interrupted)  # returns, no exception
    assert out.getvalue().count("gitray status") == 1
