"""The pre-commit hook (.pre-commit-hooks.yaml) through the real ``pre-commit`` tool: a test
repository uses this project as a hook repository (``repo:`` a Git repository of it, ``rev:``
its commit), pre-commit installs gitray into its own environment (offline, from the test
wheelhouse) and ``git commit`` runs ``gitray validate --staged``. No Kubernetes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitray.cli.app import main
from tests.ci.harness import EXAMPLES, base_env, commit_all, git

# the CI tests need no environment: scripts/test runs them at the end of the alone phase
# (testenv/lanes.py, LATE_DIR)
pytestmark = pytest.mark.late

CLUSTER = "ray-cluster/raycluster.yaml"
PROBLEM = ("ray-cluster/raycluster.yaml:10:3: namespace 'prod' is not in allowedNamespaces "
           "(ray-*, default) of gitray.yaml")


def test_a_bad_manifest_fails_the_commit_and_a_good_one_passes(
        tmp_path: Path, action_checkout: Path, wheelhouse: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {action_checkout}\n"
        f"    rev: {git(action_checkout, 'rev-parse', 'HEAD')}\n"
        "    hooks:\n"
        "      - id: gitray-validate\n")
    git(repo, "init", "-q", "-b", "main")
    first = commit_all(repo, "the GitOps repository, with gitray's hook configured")
    env = {**base_env(tmp_path, wheelhouse), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit"),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo, env=env,
                   check=True, capture_output=True)

    def commit(message: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "commit", "-m", message], cwd=repo, env=env, text=True,
                              capture_output=True, check=False, timeout=600)

    cluster = repo / CLUSTER
    good = cluster.read_text()
    cluster.write_text(good.replace("namespace: ray-dev", "namespace: prod"))
    git(repo, "add", CLUSTER)
    refused = commit("a namespace gitray may not use")
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert f"{PROBLEM}\n" in output
    assert "gitray validate" in output and "Failed" in output
    assert git(repo, "rev-parse", "HEAD") == first

    # the staged revision is what counts: an untracked broken file is not part of the commit
    cluster.write_text(good.replace("team: ml-platform", "team: ml-infra"))
    git(repo, "add", CLUSTER)
    (repo / "scratch").mkdir()
    (repo / "scratch" / "broken.yaml").write_text(
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: x, namespace: prod}\n")
    assert main(["validate", "--repo", str(repo)]) == 1  # the working tree is invalid
    accepted = commit("a new team label")
    output = accepted.stdout + accepted.stderr
    assert accepted.returncode == 0, output
    assert re.search(r"^gitray validate\.+Passed$", output, re.M), output
    assert git(repo, "rev-parse", "HEAD") != first
    assert git(repo, "status", "--porcelain") == "?? scratch/"
    assert os.path.isdir(tmp_path / "pre-commit")
