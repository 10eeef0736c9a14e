"""What gitray checks or keeps before it changes anything: the prune opt-out, against the real
API server (``gitray apply`` through the CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.gitops import GitOpsRepo, Gitray, output
from tests.manifests import dump, gitray_config
from tests.testenv.helpers import TestEnv


def configmap(ns: str, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": name}}


@pytest.fixture
def tools(testenv: TestEnv, namespace: str, tmp_path: Path) -> tuple[GitOpsRepo, Gitray]:
    return GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, namespace)


def names(env: TestEnv, ns: str) -> set[str]:
    return {cm.metadata.name for cm in env.core.list_namespaced_config_map(ns).items
            if (cm.metadata.labels or {}).get("gitray.io/role") == "object"}


def test_prune_opt_out_in_git_or_by_hand_keeps_an_object_that_left_git(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    repo, gitray = tools
    opt_out = {"gitray.io/prune": "disabled"}
    repo.commit("v1", {
        "gitray.yaml": gitray_config(namespace=namespace),
        "stay.yaml": dump(configmap(namespace, "stay")),
        "in-git.yaml": dump(configmap(namespace, "in-git", opt_out)),
        "by-hand.yaml": dump(configmap(namespace, "by-hand")),
        "plain.yaml": dump(configmap(namespace, "plain")),
    })
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert names(testenv, namespace) == {"stay", "in-git", "by-hand", "plain"}
    testenv.core.patch_namespaced_config_map(
        "by-hand", namespace, {"metadata": {"annotations": opt_out}})

    repo.commit("v2", {"in-git.yaml": None, "by-hand.yaml": None, "plain.yaml": None})
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    for kept in ("in-git", "by-hand"):
        assert (f"{namespace}/ConfigMap/{kept} was removed from Git but is kept: "
                f"gitray.io/prune: disabled on ConfigMap {kept}") in r.stdout, output(r)
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert names(testenv, namespace) == {"stay", "in-git", "by-hand"}

    # removing the opt-out by hand lets the next apply prune it
    testenv.core.patch_namespaced_config_map(
        "by-hand", namespace, {"metadata": {"annotations": {"gitray.io/prune": None}}})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert names(testenv, namespace) == {"stay", "in-git"}
