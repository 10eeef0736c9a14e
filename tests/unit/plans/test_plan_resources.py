"""Resources in the plan (gitray.plans.resources): quantities, pod requests, cluster pods, and
what each kind of workload plan adds while old and new overlap and for good. Pure."""

from __future__ import annotations

import copy
import json
from fractions import Fraction as F
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gitray.core.model import Workload
from gitray.plans.plan import Action, Plan, plan_from_json, plan_to_json
from gitray.plans.planner import compute_plan
from gitray.plans.quantities import (
    Range,
    ResourceChange,
    format_quantity,
    parse_quantity,
    summary_line,
)
from gitray.plans.render import Format, render
from gitray.plans.resources import PodGroup, cluster_pods, pod_requests, totals
from tests.unit.builders import CONFIG, NOW, configmap, live, raycluster, rayjob, rayservice

SCHEMA = json.loads((Path(__file__).parents[3] / "schemas" / "plan.schema.json").read_text())
GI = 2**30


@pytest.mark.parametrize(("text", "value"), [
    ("500m", F(1, 2)), ("1", F(1)), (2, F(2)), (0.5, F(1, 2)), ("1.5", F(3, 2)),
    ("2Gi", F(2 * GI)), ("512Mi", F(512 * 2**20)), ("1Ki", F(1024)), ("100M", F(10**8)),
    ("1e3", F(1000)), ("1.5k", F(1500)), ("+4", F(4)), ("250u", F(1, 4000)),
    ("3n", F(3, 10**9)), ("1E", F(10**18)), ("1Ei", F(2**60)), (" 8 ", F(8)),
])
def test_parse_quantity(text: Any, value: F) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Gb", "Gi", ".", "1.2.3", True, None, "1 Gi"])
def test_parse_quantity_refuses_what_is_not_a_quantity(text: Any) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(("resource", "value", "text"), [
    ("cpu", F(1, 2), "500m"), ("cpu", F(2), "2"), ("cpu", F(5, 2), "2500m"),
    ("cpu", F(1, 4000), "0.00025"), ("cpu", F(-3), "-3"),
    ("memory", F(512 * 2**20), "512Mi"), ("memory", F(8 * GI), "8Gi"),
    ("memory", F(1536 * 2**20), "1536Mi"), ("memory", F(1000), "1000"),
    ("memory", F(0), "0"), ("memory", F(-2 * GI), "-2Gi"),
    ("memory", F(10**9), "953.7Mi"), ("ephemeral-storage", F(GI), "1Gi"),
    ("hugepages-2Mi", F(4 * 2**20), "4Mi"),
    ("nvidia.com/gpu", F(16), "16"), ("pods", F(3), "3"),
])
def test_format_quantity(resource: str, value: F, text: str) -> None:
    assert format_quantity(resource, value) == text


def c(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
      **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


@pytest.mark.parametrize(("spec", "expected"), [
    ({"containers": [c()]}, {}),
    ({"containers": [c({"cpu": "1", "memory": "1Gi"})]}, {"cpu": F(1), "memory": F(GI)}),
    # a request left out defaults to the limit (the API server does so); requests win
    ({"containers": [c(None, {"cpu": "2", "nvidia.com/gpu": 4})]},
     {"cpu": F(2), "nvidia.com/gpu": F(4)}),
    ({"containers": [c({"cpu": "500m"}, {"cpu": "2"})]}, {"cpu": F(1, 2)}),
    ({"containers": [c({"cpu": "1"}), c({"cpu": "1500m", "memory": "1Gi"})]},
     {"cpu": F(5, 2), "memory": F(GI)}),
    # a plain init container runs alone: the larger of it and the containers
    ({"containers": [c({"cpu": "1"})], "initContainers": [c({"cpu": "3", "memory": "1Gi"})]},
     {"cpu": F(3), "memory": F(GI)}),
    ({"containers": [c({"cpu": "4"})], "initContainers": [c({"cpu": "3"}), c({"cpu": "2"})]},
     {"cpu": F(4)}),
    # a sidecar (restartPolicy Always) runs beside them, and beside later init containers
    ({"containers": [c({"cpu": "1"})],
      "initContainers": [c({"cpu": "500m"}, restartPolicy="Always"), c({"cpu": "2"})]},
     {"cpu": F(5, 2)}),
    # what the API server would refuse counts as nothing here (validation reports it)
    ({"containers": [c({"cpu": "lots", "memory": "1Gi"})]}, {"memory": F(GI)}),
    ({"containers": [c({"cpu": "0"})]}, {}),
    ({"containers": ["junk", c({"cpu": "1"})], "initContainers": [7]}, {"cpu": F(1)}),
])
def test_pod_requests(spec: dict[str, Any], expected: dict[str, F]) -> None:
    assert pod_requests(spec) == expected


def template(**requests: Any) -> dict[str, Any]:
    return {"spec": {"containers": [c({k.replace("_", "/"): v for k, v in requests.items()})]}}


def group(name: str = "w", **fields: Any) -> dict[str, Any]:
    return {"groupName": name, "template": template(cpu="2", nvidia_com__gpu=0), **fields}


def spec(*groups: dict[str, Any], auto: bool = False, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"headGroupSpec": {"template": template(cpu="1", memory="2Gi")},
                           "workerGroupSpecs": list(groups), **extra}
    if auto:
        out["enableInTreeAutoscaling"] = True
    return out


@pytest.mark.parametrize(("groups", "auto", "counts"), [
    ((group(replicas=3, minReplicas=1, maxReplicas=5),), False, [(1, 1), (3, 3)]),
    ((group(replicas=9, minReplicas=1, maxReplicas=5),), False, [(1, 1), (5, 5)]),  # clamped
    ((group(replicas=0, minReplicas=2, maxReplicas=5),), False, [(1, 1), (2, 2)]),
    ((group(minReplicas=2),), False, [(1, 1), (2, 2)]),  # no replicas: minReplicas
    ((group(),), False, [(1, 1), (0, 0)]),
    ((group(replicas=2, numOfHosts=4),), False, [(1, 1), (8, 8)]),  # multi-host
    ((group(replicas=2, suspend=True),), False, [(1, 1), (0, 0)]),
    ((group(replicas=2, minReplicas=1, maxReplicas=6),), True, [(1, 1), (1, 6)]),
    ((group(minReplicas=0, maxReplicas=2, numOfHosts=2),), True, [(1, 1), (0, 4)]),
    ((group(minReplicas=3, maxReplicas=1),), True, [(1, 1), (3, 3)]),  # max below min
    ((group(), group("b", replicas=1)), False, [(1, 1), (0, 0), (1, 1)]),
])
def test_cluster_pods_counts(groups: tuple[dict[str, Any], ...], auto: bool,
                             counts: list[tuple[int, int]]) -> None:
    assert [(g.low, g.high) for g in cluster_pods(spec(*groups, auto=auto))] == counts


def test_autoscaling_on_adds_the_autoscaler_sidecar_to_the_head() -> None:
    (head, _) = cluster_pods(spec(group(), auto=True))
    assert head.per_pod == {"cpu": F(3, 2), "memory": F(2 * GI + 512 * 2**20)}
    (head, _) = cluster_pods(spec(group()))
    assert head.per_pod == {"cpu": F(1), "memory": F(2 * GI)}
    custom = {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    (head, _) = cluster_pods(spec(group(), auto=True, autoscalerOptions=custom))
    assert head.per_pod == {"cpu": F(11, 10), "memory": F(2 * GI + 128 * 2**20)}


def test_totals_count_pods_at_either_bound() -> None:
    groups = (PodGroup("head", {"cpu": F(1)}, 1, 1), PodGroup("w", {"cpu": F(2)}, 1, 4),
              PodGroup("idle", {"cpu": F(8)}, 0, 0))
    assert totals(groups) == {"cpu": F(3), "pods": F(2)}
    assert totals(groups, high=True) == {"cpu": F(9), "pods": F(5)}
    assert totals(()) == {}


# ---- per workload, through the planner -----------------------------------------------------


def with_spec(w: Workload, path: tuple[str, ...], value: Any) -> Workload:
    manifest = copy.deepcopy(dict(w.manifest))
    node = manifest
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return Workload(w.key, w.api_version, manifest, w.source, w.wave)


def gpu_service(image: str = "rayproject/ray:2.60.0", gpus: int = 4, replicas: int = 2,
                **cluster: Any) -> Workload:
    svc = rayservice("ray-serve", image=image, replicas=replicas, **cluster)
    worker = svc.manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    worker = copy.deepcopy(worker)
    worker["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": gpus, "cpu": "4", "memory": "16Gi"}}
    return with_spec(svc, ("spec", "rayClusterConfig", "workerGroupSpecs"), [worker])


def planned(desired: tuple[Workload, ...], state: Any) -> Plan:
    return compute_plan(desired, state, CONFIG, revision="r", against="live", now=NOW)


def change_of(desired: tuple[Workload, ...], state: Any, key: Any) -> ResourceChange:
    wp = planned(desired, state).workload(key)
    assert wp is not None and wp.resources is not None
    return wp.resources


def test_blue_green_adds_a_whole_cluster_while_both_run() -> None:
    old, new = gpu_service(), gpu_service(image="rayproject/ray:2.61.0")
    change = change_of((new,), live(old), new.key)
    assert change.strategy == "blue-green" and change.overlaps
    assert change.while_both["nvidia.com/gpu"] == Range(F(8), F(8))
    assert change.peak["nvidia.com/gpu"] == Range(F(16), F(16))
    assert change.after == {}
    assert summary_line(change) == (
        "blue-green: +8 cpu, +32Gi memory, +8 nvidia.com/gpu, +3 pods while both run; "
        "+0 after; peak 16 cpu, 64Gi memory, 16 nvidia.com/gpu, 6 pods in ray-serve")


def test_blue_green_to_a_bigger_cluster_keeps_the_growth_after() -> None:
    old, new = gpu_service(), gpu_service(gpus=8)
    change = change_of((new,), live(old), new.key)
    assert change.while_both["nvidia.com/gpu"] == Range(F(16), F(16))
    assert change.after["nvidia.com/gpu"] == Range(F(8), F(8))
    assert change.peak["nvidia.com/gpu"] == Range(F(24), F(24))
    assert "after" not in change.after  # only resources as keys
    assert set(change.after) == {"nvidia.com/gpu"}


def test_a_new_rayservice_adds_its_cluster() -> None:
    svc = gpu_service()
    change = change_of((svc,), live(), svc.key)
    assert change.strategy == "create" and not change.overlaps
    assert change.after["nvidia.com/gpu"] == Range(F(8), F(8))
    assert summary_line(change).startswith("create: +8 cpu, +32Gi memory, +8 nvidia.com/gpu, "
                                           "+3 pods; peak ")


def test_an_autoscaled_cluster_is_a_range_from_min_to_max_replicas() -> None:
    cl = raycluster(autoscaling=True, min_replicas=1, max_replicas=3)
    change = change_of((cl,), live(), cl.key)
    assert change.after["pods"] == Range(F(2), F(4))
    assert change.after["cpu"] == Range(F(1, 2), F(1, 2))  # the autoscaler sidecar
    assert "+2..4 pods" in summary_line(change)


def test_removing_a_cluster_frees_its_pods() -> None:
    cl = raycluster(replicas=2)
    change = change_of((configmap(),), live(cl, configmap()), cl.key)
    assert change.strategy == "delete"
    assert change.after == {"pods": Range(F(-3), F(-3))}
    assert change.peak == {"pods": Range(F(3), F(3))}
    assert summary_line(change) == "delete: -3 pods; peak 3 pods in cl"


def test_an_in_place_update_peaks_at_the_larger_of_old_and_new() -> None:
    old, new = raycluster(replicas=3), raycluster(replicas=1)
    change = change_of((new,), live(old), old.key)
    assert change.strategy == "in place" and not change.overlaps
    assert change.after == {"pods": Range(F(-2), F(-2))}
    assert change.peak == {"pods": Range(F(4), F(4))}


def test_upgrade_strategy_none_grows_the_active_cluster_in_place() -> None:
    old = gpu_service(upgrade="None")
    new = gpu_service(upgrade="None", replicas=3)
    change = change_of((new,), live(old), new.key)
    assert change.strategy == "in place"
    assert change.after["nvidia.com/gpu"] == Range(F(4), F(4))


def test_a_rayjob_run_adds_its_job_cluster() -> None:
    job = rayjob()
    change = change_of((job,), live(), job.key)
    assert change.strategy == "job"
    # replicas 0 under minReplicas 1: KubeRay clamps to 1 worker, with the head 2 pods
    assert change.after == {"pods": Range(F(2), F(2))}


def test_an_incremental_upgrade_overlaps_old_and_new_clusters() -> None:
    from tests.unit.plans.test_plan_incremental import NEW, OLD

    change = change_of((NEW,), live(OLD), NEW.key)
    assert change.strategy == "incremental" and change.overlaps
    assert change.while_both["pods"] == Range(F(2), F(4))  # the new cluster, min..max
    assert change.after == {}


@pytest.mark.parametrize("desired", [configmap(), raycluster()], ids=["object", "no-op"])
def test_no_cluster_step_no_resources(desired: Workload) -> None:
    plan = planned((desired,), live(desired))
    assert all(w.resources is None for w in plan.workloads)


def test_the_plan_views_show_the_resources_and_json_round_trips() -> None:
    old, new = gpu_service(), gpu_service(image="rayproject/ray:2.61.0")
    plan = planned((new,), live(old))
    (wp,) = plan.workloads
    assert wp.action is Action.REPLACE
    text = render(plan, Format.TEXT)
    assert "      resources: blue-green: +8 cpu, +32Gi memory, +8 nvidia.com/gpu" in text
    assert "**Resources** (pod requests; a range is minReplicas..maxReplicas): blue-green:" \
        in render(plan, Format.MARKDOWN)
    data = json.loads(render(plan, Format.JSON))
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    resources = data["workloads"][0]["resources"]
    assert resources["whileBothRun"]["nvidia.com/gpu"] == {"low": "8", "high": "8"}
    assert resources["peak"]["memory"] == {"low": str(64 * GI), "high": str(64 * GI)}
    assert plan_from_json(plan_to_json(plan)).workloads[0].resources == wp.resources


def test_fractional_amounts_round_trip_exactly() -> None:
    cl = raycluster(autoscaling=True)
    plan = planned((cl,), live())
    back = plan_from_json(json.loads(json.dumps(plan_to_json(plan))))
    assert back.workloads[0].resources == plan.workloads[0].resources
    assert plan_to_json(plan)["workloads"][0]["resources"]["after"]["cpu"] == {
        "low": "0.5", "high": "0.5"}
