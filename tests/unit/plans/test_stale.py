"""Saved plans: applied exactly as reviewed, or refused as stale."""

from __future__ import annotations

from gitray.core.model import LiveObject, LiveState
from gitray.plans.planner import compute_plan
from gitray.plans.stale import stale_reasons
from tests.unit.builders import CONFIG, NOW, live, raycluster, rayservice

OLD, NEW = rayservice(image="ray:old"), rayservice(image="ray:new")


def with_versions(state: LiveState, rv: str = "1") -> LiveState:
    return LiveState(tuple(LiveObject(o.kind, o.namespace, o.name, rv, o.body)
                           for o in state.objects))


LIVE = with_versions(live(OLD))
SAVED = compute_plan((NEW,), LIVE, CONFIG, revision="r1", against="live", now=NOW)


def replan(state: LiveState, desired: tuple = (NEW,)) -> list[str]:  # type: ignore[type-arg]
    again = compute_plan(desired, state, CONFIG, revision="r1", against="live", now=NOW)
    return stale_reasons(SAVED, "r1", again)


def test_an_unchanged_plan_may_be_applied() -> None:
    assert replan(LIVE) == []


def test_a_moved_revision_is_stale() -> None:
    again = compute_plan((NEW,), LIVE, CONFIG, revision="r2", against="live", now=NOW)
    assert "the plan is for revision r1, the repository is now at r2" in \
        stale_reasons(SAVED, "r2", again)


def test_a_changed_live_object_is_stale() -> None:
    objs = list(LIVE.objects)
    objs[0] = LiveObject(objs[0].kind, objs[0].namespace, objs[0].name, "2", objs[0].body)
    (reason,) = replan(LiveState(tuple(objs)))
    assert reason.startswith("1 live object(s) changed since planning: RayCluster ray/svc-")


def test_a_vanished_or_new_live_object_is_stale() -> None:
    assert "disappeared" in replan(LiveState(LIVE.objects[1:]))[0]
    extra = with_versions(live(raycluster(name="other"))).objects
    assert "appeared" in replan(LiveState(LIVE.objects + extra))[0]


def test_different_steps_on_replanning_are_stale() -> None:
    assert replan(LIVE, desired=(NEW, raycluster())) == [
        "planning again now gives different steps"]
