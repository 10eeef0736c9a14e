"""Reading a new revision re-reads only the blobs it does not already hold (issue 15, item 3).

Real repositories made with the git command, read through GitPython's real object database.
The object database's two entry points (``stream``: an object's bytes, ``info``: its header)
are wrapped to record which objects Git was asked for — the reads still happen. Whatever the
repository's size, a commit that changes one file costs Git one blob; the result is the same
snapshot a cold read gives, and the loader, keyed by blob id, parses only that file.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from git.db import GitCmdObjectDB

from gitray.core.snapshot import Snapshot
from gitray.git.source import read_snapshot
from gitray.plans.load import LoadMemo, load_snapshot

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV},
                          capture_output=True, text=True, check=True).stdout.strip()


def configmap(i: int, version: int) -> str:
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:04d}\n"
            f"  namespace: team-{i % 3}\ndata:\n  version: \"{version}\"\n")


def commit_all(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def blob_ids(repo: Path, sha: str) -> dict[str, str]:
    """path -> blob id of every file at ``sha`` (git ls-tree)."""
    out = git(repo, "ls-tree", "-r", sha)
    return {line.split("\t", 1)[1]: line.split()[2] for line in out.splitlines()}


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Hex ids of every object Git is asked for (bytes or header) while the test runs."""
    seen: list[str] = []
    stream, info = GitCmdObjectDB.stream, GitCmdObjectDB.info

    def counted_stream(self: GitCmdObjectDB, binsha: bytes) -> object:
        seen.append(binsha.hex())
        return stream(self, binsha)

    def counted_info(self: GitCmdObjectDB, binsha: bytes) -> object:
        seen.append(binsha.hex())
        return info(self, binsha)

    monkeypatch.setattr(GitCmdObjectDB, "stream", counted_stream)
    monkeypatch.setattr(GitCmdObjectDB, "info", counted_info)
    yield seen


@pytest.mark.parametrize("files", [20, 600])
def test_a_one_file_change_reads_one_blob_whatever_the_repository_size(
        tmp_path: Path, asked: list[str], files: int) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    tree = {f"d{i % 7}/cm-{i:04d}.yaml": configmap(i, 0) for i in range(files)}
    tree["README.md"] = "# not a manifest\n"
    first = commit_all(repo, tree, "first")
    before = read_snapshot(str(repo), first)
    assert before.blobs_read == files

    second = commit_all(repo, {"d3/cm-0003.yaml": configmap(3, 1)}, "one file changed")
    blobs = blob_ids(repo, second)
    asked.clear()
    after = read_snapshot(str(repo), second, previous=before)
    blobs_asked = {sha for sha in asked if sha in set(blobs.values())}  # (header + bytes)
    assert blobs_asked == {blobs["d3/cm-0003.yaml"]}, blobs_asked
    assert after.blobs_read == 1
    cold = read_snapshot(str(repo), second)
    assert cold.blobs_read == files
    assert after == cold  # the same files, paths and bytes
    assert {f.path: f.blob for f in after.files} == \
        {p: b for p, b in blobs.items() if p.endswith(".yaml")}

    # the loader, keyed by blob id: only the changed file is parsed again
    memo = LoadMemo()
    load_snapshot(before, {}, memo)
    result = load_snapshot(after, {}, memo)
    assert memo.hits == files - 1
    assert result == load_snapshot(cold, {})


def test_a_moved_or_copied_file_reads_nothing_and_new_bytes_are_read(
        tmp_path: Path, asked: list[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    first = commit_all(repo, {"a.yaml": configmap(1, 0), "b.yaml": configmap(2, 0)}, "first")
    before = read_snapshot(str(repo), first)
    (repo / "moved").mkdir()
    git(repo, "mv", "a.yaml", "moved/a.yaml")
    second = commit_all(repo, {"copy-of-b.yaml": configmap(2, 0)}, "moved and copied")
    after = read_snapshot(str(repo), second, previous=before)
    assert after.blobs_read == 0
    assert after == read_snapshot(str(repo), second)
    third = commit_all(repo, {"new.yaml": configmap(3, 0)}, "a new file")
    asked.clear()
    latest = read_snapshot(str(repo), third, previous=after)
    assert latest.blobs_read == 1
    assert [p for p, b in blob_ids(repo, third).items() if b in asked] == ["new.yaml"]


def test_without_a_previous_snapshot_every_blob_is_read(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    sha = commit_all(repo, {"a.yaml": "a: 1\n", "b.yaml": "a: 1\n"}, "same bytes twice")
    snapshot: Snapshot = read_snapshot(str(repo), sha)
    assert snapshot.blobs_read == 2  # one blob id, but nothing to reuse within a read
    assert {f.blob for f in snapshot.files} == {blob_ids(repo, sha)["a.yaml"]}
