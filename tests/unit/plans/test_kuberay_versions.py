"""KubeRay versions: the packaged v1.7.0 schemas judge manifests by default, ``kuberayVersion``
in gitray.yaml picks v1.6.2, and a cluster's own CRDs win when one is read
(gitray.parsing.kuberay). Manifests using each field v1.7.0 added validate and plan with
v1.7.0 and are refused with v1.6.2 (where the API server would refuse them too).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitray.core.model import LiveState
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.parsing.kuberay import UNKNOWN, from_crds, packaged
from gitray.plans.load import load_snapshot
from gitray.plans.planner import compute_plan
from testenv.kuberay import SOURCE
from testenv.manifests import dump
from tests.cel_cases import base_manifest, set_at

CRDS = SOURCE / "ray-operator" / "config" / "crd" / "bases"

# (field, kind, rule-style path, value, what v1.6.2 says)
V170_FIELDS: list[tuple[str, str, tuple[str, ...], Any, str]] = [
    ("tlsOptions", "RayCluster", ("spec", "tlsOptions"), {"enabled": True},
     "spec.tlsOptions: unknown field 'tlsOptions'"),
    ("networkPolicy", "RayCluster", ("spec", "networkPolicy"), {"mode": "DenyAllIngress"},
     "spec.networkPolicy: unknown field 'networkPolicy'"),
    ("historyServerOptions", "RayCluster", ("spec", "historyServerOptions"),
     {"collectorOptions": {"image": "rayproject/ray:2.60.0"}},
     "spec.historyServerOptions: unknown field 'historyServerOptions'"),
    ("autoscalerOptions.command", "RayCluster", ("spec", "autoscalerOptions"),
     {"command": ["ray", "kuberay-autoscaler"]},
     "spec.autoscalerOptions.command: unknown field 'command'"),
    ("GCS fault tolerance without redisAddress", "RayCluster",
     ("spec", "gcsFaultToleranceOptions"), {"backend": "rocksdb"},
     "spec.gcsFaultToleranceOptions: 'redisAddress' is a required property"),
    ("RayService with tlsOptions", "RayService", ("spec", "rayClusterConfig", "tlsOptions"),
     {"enabled": True}, "spec.rayClusterConfig.tlsOptions: unknown field 'tlsOptions'"),
    ("RayCronJob timeZone", "RayCronJob", ("spec", "timeZone"), "Europe/Berlin",
     "spec.timeZone: unknown field 'timeZone'"),
]


def _load(manifest: dict[str, Any], release: str | None) -> Any:
    config = "apiVersion: gitray.io/v1alpha1\nkind: Config\n"
    if release:
        config += f"kuberayVersion: {release}\n"
    files = (RepoFile("gitray.yaml", config.encode()), RepoFile("m.yaml", dump(manifest).encode()))
    return load_snapshot(Snapshot("worktree", "t", files))


@pytest.mark.parametrize("case", V170_FIELDS, ids=[c[0] for c in V170_FIELDS])
def test_a_v170_field_validates_and_plans_with_v170(case: tuple[Any, ...]) -> None:
    _, kind, path, value, _ = case
    manifest = set_at(base_manifest(kind, "new"), path, value)
    for release in (None, "v1.7.0"):  # the default is v1.7.0
        result = _load(manifest, release)
        assert [str(d) for d in result.diagnostics] == []
        assert result.kuberay.version == "v1.7.0"
        plan = compute_plan(result.workloads, LiveState(), result.config, revision="worktree",
                            against="empty", now=datetime(2026, 1, 1, tzinfo=UTC), exact=True)
        assert [w.key.kind for w in plan.workloads] == [kind] and plan.workloads[0].steps


@pytest.mark.parametrize("case", V170_FIELDS, ids=[c[0] for c in V170_FIELDS])
def test_a_v170_field_is_refused_with_v162(case: tuple[Any, ...]) -> None:
    _, kind, path, value, message = case
    result = _load(set_at(base_manifest(kind, "new"), path, value), "v1.6.2")
    assert result.kuberay.version == "v1.6.2"
    assert any(d.message.startswith(message) for d in result.diagnostics), \
        [str(d) for d in result.diagnostics]


def test_an_unknown_kuberay_version_is_a_config_error() -> None:
    result = _load(base_manifest("RayCluster", "c"), "v1.5.0")
    assert [d.message for d in result.diagnostics] == [
        "kuberayVersion: 'v1.5.0' is not one of ['v1.6.2', 'v1.7.0']"]


def _crds() -> list[dict[str, Any]]:
    out = []
    for path in sorted(CRDS.glob("ray.io_*.yaml")):
        crd = YAML(typ="safe").load(path.read_text())
        crd["metadata"] |= {"uid": "u-" + path.stem, "resourceVersion": "41"}
        out.append(crd)
    return out


def test_the_cluster_crds_of_v170_are_recognised_as_v170() -> None:
    served = from_crds(_crds(), packaged("v1.6.2"))
    assert served.version == "v1.7.0"
    assert served.describe() == "KubeRay v1.7.0 schemas (served by the cluster)"
    assert sum(len(r) for r in served.rules.values()) == 26
    # what the cluster serves wins over kuberayVersion: v1.7 fields pass
    manifest = set_at(base_manifest("RayCluster", "c"), ("spec", "tlsOptions"), {"enabled": True})
    files = (RepoFile("gitray.yaml", b"apiVersion: gitray.io/v1alpha1\nkind: Config\n"
                      b"kuberayVersion: v1.6.2\n"), RepoFile("m.yaml", dump(manifest).encode()))
    result = load_snapshot(Snapshot("worktree", "t", files), kuberay=served)
    assert result.diagnostics == () and result.kuberay is served


def test_changed_cluster_crds_are_their_own_schemas() -> None:
    crds = _crds()
    for crd in crds:  # a cluster whose RayCluster CRD has a field no release has
        if crd["spec"]["names"]["kind"] == "RayCluster":
            spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            spec["properties"]["extraField"] = {"type": "string"}
            crd["metadata"]["resourceVersion"] = "42"
    served = from_crds(crds, packaged())
    assert served.version == UNKNOWN and served.key != from_crds(_crds(), packaged()).key
    manifest = set_at(base_manifest("RayCluster", "c"), ("spec", "extraField"), "x")
    files = (RepoFile("gitray.yaml", b"apiVersion: gitray.io/v1alpha1\nkind: Config\n"),
             RepoFile("m.yaml", dump(manifest).encode()))
    assert load_snapshot(Snapshot("worktree", "t", files), kuberay=served).diagnostics == ()
    assert load_snapshot(Snapshot("worktree", "t", files)).diagnostics != ()


def test_kinds_the_cluster_does_not_serve_keep_the_packaged_schemas() -> None:
    only_clusters = [c for c in _crds() if c["spec"]["names"]["kind"] == "RayCluster"]
    served = from_crds(only_clusters, packaged("v1.6.2"))
    assert served.version == "v1.7.0"
    assert served.origin == ("served by the cluster; RayCronJob, RayJob, RayService from the "
                             "packaged v1.6.2")
    assert served.schemas["RayJob"] is packaged("v1.6.2").schemas["RayJob"]
    assert from_crds([], packaged("v1.6.2")) is packaged("v1.6.2")


def test_the_package_ships_both_releases() -> None:
    import gitray

    root = Path(gitray.__file__).parent / "schemas"
    for release in ("v1.6.2", "v1.7.0"):
        names = sorted(p.name for p in (root / f"kuberay-{release}").iterdir())
        assert names == ["cel-rules.json", "raycluster.schema.json", "raycronjob.schema.json",
                         "rayjob.schema.json", "rayservice.schema.json"]
        assert json.loads((root / f"kuberay-{release}" / "rayjob.schema.json").read_text())[
            "x-kuberay-version"] == release
