"""Capacity pre-flight, pure: quota headroom and node fit of what a plan adds."""

from __future__ import annotations

import copy
from fractions import Fraction as F
from typing import Any

import pytest

from gitray.core.model import Workload
from gitray.plans.capacity import NodeRoom, QuotaRoom, check_nodes, check_quotas, quota_resource
from gitray.plans.plan import Plan
from gitray.plans.planner import compute_plan
from gitray.plans.quantities import parse_quantity
from tests.unit.builders import CONFIG, NOW, configmap, live, raycluster, rayservice

GI = 2**30


def sized(w: Workload, cpu: str, *, replicas: int = 1, gpu: int = 0,
          worker_extra: dict[str, Any] | None = None) -> Workload:
    """``w`` with every container requesting ``cpu`` (and ``gpu`` on workers)."""
    manifest = copy.deepcopy(dict(w.manifest))
    spec = manifest["spec"].get("rayClusterConfig") or manifest["spec"]
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    group = spec["workerGroupSpecs"][0]
    group["replicas"], group["minReplicas"] = replicas, 0
    worker = group["template"]["spec"]["containers"][0]
    worker["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpu:
        worker["resources"]["limits"] = {"nvidia.com/gpu": gpu}
    group["template"]["spec"].update(worker_extra or {})
    return Workload(w.key, w.api_version, manifest, w.source, w.wave)


def plan_of(desired: tuple[Workload, ...], state: Any) -> Plan:
    return compute_plan(desired, state, CONFIG, revision="r", against="live", now=NOW)


def quota(ns: str = "ray", name: str = "compute", scoped: bool = False,
          **hard_used: tuple[str, str]) -> QuotaRoom:
    hard = {k.replace("__", "/").replace("_", "."): F(v[0]) for k, v in hard_used.items()}
    used = {k.replace("__", "/").replace("_", "."): F(v[1]) for k, v in hard_used.items()}
    return QuotaRoom(ns, name, hard, used, scoped)


def node(name: str = "n1", cpu: str = "4", memory: int = 16 * GI, pods: int = 100,
         **extra: Any) -> NodeRoom:
    free = {"cpu": parse_quantity(cpu), "memory": F(memory), "pods": F(pods)}
    free.update({k.replace("__", "/").replace("_", "."): F(v) for k, v in extra.pop(
        "resources", {}).items()})
    return NodeRoom(name, free, **extra)


@pytest.mark.parametrize(("key", "resource"), [
    ("requests.cpu", "cpu"), ("cpu", "cpu"), ("memory", "memory"),
    ("requests.nvidia.com/gpu", "nvidia.com/gpu"), ("pods", "pods"), ("count/pods", "pods"),
    ("limits.cpu", None), ("requests.storage", None), ("count/services", None),
    ("services", None), ("persistentvolumeclaims", None), ("nvidia.com/gpu", "nvidia.com/gpu"),
])
def test_quota_resource(key: str, resource: str | None) -> None:
    assert quota_resource(key) == resource


BLUE = sized(rayservice("ray-serve"), "1")
GREEN = sized(rayservice("ray-serve", image="rayproject/ray:2.61.0"), "1")


def test_a_blue_green_upgrade_over_the_quota_is_named_with_its_shortfall() -> None:
    plan = plan_of((GREEN,), live(BLUE))
    (s,) = check_quotas(plan, [quota(requests_cpu=("3", "2"))])
    assert str(s.location) == "ray/ray-serve.yaml:1:1"
    assert s.message == (
        "RayService ray/ray-serve does not fit: blue-green needs +2 cpu, +2Gi memory, +2 pods "
        "while both clusters run; ResourceQuota compute has 1 cpu left (short of 1 cpu): "
        "use upgradeStrategy NewClusterWithIncrementalUpgrade (old and new clusters resized "
        "step by step) or None (the cluster updated in place), lower the requests, or free "
        "capacity")


@pytest.mark.parametrize("quotas", [
    [quota(requests_cpu=("4", "2"))],  # exactly enough
    [quota(ns="other", requests_cpu=("1", "1"))],  # another namespace
    [quota(scoped=True, requests_cpu=("1", "1"))],  # scoped: not judged
    [quota(limits_cpu=("1", "1"))],  # limits: not judged here
    [quota(requests_storage=("1", "1"))],
    [],
])
def test_what_fits_or_is_not_judged_passes(quotas: list[QuotaRoom]) -> None:
    assert check_quotas(plan_of((GREEN,), live(BLUE)), quotas) == []


def test_pods_and_extended_resources_count_against_the_quota() -> None:
    plan = plan_of((GREEN,), live(BLUE))
    (s,) = check_quotas(plan, [quota(pods=("3", "2"))])
    assert "ResourceQuota compute has 1 pods left (short of 1 pods)" in s.message
    gpu = sized(rayservice("g"), "1", gpu=4)
    (s,) = check_quotas(plan_of((gpu,), live()),
                        [QuotaRoom("ray", "gpus", {"requests.nvidia.com/gpu": F(8)},
                                   {"requests.nvidia.com/gpu": F(6)})])
    assert "has 2 nvidia.com/gpu left (short of 2 nvidia.com/gpu)" in s.message
    assert "create needs +2 cpu, +2Gi memory, +4 nvidia.com/gpu, +2 pods;" in s.message
    assert "lower the requests or free capacity" in s.message
    assert "NewClusterWithIncrementalUpgrade" not in s.message  # not an upgrade


def test_demands_accumulate_in_plan_order() -> None:
    a, b = sized(raycluster("a"), "1"), sized(raycluster("b"), "1")
    plan = plan_of((a, b), live())
    found = check_quotas(plan, [quota(requests_cpu=("3", "0"))])
    assert [s.key for s in found] == ["ray/RayCluster/b"]


def test_the_tightest_of_several_quotas_names_the_shortfall() -> None:
    plan = plan_of((GREEN,), live(BLUE))
    (s,) = check_quotas(plan, [quota(name="big", requests_cpu=("100", "0")),
                               quota(name="small", requests_memory=(str(GI), "0"))])
    assert "ResourceQuota small has 1Gi memory left (short of 1Gi memory)" in s.message


def test_nothing_added_nothing_checked() -> None:
    cm = configmap()
    assert check_quotas(plan_of((cm,), live()), [quota(requests_cpu=("0", "0"))]) == []
    assert check_nodes(plan_of((BLUE,), live(BLUE)), []) == []
    # a deletion frees, never needs
    assert check_quotas(plan_of((cm,), live(BLUE, cm)), [quota(requests_cpu=("0", "5"))]) == []


def test_new_pods_fit_on_the_nodes_first_fit() -> None:
    plan = plan_of((GREEN,), live(BLUE))
    assert check_nodes(plan, [node(cpu="1"), node("n2", cpu="1")]) == []
    assert check_nodes(plan, [node(cpu="2")]) == []


def test_a_pod_too_big_for_any_node_is_named() -> None:
    plan = plan_of((GREEN,), live(BLUE))
    (s,) = check_nodes(plan, [node(cpu="1500m"), node("n2", cpu="600m")])
    assert s.message.startswith("RayService ray/ray-serve does not fit: blue-green needs "
                                "+2 cpu, +2Gi memory, +2 pods while both clusters run; "
                                "1 of 2 new pods fit on no node: a ")
    # the head (first, as large) took 1 of n1's 1500m: n2's 600m is closer to the need
    assert ("a workers pod requests 1 cpu, 1Gi memory, 1 pods, the roomiest node n2 has 600m "
            "cpu, 16Gi memory, 100 pods free (short of 400m cpu)") in s.message
    assert "NewClusterWithIncrementalUpgrade" in s.message


def test_taints_node_selectors_and_cordons_keep_pods_off_nodes() -> None:
    tainted = node(taints=({"key": "gpu", "value": "yes", "effect": "NoSchedule"},))
    cordoned = node("n2", schedulable=False)
    labelled = node("n3", labels={"pool": "cpu"})
    plan = plan_of((GREEN,), live(BLUE))
    (s,) = check_nodes(plan, [tainted, cordoned])
    assert "no node takes it (2 node(s): unschedulable, taints not tolerated" in s.message
    assert check_nodes(plan, [labelled]) == []
    prefer = node(taints=({"key": "x", "effect": "PreferNoSchedule"},))
    assert check_nodes(plan, [prefer]) == []
    picky = sized(rayservice("ray-serve", image="rayproject/ray:2.61.0"), "1",
                  worker_extra={"nodeSelector": {"pool": "gpu"}})
    (s,) = check_nodes(plan_of((picky,), live(BLUE)), [labelled])
    assert "1 of 2 new pods fit on no node: a workers pod" in s.message


@pytest.mark.parametrize(("toleration", "fits"), [
    ({"key": "gpu", "operator": "Exists"}, True),
    ({"operator": "Exists"}, True),
    ({"key": "gpu", "operator": "Equal", "value": "yes"}, True),
    ({"key": "gpu", "value": "yes", "effect": "NoSchedule"}, True),
    ({"key": "gpu", "value": "no"}, False),
    ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
])
def test_tolerations(toleration: dict[str, str], fits: bool) -> None:
    tainted = node(taints=({"key": "gpu", "value": "yes", "effect": "NoSchedule"},))
    both = {"tolerations": [toleration]}
    w = sized(raycluster(), "1")
    manifest = copy.deepcopy(dict(w.manifest))
    manifest["spec"]["headGroupSpec"]["template"]["spec"].update(both)
    manifest["spec"]["workerGroupSpecs"][0]["template"]["spec"].update(both)
    w = Workload(w.key, w.api_version, manifest, w.source, w.wave)
    assert (check_nodes(plan_of((w,), live()), [tainted]) == []) is fits


def test_pods_count_per_node() -> None:
    plan = plan_of((GREEN,), live(BLUE))
    (s,) = check_nodes(plan, [node(pods=1)])
    assert "1 of 2 new pods fit on no node" in s.message


def test_in_place_growth_is_judged_in_total() -> None:
    old, new = sized(raycluster(), "1", replicas=1), sized(raycluster(), "1", replicas=3)
    plan = plan_of((new,), live(old))
    assert check_nodes(plan, [node(cpu="1"), node("n2", cpu="1")]) == []
    (s,) = check_nodes(plan, [node(cpu="1500m")])
    assert s.message == (
        "RayCluster ray/cl does not fit: in place needs +2 cpu, +2Gi memory, +2 pods; the "
        "schedulable nodes have 1500m cpu free (short of 500m cpu): lower the requests or "
        "free capacity")


def test_node_demands_accumulate_across_workloads() -> None:
    a, b = sized(raycluster("a"), "1"), sized(raycluster("b"), "1")
    found = check_nodes(plan_of((a, b), live()), [node(cpu="3")])
    assert [s.key for s in found] == ["ray/RayCluster/b"]
