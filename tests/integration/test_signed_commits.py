"""Signed commits (issue 6, item 8): ``gitray sync --allowed-signers FILE`` against a real bare
remote, real ``ssh-keygen`` keys and real SSH-signed commits, statuses in git notes.

An unsigned commit and a commit signed by a key that is not in the allowed-signers file are not
applied and get a ``failure`` status saying why; a commit signed by an allowed key is applied.
A refused commit cannot steer gitray either: its gitray.yaml (which here points the commit
statuses, and so the status token, at another server) is not used.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testenv.githost.server import GitHost
from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump, gitray_config
from tests.integration.chaos import Replica, start_replica
from tests.integration.gitops import GitOpsRepo
from tests.integration.test_daemon import notes

STATUS_TOKEN = "status-token-for-signed-commit-tests"


def keygen(path: Path, comment: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, capture_output=True)
    return path


def configmap(ns: str, name: str, value: str) -> str:
    return dump({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": name, "namespace": ns}, "data": {"value": value}})


class SigningRepo:
    def __init__(self, tmp: Path) -> None:
        self.bare = tmp / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.bare)],
                       check=True)
        self.work = GitOpsRepo(tmp / "work")
        self.work.git("remote", "add", "origin", str(self.bare))
        self.work.git("config", "gpg.format", "ssh")

    def push(self, message: str, files: dict[str, str | None], key: Path | None) -> str:
        if key is None:
            self.work.git("config", "commit.gpgsign", "false")
        else:
            self.work.git("config", "commit.gpgsign", "true")
            self.work.git("config", "user.signingkey", str(key))
        sha = self.work.commit(message, files)
        self.work.git("push", "-q", "origin", "main")
        return sha


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(allowed key, other key, allowed-signers file naming only the allowed key)."""
    allowed = keygen(tmp_path / "allowed_ed25519", "release@gitray.io")
    other = keygen(tmp_path / "other_ed25519", "mallory@example.com")
    signers = tmp_path / "allowed_signers"
    public = (tmp_path / "allowed_ed25519.pub").read_text().split()
    signers.write_text(f'release@gitray.io namespaces="git" {public[0]} {public[1]}\n')
    return allowed, other, signers


@pytest.fixture
def repo(tmp_path: Path) -> SigningRepo:
    return SigningRepo(tmp_path)


@pytest.fixture
def daemon(testenv: TestEnv, namespace: str, repo: SigningRepo, keys: tuple[Path, Path, Path],
           tmp_path: Path) -> Iterator[Replica]:
    token_file = tmp_path / "status-token"
    token_file.write_text(STATUS_TOKEN + "\n")
    sync = start_replica(testenv.kubeconfig, namespace, repo.bare, tmp_path, "daemon",
                         extra=("--allowed-signers", str(keys[2]), "--status-token-file",
                                str(token_file), "--log-format", "text"))  # the last one wins
    try:
        yield sync
    finally:
        sync.terminate()


def value(env: TestEnv, ns: str) -> tuple[str, str] | None:
    items = env.core.list_namespaced_config_map(ns, field_selector="metadata.name=app").items
    return (items[0].metadata.resource_version, items[0].data["value"]) if items else None


def overall(bare: Path, sha: str) -> dict[str, str]:
    return notes(bare, sha).get("gitray", {})


def test_only_commits_signed_by_an_allowed_key_are_applied(
        testenv: TestEnv, namespace: str, repo: SigningRepo, keys: tuple[Path, Path, Path],
        daemon: Replica) -> None:
    allowed, other, _ = keys
    ns = namespace
    config = gitray_config(status={"provider": "git-notes"}, allowedNamespaces=[ns])

    first = repo.push("signed", {"gitray.yaml": config, "app.yaml": configmap(ns, "app", "1")},
                      allowed)
    wait_for(lambda: overall(repo.bare, first).get("state") == "success" or None,
             timeout=120, what="the signed first commit applied")
    applied = value(testenv, ns)
    assert applied is not None and applied[1] == "1"
    assert f"{first[:7]} is signed by release@gitray.io" in daemon.logs()

    with GitHost(token=STATUS_TOKEN) as elsewhere:
        # An unsigned commit that would also move the statuses (and the token) elsewhere.
        moved = gitray_config(allowedNamespaces=[ns], status={
            "provider": "github", "url": elsewhere.url, "repository": "mallory/loot"})
        unsigned = repo.push("unsigned", {"gitray.yaml": moved,
                                          "app.yaml": configmap(ns, "app", "unsigned")}, None)
        wait_for(lambda: overall(repo.bare, unsigned).get("state") or None, timeout=60,
                 what="a status for the unsigned commit")
        status = overall(repo.bare, unsigned)
        assert status["state"] == "failure", status
        assert status["description"] == f"not applied: commit {unsigned[:7]} is not signed", \
            status
        assert value(testenv, ns) == applied  # not applied
        assert f"{unsigned[:7]} not applied: commit {unsigned[:7]} is not signed" \
            in daemon.logs()

        foreign = repo.push("signed by someone else", {
            "app.yaml": configmap(ns, "app", "foreign")}, other)
        wait_for(lambda: overall(repo.bare, foreign).get("state") or None, timeout=60,
                 what="a status for the commit signed by another key")
        status = overall(repo.bare, foreign)
        assert status["state"] == "failure", status
        assert status["description"].startswith(
            f"not applied: commit {foreign[:7]} is not signed by an allowed key"), status
        assert value(testenv, ns) == applied
        assert elsewhere.log() == [], "a refused commit steered the status provider"

    good = repo.push("signed again", {"gitray.yaml": config,
                                      "app.yaml": configmap(ns, "app", "2")}, allowed)
    wait_for(lambda: overall(repo.bare, good).get("state") == "success" or None, timeout=60,
             what="the signed commit applied")
    final = value(testenv, ns)
    assert final is not None and final[1] == "2"
    assert notes(repo.bare, good)[f"gitray/{ns}/ConfigMap/app"]["state"] == "success"
    for refused in (unsigned, foreign):  # their failure stays; no later success on them
        assert overall(repo.bare, refused)["state"] == "failure"
    assert daemon.metric("gitray_invalid_revisions_total") == 2
    assert daemon.proc.poll() is None and "Traceback" not in daemon.logs()
