"""Statuses, plan comments and git notes against a real Gitea (built from the Go module proxy by
testenv/gitea/build.py: v1.26.0 — v1.27.3's go.mod declares ``module gitea.dev``, which the proxy
does not serve under that path — with cgo sqlite; started on 127.0.0.1 by testenv/gitea/server.py).

The Gitea is built on first use (about 9 minutes cold on 2 cores, cached under
``$GITRAY_TESTENV_CACHE/gitea-<version>/``) and started once for this module. A build or start
failure fails these tests: it is never a skip.
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitray.core.config import StatusProvider, StatusSettings
from gitray.core.model import ObjectKey
from gitray.hosts.comments import marker_for, upsert_plan_comment
from gitray.hosts.notes import NOTES_REF, GitNotesProvider
from gitray.hosts.publisher import StatusPublisher, make_publisher
from gitray.hosts.status import CommitStatus, State, context_for, step_description
from testenv.gitea.build import build_any, static_dir
from testenv.gitea.server import ADMIN, Gitea

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_TERMINAL_PROMPT": "0",
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


@pytest.fixture(scope="module")
def gitea() -> Iterator[Gitea]:
    version, binary = build_any()
    workdir = Path(tempfile.mkdtemp(prefix="gitray-gitea-"))
    server = Gitea.start(binary, static_dir(version), workdir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def repo(gitea: Gitea, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A fresh repository with a commit on main and a pull request from ``feature``."""
    name = request.node.name.replace("[", "-").replace("]", "")[:60]
    gitea.api("POST", "/user/repos", json={"name": name, "auto_init": True,
                                            "default_branch": "main"})
    content = base64.b64encode(b"kind: RayService\n").decode()
    gitea.api("POST", f"/repos/{ADMIN}/{name}/contents/apps/ml/serve.yaml",
              json={"content": content, "message": "add serve", "new_branch": "feature",
                    "branch": "main"})
    pr = gitea.api("POST", f"/repos/{ADMIN}/{name}/pulls",
                   json={"head": "feature", "base": "main", "title": "ml: new serve"})
    sha = gitea.api("GET", f"/repos/{ADMIN}/{name}/branches/feature")["commit"]["id"]
    return {"name": name, "full": f"{ADMIN}/{name}", "sha": sha, "pr": pr["number"]}


def settings(gitea: Gitea, repo: dict[str, Any]) -> StatusSettings:
    return StatusSettings(StatusProvider.GITEA, url=gitea.url, repository=repo["full"])


def stored_statuses(gitea: Gitea, repo: dict[str, Any]) -> list[dict[str, Any]]:
    """Every status Gitea stored for the commit, oldest first."""
    found: list[dict[str, Any]] = []
    page = 1
    while True:
        batch = gitea.api("GET", f"/repos/{repo['full']}/commits/{repo['sha']}/statuses",
                          params={"limit": 50, "page": page, "sort": "oldest"})
        found += batch
        if len(batch) < 50:
            return sorted(found, key=lambda s: s["id"])
        page += 1


def test_a_rollout_reaches_gitea_once_per_change(gitea: Gitea, repo: dict[str, Any]) -> None:
    publisher = make_publisher(settings(gitea, repo), token=gitea.token, repo_dir=None)
    sha = repo["sha"]
    overall = context_for("gitray", None)
    workload = context_for("gitray", ObjectKey("RayService", "ml", "summarize"))
    for _ in range(2):
        publisher.publish(CommitStatus(sha, overall, State.PENDING, "planned: 2 steps"))
    for k, step in enumerate(["create cluster summarize-x7k2q", "switch traffic"], start=1):
        for _ in range(3):
            publisher.publish(CommitStatus(sha, workload, State.PENDING,
                                           step_description(k, 2, step),
                                           target_url=f"{gitea.url}/{repo['full']}"))
    for _ in range(3):
        publisher.publish(CommitStatus(sha, workload, State.SUCCESS, "converged"))
        publisher.publish(CommitStatus(sha, overall, State.SUCCESS, "1 workload converged"))
    # another replica (fresh memory) after a failover repeats the final statuses
    replica = make_publisher(settings(gitea, repo), token=gitea.token, repo_dir=None)
    replica.publish(CommitStatus(sha, workload, State.SUCCESS, "converged"))
    replica.publish(CommitStatus(sha, overall, State.SUCCESS, "1 workload converged"))

    rows = stored_statuses(gitea, repo)
    print("\n--- gitea: statuses stored for one rollout")
    for row in rows:
        print(f"  #{row['id']} {row['context']} {row['status']} {row['description']!r}")
    assert [(r["context"], r["status"], r["description"]) for r in rows] == [
        (overall, "pending", "planned: 2 steps"),
        (workload, "pending", "step 1/2: create cluster summarize-x7k2q"),
        (workload, "pending", "step 2/2: switch traffic"),
        (workload, "success", "converged"),
        (overall, "success", "1 workload converged"),
    ]
    combined = gitea.api("GET", f"/repos/{repo['full']}/commits/{sha}/status")
    assert combined["state"] == "success"
    assert publisher.counts().posted == 5
    assert replica.counts().deduplicated == 2
    assert replica.counts().posted == 0


def test_a_long_failure_reason_is_trimmed_and_accepted(gitea: Gitea,
                                                      repo: dict[str, Any]) -> None:
    publisher = make_publisher(settings(gitea, repo), token=gitea.token, repo_dir=None)
    reason = "Traceback (most recent call last):\n" + "  File x.py, line 1\n" * 200
    assert publisher.publish(CommitStatus(repo["sha"], "gitray", State.FAILURE, reason))
    stored = stored_statuses(gitea, repo)[-1]
    assert stored["status"] == "failure"
    assert len(stored["description"]) == 1024
    assert stored["description"].endswith("…")


def test_a_bad_token_never_fails_and_never_leaks(gitea: Gitea, repo: dict[str, Any],
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = gitea.token[:-4] + "0000"
    publisher = make_publisher(settings(gitea, repo), token=wrong, repo_dir=None)
    assert publisher.publish(CommitStatus(repo["sha"], "gitray", State.SUCCESS, "ok")) is False
    assert publisher.counts().failed == 1
    good = make_publisher(settings(gitea, repo), token=gitea.token, repo_dir=None)
    good.publish(CommitStatus(repo["sha"], "gitray", State.ERROR,
                              f"reason quoting {gitea.token}"))
    upsert_plan_comment(settings(gitea, repo), gitea.token, repo["pr"], ".",
                        f"plan quoting {gitea.token}")
    texts = [r.getMessage() for r in caplog.records]
    assert any("HTTP 401" in t for t in texts)
    texts += [s["description"] for s in stored_statuses(gitea, repo)]
    texts += [c["body"] for c in gitea.api("GET",
                                           f"/repos/{repo['full']}/issues/{repo['pr']}/comments")]
    for text in texts:
        assert gitea.token not in text
        assert wrong not in text


def test_one_plan_comment_per_path_on_a_real_pull_request(gitea: Gitea,
                                                          repo: dict[str, Any]) -> None:
    config = settings(gitea, repo)
    comments_path = f"/repos/{repo['full']}/issues/{repo['pr']}/comments"
    for i in range(60):  # more than one API page (MAX_RESPONSE_ITEMS = 50)
        gitea.api("POST", comments_path, json={"body": f"review note {i}"})
    results = [
        upsert_plan_comment(config, gitea.token, repo["pr"], "apps/ml", "### plan\n+ create"),
        upsert_plan_comment(config, gitea.token, repo["pr"], "apps/ml", "### plan\n+ create"),
        upsert_plan_comment(config, gitea.token, repo["pr"], "apps/etl", "### plan\n~ update"),
        upsert_plan_comment(config, gitea.token, repo["pr"], "apps/ml", "### plan\n-/+ replace"),
    ]
    assert results == ["created", "unchanged", "created", "updated"]
    bodies = [c["body"] for c in gitea.api("GET", comments_path)]
    ours = [b for b in bodies if b.startswith("<!-- gitray-plan:")]
    assert sorted(ours) == sorted([
        f"{marker_for('apps/ml')}\n### plan\n-/+ replace\n",
        f"{marker_for('apps/etl')}\n### plan\n~ update\n",
    ])
    assert len(bodies) == 62


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_git_notes_pushed_to_gitea_over_http(gitea: Gitea, repo: dict[str, Any],
                                            tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = gitea.clone_url(repo["name"])
    clones = []
    for name in ("a", "b"):
        work = tmp_path / name
        git(tmp_path, "-c", "credential.helper=", "clone", "--quiet", f"{gitea.url}/"
            f"{repo['full']}.git", str(work))
        clones.append(StatusPublisher(GitNotesProvider(work, url)))
    sha = repo["sha"]
    assert clones[0].publish(CommitStatus(sha, "gitray/ml/RayService/a", State.SUCCESS, "ok"))
    assert clones[1].publish(CommitStatus(sha, "gitray/ml/RayService/b", State.FAILURE, "bad"))
    assert clones[0].publish(CommitStatus(sha, "gitray", State.FAILURE, "1 of 2 failed"))
    check = tmp_path / "check"
    git(tmp_path, "clone", "--quiet", f"{gitea.url}/{repo['full']}.git", str(check))
    git(check, "fetch", "--quiet", "origin", f"{NOTES_REF}:{NOTES_REF}")
    lines = git(check, "notes", f"--ref={NOTES_REF}", "show", sha).splitlines()
    contexts = {line.split('"context": "')[1].split('"')[0] for line in lines}
    assert contexts == {"gitray/ml/RayService/a", "gitray/ml/RayService/b", "gitray"}
    for record in caplog.records:
        assert gitea.token not in record.getMessage()
    for publisher in clones:
        assert publisher.counts().failed == 0
