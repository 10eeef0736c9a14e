"""Planning in batches (a namespace at a time, live state kept compact in between) gives the
same plan as planning everything at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from gitray.core.config import Config
from gitray.core.errors import ValidationError
from gitray.core.livestore import LiveStore, batch_namespace
from gitray.core.model import ANN_WORKLOAD_KEY, LiveObject, LiveState, Workload
from gitray.plans.materialize import materialize, materialized_store, plan_against_store
from gitray.plans.plan import Action, Plan, plan_to_json
from gitray.plans.planner import Planner, compute_plan
from tests.unit.builders import (
    CONFIG,
    NOW,
    cluster_for,
    configmap,
    live,
    raycluster,
    rayjob,
    rayservice,
    replace_object,
    with_objects,
)
from tests.unit.plans.test_plan_inputs import mounting


def _fleet() -> tuple[tuple[Workload, ...], LiveState]:
    """Three namespaces of every kind of situation, and one only the cluster still has."""
    desired: list[Workload] = []
    state = LiveState()
    for ns in ("alpha", "beta", "gamma"):
        svc, changed_svc = rayservice("svc", ns), rayservice("moved", ns, image="ray:old")
        serve_only = rayservice("serve", ns, serve="applications:\n  - name: a\n"
                                "    import_path: m:app\n    route_prefix: /a\n")
        cl, grown = raycluster("cl", ns), raycluster("grown", ns, max_replicas=5)
        job, cm, gone = rayjob("job", ns), configmap("code", ns), raycluster("gone", ns)
        base = live(svc, changed_svc, rayservice("serve", ns), cl, raycluster("grown", ns),
                    job, cm, gone)
        base = replace_object(base, "cl", spec={"headGroupSpec": {"rayStartParams": {
            "dashboard-host": "127.0.0.1"}}})  # drift
        desired += [svc, rayservice("moved", ns, image="ray:new"), serve_only, cl, grown,
                    job, cm, rayservice("fresh", ns, wave=1)]
        state = with_objects(state, *base.objects)
    old = rayservice("rollback", "beta", image="ray:prev")
    state = with_objects(state, cluster_for(old, delete_after="2026-11-30T12:05:00Z"),
                         *live(raycluster("orphaned", "delta"), rayjob("j", "delta")).objects)
    versioned = tuple(LiveObject(o.kind, o.namespace, o.name, str(i + 1), o.body)
                      for i, o in enumerate(state.objects))
    return tuple(desired), LiveState(versioned)


def _by_namespace(state: LiveState) -> dict[str, LiveState]:
    """``state`` split into batches, keeping each object's relative order."""
    out: dict[str, list[LiveObject]] = {}
    for o in state.objects:
        out.setdefault(batch_namespace(o.owner, o.namespace), []).append(o)
    return {ns: LiveState(tuple(objs)) for ns, objs in out.items()}


def _batched(desired: Sequence[Workload], batches: dict[str, LiveState],
             config: Config = CONFIG, order: Sequence[str] | None = None) -> Plan:
    planner = Planner(desired, config, now=NOW)
    for ns in order or sorted(batches):
        planner.add([ns], batches[ns])
    return planner.finish(revision="r", against="live", label="repo")


def _whole(desired: Sequence[Workload], state: LiveState, config: Config = CONFIG) -> Plan:
    return compute_plan(desired, state, config, revision="r", against="live", now=NOW,
                        label="repo")


def _sorted(state: LiveState) -> LiveState:
    return LiveState(tuple(sorted(state.objects, key=lambda o: (o.kind, o.namespace, o.name))))


DESIRED, LIVE = _fleet()
CONFIGS = {
    "defaults": CONFIG,
    "prune off": replace(CONFIG, prune=False),
    "allowed namespaces": replace(CONFIG, allowed_namespaces=("alpha", "beta", "gamma")),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_plan_made_namespace_by_namespace_is_the_plan_made_at_once(name: str) -> None:
    config = CONFIGS[name]
    whole = _whole(DESIRED, LIVE, config)
    assert whole.has_changes and len(whole.workloads) > 20  # the fleet covers a lot
    batched = _batched(DESIRED, _by_namespace(LIVE), config)
    assert plan_to_json(batched) == plan_to_json(whole)
    assert batched == whole


def test_the_order_of_the_batches_does_not_matter() -> None:
    batches = _by_namespace(LIVE)
    assert _batched(DESIRED, batches, order=sorted(batches, reverse=True)) == \
        _whole(DESIRED, LIVE)


def test_namespaces_no_batch_covered_are_planned_against_nothing_live() -> None:
    batches = _by_namespace(LIVE)
    gamma = [w for w in DESIRED if w.key.namespace == "gamma"]
    without = {ns: s for ns, s in batches.items() if ns != "gamma"}
    expected = _whole(DESIRED, LiveState(tuple(o for o in LIVE.objects
                                                if o.namespace != "gamma")))
    plan = _batched(DESIRED, without)
    assert plan == expected
    assert all(plan.workload(w.key) is not None for w in gamma)


def test_a_live_store_round_trip_gives_the_same_plan() -> None:
    store = LiveStore()
    for start in range(0, len(LIVE.objects), 7):  # pages of 7 objects, as LISTs come
        store.add(LIVE.objects[start:start + 7])
    assert store.objects == len(LIVE.objects) and store.compressed_bytes > 0
    planner = Planner(DESIRED, CONFIG, now=NOW)
    for batch in store.batches():
        planner.add([batch], store.take(batch))
    assert store.batches() == []
    plan = planner.finish(revision="r", against="live", label="repo")
    assert plan == _whole(DESIRED, _sorted(LIVE))


def test_an_empty_revision_prunes_nothing_in_any_batch() -> None:
    assert _batched((), _by_namespace(LIVE)) == _whole((), LIVE)
    allow = replace(CONFIG, allow_empty=True)
    plan = _batched((), _by_namespace(LIVE), allow)
    assert plan == _whole((), LIVE, allow) and plan.has_changes


def test_refusals_from_every_batch_are_reported_together() -> None:
    before = (rayservice("a", "one", image="x:1", upgrade="None"),
              rayservice("b", "two", image="x:1", upgrade="None"))
    after = tuple(rayservice(w.key.name, w.key.namespace, image="x:2", upgrade="None")
                  for w in before)
    state = live(*before)
    with pytest.raises(ValidationError) as whole:
        _whole(after, state)
    with pytest.raises(ValidationError) as batched:
        _batched(after, _by_namespace(state))
    assert len(batched.value.diagnostics) == 2
    assert batched.value.diagnostics == whole.value.diagnostics


def test_a_namespace_is_planned_once() -> None:
    planner = Planner(DESIRED, CONFIG, now=NOW)
    planner.add(["alpha"], LiveState())
    with pytest.raises(ValueError, match="planned twice"):
        planner.add(["alpha", "beta"], LiveState())


def test_an_object_is_batched_with_the_workload_that_owns_it() -> None:
    (obj,) = live(raycluster("cl", "alpha")).objects
    body = dict(obj.body)
    body["metadata"] = {**obj.metadata,
                        "annotations": {**obj.annotations, ANN_WORKLOAD_KEY: "beta/RayCluster/cl"}}
    foreign = LiveObject(obj.kind, obj.namespace, obj.name, "9", body)
    store = LiveStore()
    store.add([foreign])
    assert store.batches() == ["beta"]
    assert store.take("beta").objects == (foreign,)
    assert store.take("beta").objects == ()  # taken once


def _against_revision_both_ways(desired: Sequence[Workload], base: Sequence[Workload],
                                config: Config = CONFIG) -> tuple[Plan, Plan]:
    whole = compute_plan(desired, materialize(base, config), config, revision="r",
                         against="revision:b", now=NOW, exact=True)
    store = materialized_store(base, config)
    batched = plan_against_store(desired, config, store, revision="r", against="revision:b",
                                 now=NOW)
    assert store.batches() == []  # every batch was taken
    return whole, batched



def test_a_plan_against_a_revision_made_namespace_by_namespace_is_the_plan_made_at_once() -> None:
    desired, _ = _fleet()
    # the base revision: "fresh" not there yet, "moved" older, two workloads (one in a
    # namespace the new revision no longer has) since removed
    base = [rayservice("moved", w.key.namespace, image="ray:older")
            if w.key.name == "moved" else w for w in desired if w.key.name != "fresh"]
    base += [raycluster("gone", "beta"), rayjob("j", "delta")]
    whole, batched = _against_revision_both_ways(desired, base)
    assert plan_to_json(batched) == plan_to_json(whole)
    actions = {str(w.key): w.action.value for w in batched.workloads}
    assert sum(a != Action.NOOP.value for a in actions.values()) >= 8, actions
    assert any(k.endswith("/gone") for k in actions) and any("delta" in k for k in actions)


def test_a_plan_against_a_revision_keeps_a_namespace_s_inputs_together() -> None:
    # the ConfigMap a RayJob mounts is materialized with it: its change is the job's change
    job = mounting(rayjob("job", "ns"))
    whole, batched = _against_revision_both_ways(
        [job, configmap("code", "ns", data={"v": "2"}), raycluster("other", "ns2")],
        [job, configmap("code", "ns", data={"v": "1"}), raycluster("other", "ns2")])
    assert plan_to_json(batched) == plan_to_json(whole)
    changed = {w.key.name for w in batched.workloads if w.action is not Action.NOOP}
    assert changed == {"job", "code"}, changed
