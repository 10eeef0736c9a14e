"""Plans that cannot be applied as planned: still shown, refused before any change.

``gitray plan`` runs in CI against clusters that may lack the Gateway API CRDs: an incremental
RayService is still planned (its Gateway and HTTPRoute count as absent) with a note naming the
first step that would fail; ``gitray apply``/``gitray sync`` hold such a workload back whole.
"""

from __future__ import annotations

from gitray.core.model import LiveState, ObjectKey, Workload
from gitray.plans.filters import hold_back
from gitray.plans.plan import Plan, Step
from gitray.plans.planner import compute_plan
from gitray.plans.prerequisites import blocked_workloads, needed_apis, step_api_version
from gitray.plans.rayservice.gateway import GATEWAY_API_VERSION
from gitray.plans.render import Format, render
from gitray.plans.steptypes import StepType
from tests.unit.builders import CONFIG, NOW, live, rayservice
from tests.unit.plans.test_plan_incremental import KEY, NEW, OLD

NO_GATEWAY_API = frozenset({GATEWAY_API_VERSION})
OTHER = ObjectKey("RayService", "ray", "other")


def without_gateway_api(state: LiveState) -> LiveState:
    """``state`` as read from an API server without the Gateway API CRDs."""
    return LiveState(tuple(o for o in state.objects if o.kind not in {"Gateway", "HTTPRoute"}))


def blue_green(name: str = "other", image: str = "ray:old") -> Workload:
    w = rayservice(image=image)
    return Workload(ObjectKey("RayService", "ray", name), w.api_version,
                    {**w.manifest, "metadata": {"name": name, "namespace": "ray"}},
                    w.source, w.wave)


def plan_of(*desired: Workload, state: LiveState, absent: frozenset[str] = NO_GATEWAY_API
            ) -> Plan:
    """The plan against ``state``, read from an API server without the ``absent`` APIs."""
    return compute_plan(desired, state, CONFIG, revision="f" * 40, against="live", now=NOW,
                        absent_apis=absent)


def steps_of(plan: Plan, key: ObjectKey) -> tuple[Step, ...]:
    found = plan.workload(key)
    assert found is not None
    return found.steps


def test_an_upgrade_without_the_gateway_api_is_still_planned_with_a_warning() -> None:
    plan = plan_of(NEW, state=without_gateway_api(live(OLD)))
    steps = steps_of(plan, KEY)
    first = next(i for i, s in enumerate(steps, 1) if s.type is StepType.SHIFT_TRAFFIC)
    assert plan.notes == (
        f"ray/RayService/svc: the Gateway API CRDs (gateway.networking.k8s.io/v1) are not "
        f"installed: applying this plan will fail at step {first}/{len(steps)} (shift-traffic "
        "svc-httproute), so gitray apply and gitray sync refuse it before any change: install "
        "the Gateway API CRDs (standard channel) and a Gateway controller, or use "
        "upgradeStrategy NewCluster",)
    # the same weight steps as with the CRDs: only the note differs
    with_crds = plan_of(NEW, state=live(OLD), absent=frozenset())
    assert [(s.type, s.target) for s in steps] == \
        [(s.type, s.target) for s in steps_of(with_crds, KEY)]
    for fmt in Format:
        assert "the Gateway API CRDs (gateway.networking.k8s.io/v1) are not installed" \
            in render(plan, fmt)


def test_a_first_rollout_names_the_gateway_as_the_step_that_would_fail() -> None:
    plan = plan_of(OLD, state=LiveState())
    steps = steps_of(plan, KEY)
    assert f"will fail at step 8/{len(steps)} (apply-object svc-gateway)" in plan.notes[0]
    assert steps[7].target == "svc-gateway"


def test_with_the_crds_or_without_gateway_steps_there_is_no_warning() -> None:
    assert plan_of(NEW, state=live(OLD), absent=frozenset()).notes == ()
    assert plan_of(OLD, state=without_gateway_api(live(OLD))).notes == ()  # nothing to do
    bg = plan_of(blue_green(image="ray:new"), state=live(blue_green()))
    assert steps_of(bg, OTHER) and bg.notes == ()


def test_apply_and_sync_hold_back_a_workload_needing_absent_crds_whole() -> None:
    """The reason is named; the other workloads of the plan keep their steps."""
    state = without_gateway_api(LiveState(live(OLD).objects + live(blue_green()).objects))
    plan = plan_of(NEW, blue_green(image="ray:new"), state=state)
    blocked = blocked_workloads(plan, NO_GATEWAY_API)
    assert list(blocked) == [KEY]
    (crds,) = blocked[KEY]
    assert crds.startswith("the Gateway API CRDs (gateway.networking.k8s.io/v1) are not "
                           "installed: applying this plan will fail at step 6/")
    assert crds.endswith(": install the Gateway API CRDs (standard channel) and a Gateway "
                         "controller, or use upgradeStrategy NewCluster")
    kept = hold_back(plan, blocked)
    assert steps_of(kept, KEY) == ()
    assert steps_of(kept, OTHER) == steps_of(plan, OTHER) != ()


def test_with_the_crds_served_nothing_is_held_back() -> None:
    with_crds = plan_of(NEW, state=live(OLD), absent=frozenset())
    (only,) = blocked_workloads(with_crds, NO_GATEWAY_API)[KEY]
    assert only.startswith("the Gateway API CRDs")
    assert blocked_workloads(with_crds, frozenset()) == {}
    assert hold_back(with_crds, {}) == with_crds


def test_the_gateway_api_is_needed_by_steps_that_write_or_delete_its_objects() -> None:
    assert needed_apis(plan_of(NEW, state=live(OLD))) == NO_GATEWAY_API
    assert needed_apis(plan_of(OLD, state=LiveState())) == NO_GATEWAY_API  # first rollout
    assert needed_apis(plan_of(blue_green(image="ray:new"), state=live(blue_green()))) \
        == frozenset()
    delete = Step("d", StepType.DELETE_OBJECT, "svc-httproute",
                  {"apiVersion": GATEWAY_API_VERSION, "kind": "HTTPRoute"})
    assert step_api_version(delete) == GATEWAY_API_VERSION
    assert step_api_version(Step("w", StepType.WAIT_INTERVAL, "c", {"seconds": 1})) is None


def test_planned_batch_by_batch_the_warning_is_the_same() -> None:
    """`gitray plan --against live` plans a namespace at a time (gitray.plans.planner.Planner)."""
    from gitray.plans.planner import Planner

    state = without_gateway_api(live(OLD))
    planner = Planner((NEW,), CONFIG, now=NOW, absent_apis=NO_GATEWAY_API)
    planner.add(["ray"], state)
    batched = planner.finish(revision="f" * 40, against="live")
    assert batched.notes == plan_of(NEW, state=state).notes != ()
