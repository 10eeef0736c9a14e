"""Commit signatures and history, for ``gitray sync``. Does I/O (``git`` through GitPython).

``verify_commit`` applies only commits SSH-signed by an allowed key (git's
``gpg.ssh.allowedSignersFile`` format); ``is_ancestor`` tells a rewritten history apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import git
from git.exc import GitCommandError

from gitray.core.errors import SourceError
from gitray.git.source import FETCH_TIMEOUT_S

__all__ = ["is_ancestor", "verify_commit"]


def verify_commit(repo_dir: Path, sha: str, allowed_signers: Path) -> str:
    """Check that commit ``sha`` is SSH-signed by a key in ``allowed_signers`` (git's
    ``gpg.ssh.allowedSignersFile`` format). Returns the signer; raises SourceError otherwise."""
    if not allowed_signers.is_file():
        raise SourceError(f"allowed signers file {allowed_signers} does not exist")
    found = git.Repo(repo_dir)
    try:
        out = found.git.execute(
            ["git", "-c", "gpg.format=ssh", "-c",
             f"gpg.ssh.allowedSignersFile={allowed_signers}", "verify-commit", "--raw", sha],
            with_extended_output=True, kill_after_timeout=FETCH_TIMEOUT_S)
        stderr = str(out[2])
    except GitCommandError as err:
        text = (err.stderr or "").strip()
        if "no signature" in text.lower() or not text:
            raise SourceError(f"commit {sha[:7]} is not signed") from err
        last = text.splitlines()[-1].strip().removeprefix("stderr: ").strip("'")
        raise SourceError(f"commit {sha[:7]} is not signed by an allowed key ({last})") \
            from err
    match = re.search(r'Good "git" signature for (\S+)', stderr)
    return match.group(1) if match else "an allowed key"


def is_ancestor(repo_dir: Path, older: str, newer: str) -> bool:
    """Whether ``older`` is in the history of ``newer`` (False if ``older`` is gone)."""
    try:
        git.Repo(repo_dir).git.merge_base("--is-ancestor", older, newer)
    except GitCommandError:
        return False
    return True
