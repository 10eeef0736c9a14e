"""git-notes statuses against a real bare remote on disk (``git init --bare``), with real clones:
records land in ``refs/notes/gitray`` on the remote; publishers in different clones race to
push and no record is lost; a repeated status adds no notes commit.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from gitray.core.config import StatusProvider, StatusSettings
from gitray.hosts.notes import NOTES_REF, GitNotesProvider
from gitray.hosts.publisher import StatusPublisher, make_publisher
from gitray.hosts.status import CommitStatus, State

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@localhost", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def remote(tmp_path: Path) -> tuple[Path, str]:
    """A bare remote with one commit on main; returns (bare path, the commit)."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "--quiet", str(bare), str(seed))
    (seed / "app.yaml").write_text("kind: RayService\n")
    git(seed, "add", "app.yaml")
    git(seed, "commit", "--quiet", "-m", "first")
    git(seed, "push", "--quiet", "origin", "HEAD:main")
    return bare, git(seed, "rev-parse", "HEAD")


def clone(remote: Path, where: Path) -> Path:
    git(where.parent, "clone", "--quiet", str(remote), str(where))
    return where


def remote_records(bare: Path, sha: str) -> dict[str, dict[str, str]]:
    """The newest record per context of the note the remote holds for ``sha``."""
    text = git(bare, "notes", f"--ref={NOTES_REF}", "show", sha)
    newest: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        record = json.loads(line)
        if record["context"] not in newest or record["at"] >= newest[record["context"]]["at"]:
            newest[record["context"]] = record
    return newest


def notes_commits(bare: Path) -> int:
    return int(git(bare, "rev-list", "--count", NOTES_REF))


def test_a_status_is_a_note_pushed_to_the_remote(remote: tuple[Path, str], tmp_path: Path) -> None:
    bare, sha = remote
    work = clone(bare, tmp_path / "work")
    publisher = make_publisher(StatusSettings(StatusProvider.GIT_NOTES), token=None,
                               repo_dir=work)
    assert publisher.publish(CommitStatus(sha, "gitray", State.PENDING, "planned: 2 steps"))
    assert publisher.publish(CommitStatus(sha, "gitray/default/RayService/serve",
                                          State.SUCCESS, "converged"))
    assert publisher.publish(CommitStatus(sha, "gitray", State.SUCCESS, "converged"))
    records = remote_records(bare, sha)
    assert {c: (r["state"], r["description"]) for c, r in records.items()} == {
        "gitray": ("success", "converged"),
        "gitray/default/RayService/serve": ("success", "converged"),
    }
    # one note per commit, holding one line per context
    assert len(git(bare, "notes", f"--ref={NOTES_REF}", "show", sha).splitlines()) == 2


def test_a_repeated_status_adds_no_notes_commit(remote: tuple[Path, str],
                                                tmp_path: Path) -> None:
    bare, sha = remote
    work = clone(bare, tmp_path / "work")
    publisher = StatusPublisher(GitNotesProvider(work))
    publisher.publish(CommitStatus(sha, "gitray", State.SUCCESS, "converged"))
    before = notes_commits(bare)
    # a fresh publisher (a restart) reads the note before writing
    again = StatusPublisher(GitNotesProvider(work))
    assert again.publish(CommitStatus(sha, "gitray", State.SUCCESS, "converged")) is False
    assert notes_commits(bare) == before
    assert again.counts().deduplicated == 1


def test_a_stale_clone_merges_the_remote_notes_instead_of_losing_them(
        remote: tuple[Path, str], tmp_path: Path) -> None:
    bare, sha = remote
    first = StatusPublisher(GitNotesProvider(clone(bare, tmp_path / "a")))
    second = StatusPublisher(GitNotesProvider(clone(bare, tmp_path / "b")))
    assert first.publish(CommitStatus(sha, "gitray/ns/RayJob/a", State.SUCCESS, "done"))
    # b never fetched a's notes: its push is a non-fast-forward and must merge
    assert second.publish(CommitStatus(sha, "gitray/ns/RayJob/b", State.FAILURE, "failed"))
    assert first.publish(CommitStatus(sha, "gitray", State.SUCCESS, "all converged"))
    records = remote_records(bare, sha)
    assert {c: r["state"] for c, r in records.items()} == {
        "gitray/ns/RayJob/a": "success", "gitray/ns/RayJob/b": "failure", "gitray": "success"}
    assert first.counts().failed == second.counts().failed == 0


def test_racing_publishers_lose_no_record(remote: tuple[Path, str], tmp_path: Path) -> None:
    bare, sha = remote
    names = ("east", "west", "north")
    publishers = {n: StatusPublisher(GitNotesProvider(clone(bare, tmp_path / n)))
                  for n in names}
    start = threading.Barrier(len(names))

    def run(name: str) -> None:
        start.wait()
        for i in range(6):
            publishers[name].publish(CommitStatus(
                sha, f"{name}/default/RayService/app{i}", State.PENDING, f"step 1/2: {name}"))
            publishers[name].publish(CommitStatus(
                sha, f"{name}/default/RayService/app{i}", State.SUCCESS, "converged"))

    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for publisher in publishers.values():
        publisher.flush(wait=True)
    records = remote_records(bare, sha)
    expected = {f"{n}/default/RayService/app{i}" for n in names for i in range(6)}
    assert set(records) == expected
    assert {r["state"] for r in records.values()} == {"success"}
    assert sum(p.counts().failed for p in publishers.values()) == 0
    assert all(p.pending() == 0 for p in publishers.values())
    # every final status was pushed (a pending one may be superseded while waiting to retry)
    assert sum(p.counts().posted for p in publishers.values()) >= 18


def test_a_bare_cache_can_publish(remote: tuple[Path, str], tmp_path: Path) -> None:
    bare, sha = remote
    cache = tmp_path / "cache.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(bare), str(cache))
    other = StatusPublisher(GitNotesProvider(clone(bare, tmp_path / "other")))
    other.publish(CommitStatus(sha, "gitray/x", State.SUCCESS, "ok"))
    publisher = StatusPublisher(GitNotesProvider(cache, str(bare)))  # remote given as a path
    assert publisher.publish(CommitStatus(sha, "gitray", State.ERROR, "kube API unreachable"))
    assert set(remote_records(bare, sha)) == {"gitray/x", "gitray"}


def test_an_unreachable_remote_is_retried_not_raised(remote: tuple[Path, str],
                                                     tmp_path: Path) -> None:
    bare, sha = remote
    work = clone(bare, tmp_path / "work")
    moved = bare.rename(tmp_path / "moved.git")
    publisher = StatusPublisher(GitNotesProvider(work), backoff_s=(0.0,))
    assert publisher.publish(CommitStatus(sha, "gitray", State.SUCCESS, "converged")) is False
    assert publisher.pending() == 1
    moved.rename(bare)
    assert publisher.flush() == 0
    assert remote_records(bare, sha)["gitray"]["state"] == "success"


def test_credentials_in_the_remote_url_never_reach_logs_or_argv(
        remote: tuple[Path, str], tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    _, sha = remote
    secret = "n0tes-S3cret%2Fx"
    work = clone(remote[0], tmp_path / "work")
    argv: list[list[str]] = []
    real_run = subprocess.run

    def spy(args: list[str], **kwargs: Any) -> Any:
        argv.append(list(args))
        return real_run(args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    provider = GitNotesProvider(work, f"http://gitray:{secret}@127.0.0.1:9/ray-apps.git")
    publisher = StatusPublisher(provider, backoff_s=(0.0,), max_attempts=2)
    assert publisher.publish(CommitStatus(sha, "gitray", State.SUCCESS, "converged")) is False
    publisher.flush()
    assert publisher.counts().failed == 1
    texts = [r.getMessage() for r in caplog.records] + [" ".join(a) for a in argv]
    assert any("unable to access" in t or "Failed to connect" in t for t in texts), texts
    for text in texts:
        assert "n0tes-S3cret" not in text
