"""The GitHub Action (action.yml) run step by step as the runner would, with the environment
GitHub sets for a pull_request event, against the GitHub contract host (testenv/githost): one
plan comment created and then edited, outputs written, problems as workflow commands. No
Kubernetes: the plan is offline, against the pull request's base commit."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from testenv.githost.server import GitHost
from tests.ci.harness import EXAMPLES, ActionRun, base_env, commit_all, git, run_action

# the CI tests need no environment: scripts/test runs them at the end of the alone phase
# (testenv/lanes.py, LATE_DIR)
pytestmark = pytest.mark.late

TOKEN = "ghs_actionTestToken0123456789abcdef"
PR = 7
SERVICE = "ray-serve/rayservice.yaml"
CLUSTER = "ray-cluster/raycluster.yaml"


def edit(repo: Path, path: str, old: str, new: str) -> None:
    file = repo / path
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new))


def pull_request(tmp: Path, repo: Path, base: str, host: GitHost, env: dict[str, str],
                 action: Path, **inputs: str) -> ActionRun:
    event = tmp / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": PR, "pull_request": {
        "number": PR, "base": {"ref": "main", "sha": base},
        "head": {"ref": "feature", "sha": git(repo, "rev-parse", "HEAD")}}}))
    runner_temp = tmp / f"runner-temp-{len(list(tmp.glob('runner-temp-*')))}"
    runner_temp.mkdir()
    github = {"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_EVENT_NAME": "pull_request",
              "GITHUB_EVENT_PATH": str(event), "GITHUB_REF": f"refs/pull/{PR}/merge",
              "GITHUB_REPOSITORY": "acme/ray-gitops", "GITHUB_API_URL": host.url,
              "GITHUB_SERVER_URL": "https://github.com", "GITHUB_WORKSPACE": str(repo),
              "GITHUB_STEP_SUMMARY": str(runner_temp / "summary.md"),
              "RUNNER_TEMP": str(runner_temp)}
    return run_action(action, repo, inputs, {**env, **github}, {"token": TOKEN})


def test_the_action_comments_once_edits_in_place_and_sets_outputs(
        tmp_path: Path, action_checkout: Path, wheelhouse: Path) -> None:
    repo = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, repo)
    git(repo, "init", "-q", "-b", "main")
    base = commit_all(repo, "base")
    edit(repo, SERVICE, "ray:2.60.0", "ray:2.60.1")
    edit(repo, SERVICE, "num_replicas: 1", "num_replica: 1")  # a warning: Serve ignores it
    commit_all(repo, "a new Ray image")
    env = base_env(tmp_path, wheelhouse)
    with GitHost(TOKEN) as host:
        host.add_issue(PR)
        first = pull_request(tmp_path, repo, base, host, env, action_checkout)
        assert first.returncode == 0, first.stderr
        # gitray comes from the action's own checkout (the ref it is used at)
        assert first.steps[0].stdout.strip() == "gitray 0.1.0"
        venv = tmp_path / "runner-temp-0" / "gitray-venv"
        (installed,) = venv.glob("lib/python*/site-packages/gitray/cli/ci.py")
        assert installed.read_text() == (action_checkout / "gitray/cli/ci.py").read_text()
        assert first.outputs == {"valid": "true", "has-changes": "true",
                                 "workloads-changed": "1", "blue-green": "1", "against": base,
                                 "plan-json": str(tmp_path / "runner-temp-0/gitray-plan.json")}
        (comment,) = host.comments("github", PR)
        assert "ray:2.60.1" in comment["body"] and "serve-demo" in comment["body"]
        # inline: a notice on the RayService's manifest, the warning where the key is
        assert ("::notice file=ray-serve/rayservice.yaml,line=8,col=1,title=gitray plan::"
                "± RayService ray-serve/serve-demo: replace (7 steps)\n") in first.stdout
        warnings = re.findall(r"^::warning file=ray-serve/rayservice\.yaml,line=(\d+),col=(\d+),"
                              r"title=gitray::(.*)$", first.stdout, re.M)
        assert len(warnings) == 2 and all("unknown key 'num_replica'" in w[2] for w in warnings)
        assert "gitray plan for" in (tmp_path / "runner-temp-0/summary.md").read_text()

        edit(repo, SERVICE, "ray:2.60.1", "ray:2.60.2")  # a new push: the comment is edited
        commit_all(repo, "another image")
        second = pull_request(tmp_path, repo, base, host, env, action_checkout)
        assert second.returncode == 0, second.stderr
        (edited,) = host.comments("github", PR)
        assert edited["id"] == comment["id"] and "ray:2.60.2" in edited["body"]
        assert [r.method for r in host.log(contains="/comments")
                if r.method != "GET"] == ["POST", "PATCH"]

        edit(repo, CLUSTER, "namespace: ray-dev", "namespace: prod")  # invalid: no plan
        commit_all(repo, "a namespace gitray may not use")
        third = pull_request(tmp_path, repo, base, host, env, action_checkout)
        assert third.returncode == 1
        assert ("::error file=ray-cluster/raycluster.yaml,line=10,col=3,title=gitray::namespace "
                "'prod' is not in allowedNamespaces (ray-*, default) of gitray.yaml\n"
                ) in third.stdout
        assert third.steps[-1].outputs["valid"] == "false"
        (invalid,) = host.comments("github", PR)
        assert invalid["id"] == comment["id"]
        assert "ray-cluster/raycluster.yaml:10:3: namespace 'prod'" in invalid["body"]
        assert "Plan:" not in invalid["body"]
        for run in (first, second, third):
            assert TOKEN not in run.stdout + run.stderr
        assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in host.log())


def test_the_kubeconfig_input_plans_live_and_never_leaks(
        tmp_path: Path, action_checkout: Path, wheelhouse: Path) -> None:
    """With ``kubeconfig`` the plan is against the live cluster: here an API server that is
    not listening, so the step fails with gitray's one line, the kubeconfig's token appears
    nowhere, and its file is gone after the step."""
    repo = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, repo)
    git(repo, "init", "-q", "-b", "main")
    base = commit_all(repo, "base")
    secret = "kubeSecretToken0123456789"
    kubeconfig = (
        "apiVersion: v1\nkind: Config\ncurrent-context: ro\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9',"
        " insecure-skip-tls-verify: true}}]\n"
        f"users: [{{name: u, user: {{token: {secret}}}}}]\n"
        "contexts: [{name: ro, context: {cluster: c, user: u}}]\n")
    env = base_env(tmp_path, wheelhouse)
    with GitHost(TOKEN) as host:
        host.add_issue(PR)
        run = pull_request(tmp_path, repo, base, host, env, action_checkout,
                           kubeconfig=kubeconfig)
    assert run.returncode == 1
    assert [s.id for s in run.steps] == ["install", "plan"]
    assert "gitray: error: discovering API resources: API server unreachable" in run.stderr
    assert "Traceback" not in run.stderr
    assert secret not in run.stdout + run.stderr and TOKEN not in run.stdout + run.stderr
    assert not (tmp_path / "runner-temp-0" / "gitray-kubeconfig").exists()
    assert host.comments("github", PR) == []
