"""Planning a part of the workloads (``owns``: a replica of a sharded ``gitray sync`` plans
only its shards' workloads): each workload's plan is the one planning everything gives it, the
parts add up to the whole, and the revision is still judged whole."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from gitray.core.config import Config
from gitray.core.model import LiveState, ObjectKey, Workload
from gitray.engine.shards import shard_of
from gitray.plans.plan import Plan
from gitray.plans.planner import compute_plan
from tests.unit.builders import CONFIG, NOW, configmap, live, rayservice
from tests.unit.plans.test_plan_batches import CONFIGS, DESIRED, LIVE
from tests.unit.plans.test_plan_inputs import mounting

Owns = Callable[[ObjectKey], bool]


def _plan(owns: Owns | None, desired: Sequence[Workload] = DESIRED, state: LiveState = LIVE,
          config: Config = CONFIG) -> Plan:
    return compute_plan(desired, state, config, revision="r", against="live", now=NOW,
                        label="repo", owns=owns)


def _shard(i: int, count: int) -> Owns:
    return lambda key: shard_of(key, count) == i


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("count", [2, 3, 5])
def test_each_shard_s_plan_is_its_part_of_the_whole_and_the_parts_add_up(
        name: str, count: int) -> None:
    config = CONFIGS[name]
    whole = _plan(None, config=config)
    keys = [w.key for w in whole.workloads]
    assert len(keys) > 20 and len({shard_of(k, count) for k in keys}) == count  # (all used)
    parts = [_plan(_shard(i, count), config=config) for i in range(count)]
    for i, part in enumerate(parts):
        assert part.workloads == tuple(w for w in whole.workloads
                                       if shard_of(w.key, count) == i)
    assert sorted(k for p in parts for k in (w.key for w in p.workloads)) == sorted(keys)


def test_a_part_with_nothing_in_git_still_prunes_what_left_git() -> None:
    """Namespace delta has only workloads the cluster still has: planning that part alone is
    not an empty revision (the revision has workloads elsewhere), so they are pruned."""
    in_delta: Owns = lambda key: key.namespace == "delta"  # noqa: E731
    part = _plan(in_delta)
    assert sorted(w.key.name for w in part.workloads) == ["j", "orphaned"]
    assert part.workloads == tuple(w for w in _plan(None).workloads
                                   if w.key.namespace == "delta")
    assert not any("no workloads" in n for n in part.notes)
    # an empty revision prunes nothing, part or whole
    assert _plan(in_delta, desired=()).workloads == () and _plan(None, desired=()).notes


def test_an_input_of_another_part_is_still_part_of_the_spec() -> None:
    """A RayService mounting a ConfigMap: the ConfigMap in another part, its change still
    changes the service's plan (inputs are resolved over the whole revision)."""
    code, svc = configmap("code", "ns", data={"a.py": "v2"}), mounting(rayservice("svc", "ns"))
    state = live(configmap("code", "ns", data={"a.py": "v1"}), mounting(rayservice("svc", "ns")))
    only_svc: Owns = lambda key: key.kind == "RayService"  # noqa: E731
    whole = _plan(None, desired=(code, svc), state=state)
    part = _plan(only_svc, desired=(code, svc), state=state)
    assert [w.key.kind for w in part.workloads] == ["RayService"]
    assert part.workloads[0] == whole.workload(svc.key)
    assert part.workloads[0].steps  # (the input changed: the service is upgraded)
    same = _plan(only_svc, desired=(configmap("code", "ns", data={"a.py": "v1"}), svc),
                 state=state)
    assert [len(w.steps) for w in same.workloads] == [0]  # (unchanged input: nothing to do)


def test_with_no_part_the_plan_is_the_whole_plan() -> None:
    assert _plan(lambda _k: True) == _plan(None)
    assert replace(_plan(lambda _k: False), notes=()).workloads == ()
