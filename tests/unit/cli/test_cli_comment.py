"""`gitray plan --comment`: one PR comment per repository path, kept up to date, against a
strict local Git-host API (testenv/githost: a test double of a Git host, not of Kubernetes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gitray.cli.app import main
from testenv.githost.server import GitHost

EXAMPLES = Path(__file__).parents[3] / "examples-repo"
TOKEN = "ghp_cli_comment_test_token"


def repo_with_github(tmp_path: Path, url: str) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    config = (repo / "gitray.yaml").read_text().replace(
        "  provider: none", f"  provider: github\n  url: {url}\n  repository: acme/ray")
    (repo / "gitray.yaml").write_text(config)
    return repo


def test_plan_comment_is_created_once_and_then_updated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITRAY_STATUS_TOKEN", TOKEN)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with GitHost(TOKEN) as host:
        host.add_issue(7)
        repo = repo_with_github(tmp_path, host.url)
        args = ["plan", "--repo", str(repo), "--against", "empty", "--comment", "--pr", "7"]
        outcomes = []
        for _ in range(2):
            assert main(args) == 0
            outcomes.append(capsys.readouterr().err.strip().splitlines()[-1])
        service = repo / "ray-serve" / "rayservice.yaml"
        service.write_text(service.read_text().replace("ray:2.60.0", "ray:2.60.1"))
        assert main(args) == 0
        outcomes.append(capsys.readouterr().err.strip().splitlines()[-1])
        (comment,) = host.comments("github", 7)
        assert outcomes == ["plan comment on #7: created", "plan comment on #7: unchanged",
                            "plan comment on #7: updated"]
        assert "<!-- gitray-plan" in comment["body"] and "ray:2.60.1" not in TOKEN
        assert TOKEN not in comment["body"]


def test_comment_without_a_pr_number_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("GITRAY_PR", "GITHUB_REF", "CI_MERGE_REQUEST_IID", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)
    code = main(["plan", "--repo", str(EXAMPLES), "--against", "empty", "--comment"])
    assert code == 1
    assert "--comment needs the pull request number" in capsys.readouterr().err
