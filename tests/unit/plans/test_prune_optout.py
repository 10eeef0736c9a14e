"""Prune opt-out per workload: ``gitray.io/prune: disabled`` on any live object of a workload
that left Git keeps all of it, and the plan says so. Pure planner tests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gitray.core.config import Config
from gitray.core.model import LiveState, Role, Workload
from gitray.plans.manifests import service_cluster_manifest, service_manifest
from gitray.plans.plan import Action, Plan
from gitray.plans.planner import Planner, compute_plan, prune_disabled
from tests.unit.builders import (
    CONFIG,
    NOW,
    configmap,
    live,
    raycluster,
    rayjob,
    rayservice,
    replace_object,
)

OPT_OUT = {"metadata": {"annotations": {"gitray.io/prune": "disabled"}}}
CM = configmap()


def annotated(w: Workload, value: str = "disabled") -> Workload:
    manifest = dict(w.manifest)
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), "gitray.io/prune": value}
    manifest["metadata"] = meta
    return Workload(w.key, w.api_version, manifest, w.source, w.wave)


def plan_without(gone: Workload, state: LiveState, config: Config = CONFIG) -> Plan:
    """The plan of a revision that still has CM but no longer ``gone``."""
    return compute_plan((CM,), state, config, revision="r", against="live", now=NOW)


@pytest.mark.parametrize("gone", [raycluster(), rayjob(), rayservice(), configmap("extra")],
                         ids=["RayCluster", "RayJob", "RayService", "ConfigMap"])
def test_annotated_in_git_before_it_left_keeps_the_workload(gone: Workload) -> None:
    plan = plan_without(gone, live(annotated(gone), CM))
    assert plan.workload(gone.key) is None
    (note,) = plan.notes
    assert note.startswith(f"{gone.key} was removed from Git but is kept: "
                           "gitray.io/prune: disabled on ")


@pytest.mark.parametrize("gone", [raycluster(), rayjob(), rayservice(), configmap("extra")],
                         ids=["RayCluster", "RayJob", "RayService", "ConfigMap"])
def test_without_the_annotation_the_workload_is_pruned(gone: Workload) -> None:
    plan = plan_without(gone, live(gone, CM))
    wp = plan.workload(gone.key)
    assert wp is not None and wp.action is Action.DELETE and wp.steps
    assert plan.notes == ()


@pytest.mark.parametrize("value", ["enabled", "Disabled", "false", ""])
def test_only_disabled_opts_out(value: str) -> None:
    gone = raycluster()
    plan = plan_without(gone, live(annotated(gone, value), CM))
    wp = plan.workload(gone.key)
    assert wp is not None and wp.action is Action.DELETE


def test_annotated_by_hand_on_one_object_keeps_every_object_of_the_workload() -> None:
    svc = rayservice()
    state = live(svc, CM)
    cluster = service_cluster_manifest(svc, CONFIG.instance)["metadata"]["name"]
    plan = plan_without(svc, replace_object(state, cluster, **OPT_OUT))
    assert plan.workload(svc.key) is None  # neither the cluster nor its Services are deleted
    assert plan.notes == (f"{svc.key} was removed from Git but is kept: gitray.io/prune: "
                          f"disabled on RayCluster {cluster}",)


def test_a_rayservice_carries_the_opt_out_onto_the_objects_gitray_makes() -> None:
    svc = annotated(rayservice())
    cluster = service_cluster_manifest(svc, CONFIG.instance)
    serve = service_manifest(svc, Role.SERVE_SERVICE, cluster["metadata"]["name"],
                             CONFIG.instance)
    for made in (cluster, serve):
        assert made["metadata"]["annotations"]["gitray.io/prune"] == "disabled"
    plain = service_cluster_manifest(rayservice(), CONFIG.instance)
    assert "gitray.io/prune" not in plain["metadata"]["annotations"]


def test_the_opt_out_changes_nothing_while_the_workload_is_in_git() -> None:
    cl = annotated(raycluster())
    plan = compute_plan((cl, CM), live(cl, CM), CONFIG, revision="r", against="live", now=NOW)
    assert not plan.has_changes and plan.notes == ()


def test_prune_off_and_empty_revisions_keep_their_own_note() -> None:
    gone = annotated(raycluster())
    off = plan_without(gone, live(gone, CM), replace(CONFIG, prune=False))
    assert off.notes[0].startswith("prune is off")
    empty = compute_plan((), live(gone), CONFIG, revision="r", against="live", now=NOW)
    assert "no workloads" in empty.notes[0]


def test_kept_and_pruned_workloads_side_by_side() -> None:
    kept, pruned = annotated(raycluster("keep")), raycluster("drop")
    plan = plan_without(kept, live(kept, pruned, CM))
    assert plan.workload(kept.key) is None
    dropped = plan.workload(pruned.key)
    assert dropped is not None and dropped.action is Action.DELETE
    assert len(plan.notes) == 1 and str(kept.key) in plan.notes[0]


def test_batched_planning_keeps_the_same_workloads() -> None:
    kept = annotated(raycluster("keep", ns="a"))
    other = raycluster("drop", ns="b")
    planner = Planner((CM,), CONFIG, now=NOW)
    planner.add({"a"}, live(kept))
    planner.add({"b"}, live(other))
    batched = planner.finish(revision="r", against="live")
    whole = compute_plan((CM,), live(kept, other), CONFIG, revision="r", against="live",
                         now=NOW)
    assert batched.workloads == whole.workloads and batched.notes == whole.notes


def test_prune_disabled_picks_the_first_opted_out_object() -> None:
    assert prune_disabled(()) is None
    assert prune_disabled(live(raycluster()).objects) is None
    obj = live(annotated(raycluster())).objects[0]
    assert prune_disabled((*live(raycluster("z")).objects, obj)) is obj
