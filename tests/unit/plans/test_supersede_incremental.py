"""A newer commit may end a RayService's run only while no traffic has moved (SPEC §3): for an
incremental upgrade that means before its first HTTPRoute weight shift, not only before the
Service switches of a blue-green one (pure: the executor's rule on planned steps)."""

from __future__ import annotations

import pytest

from gitray.core.model import LiveState, Workload
from gitray.engine.undo import new_cluster
from gitray.engine.undo import traffic_moved as _traffic_moved
from gitray.plans.steptypes import STEP_KINDS, StepType
from tests.unit.builders import live, rayservice
from tests.unit.plans.test_plan_incremental import incremental, one, plan_of
from tests.unit.plans.test_plan_rayservice import NEW, NEW_SERVE, OLD, B, upgrading


def test_waits_after_the_first_weight_shift_cannot_be_superseded() -> None:
    wp = one(plan_of(incremental("ray:new", step=50, surge=50), live(incremental(
        "ray:old", step=50, surge=50))))
    types = [s.type for s in wp.steps]
    first_shift = types.index(StepType.SHIFT_TRAFFIC)
    waits = [i for i, t in enumerate(types) if STEP_KINDS[t].supersedable]
    before = [i for i in waits if i < first_shift]
    after = [i for i in waits if i > first_shift]
    assert before and after  # the plan has waits on both sides of the first shift
    assert not any(_traffic_moved(wp, i) for i in before)
    assert all(_traffic_moved(wp, i) for i in after)


def test_a_blue_green_upgrade_moves_traffic_at_its_service_switch() -> None:
    wp = one(plan_of(rayservice(image="ray:new"), live(rayservice(image="ray:old"))))
    types = [s.type for s in wp.steps]
    assert StepType.SHIFT_TRAFFIC not in types
    switch = types.index(StepType.SWITCH_SERVICE)
    assert not _traffic_moved(wp, switch) and _traffic_moved(wp, switch + 1)


@pytest.mark.parametrize(("situation", "state", "desired", "expected"), [
    ("a blue-green upgrade creates its new cluster", live(OLD), NEW, B),
    # a run that takes over the pending cluster of an earlier, superseded run (the plan waits
    # for it, creates nothing): a failure removes it as it would one the run created
    ("an upgrade resumed on the pending cluster of an earlier run", upgrading(NEW), NEW, B),
    ("a Serve-only change builds no cluster", live(OLD), NEW_SERVE, None),
])
def test_the_cluster_a_failed_rollout_removes(situation: str, state: LiveState,
                                              desired: Workload, expected: str | None) -> None:
    wp = one(plan_of(desired, state))
    steps = [(s.type, s.target) for s in wp.steps]
    assert new_cluster(wp) == expected, (situation, steps)
    if "resumed" in situation:  # it creates nothing: the cluster is found by its wait
        assert StepType.CREATE_CLUSTER not in [t for t, _ in steps], steps
