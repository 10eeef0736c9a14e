"""Kustomize overlays applied by the real ``gitray apply`` to the real API server (issue 32),
rendered with the real kustomize v5 of the test environment (testenv/kustomize.py).

A base (a ConfigMap and a suspended RayCluster: no pods) and an overlay that puts them in the
test's namespace and patches them: the live objects are what ``kustomize build`` printed; a
change of the overlay's patch is planned under the overlay's name and applied; a broken patch
is refused at the patch's line and changes nothing.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from testenv.helpers import TestEnv
from testenv.kustomize import kustomize_for_tests
from testenv.manifests import dump, gitray_config
from tests.integration.gitops import REPO_ROOT, GitOpsRepo, Gitray, output

EXAMPLE_CLUSTER = REPO_ROOT / "examples-repo" / "ray-cluster" / "raycluster.yaml"
_yaml = YAML(typ="safe", pure=True)


def base_files() -> dict[str, str | None]:
    cluster: dict[str, Any] = _yaml.load(EXAMPLE_CLUSTER.read_text())
    cluster["metadata"] = {"name": "lab"}
    cluster["spec"]["suspend"] = True  # no pods: the objects are what matters here
    return {
        "base/cluster.yaml": dump(cluster),
        "base/settings.yaml": dump({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "settings"},
                                    "data": {"level": "base"}}),
        "base/kustomization.yaml": "resources: [cluster.yaml, settings.yaml]\n",
    }


def overlay(ns: str, level: str, max_replicas: int = 3) -> dict[str, str | None]:
    return {
        "overlays/test/kustomization.yaml": (
            f"namespace: {ns}\nresources: [../../base]\npatches:\n"
            "  - path: settings.yaml\n"
            "  - path: workers.yaml\n    target: {kind: RayCluster, name: lab}\n"),
        "overlays/test/settings.yaml": dump({"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": "settings"},
                                             "data": {"level": level}}),
        "overlays/test/workers.yaml": (
            "- op: replace\n  path: /spec/workerGroupSpecs/0/maxReplicas\n"
            f"  value: {max_replicas}\n"),
    }


@dataclass(frozen=True)
class KustomizeGitray(Gitray):
    """The CLI with the test environment's kustomize."""

    kustomize: str = ""

    def env(self) -> dict[str, str]:
        return {**super().env(), "GITRAY_KUSTOMIZE": self.kustomize}


@pytest.fixture
def tools(testenv: TestEnv, namespace: str, tmp_path: Path) -> tuple[GitOpsRepo, Gitray]:
    gitray = KustomizeGitray(testenv.kubeconfig, namespace, kustomize=kustomize_for_tests())
    return GitOpsRepo(tmp_path / "repo"), gitray


def test_an_overlay_is_applied_as_kustomize_builds_it_and_errors_point_at_the_patch(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    repo, gitray = tools
    repo.commit("v1", {"gitray.yaml": gitray_config(namespace=namespace), **base_files(),
                       **overlay(namespace, "staging")})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert f"# RayCluster {namespace}/lab  (overlays/test/kustomization.yaml:1:1)" in r.stdout
    built = subprocess.run([kustomize_for_tests(), "build", "overlays/test"], cwd=repo.path,
                           capture_output=True, text=True, check=True).stdout
    expected = {d["kind"]: d for d in _yaml.load_all(built)}
    settings = testenv.core.read_namespaced_config_map("settings", namespace)
    assert settings.data == expected["ConfigMap"]["data"] == {"level": "staging"}
    cluster = testenv.custom.get_namespaced_custom_object("ray.io", "v1", namespace,
                                                          "rayclusters", "lab")
    assert cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] == \
        expected["RayCluster"]["spec"]["workerGroupSpecs"][0]["maxReplicas"] == 3

    repo.commit("v2", overlay(namespace, "staging", max_replicas=4))
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    assert f"# RayCluster {namespace}/lab  (overlays/test/kustomization.yaml:1:1)" in r.stdout
    assert "maxReplicas: 3 -> 4" in r.stdout, output(r)
    assert gitray.run("apply", "--repo", str(repo.path), "--yes").returncode == 0
    cluster = testenv.custom.get_namespaced_custom_object("ray.io", "v1", namespace,
                                                          "rayclusters", "lab")
    assert cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] == 4

    before = testenv.core.read_namespaced_config_map("settings", namespace).metadata
    bad = dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                "data": {"level": 7}})
    repo.commit("v3", {"overlays/test/settings.yaml": bad})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 1, output(r)
    assert r.stderr.splitlines()[0] == (
        "overlays/test/settings.yaml:7:3: data.level must be a string; quote the value "
        "(rendered by kustomize build overlays/test, patch overlays/test/settings.yaml)"), \
        output(r)
    assert "Traceback" not in r.stderr
    after = testenv.core.read_namespaced_config_map("settings", namespace).metadata
    assert after.resource_version == before.resource_version
