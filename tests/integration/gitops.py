"""Helpers for end-to-end tests: a real Git repository of manifests and the real gitray CLI.

Nothing here imitates Kubernetes, Ray or Git: repositories are made with the git command, and
gitray runs as a separate process (``python -m gitray``) against the test environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from testenv.manifests import write_files

REPO_ROOT = Path(__file__).resolve().parents[2]

class GitOpsRepo:
    """A real Git repository in a temporary directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "tests@gitray.io")
        self.git("config", "user.name", "gitray tests")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.path, check=True, capture_output=True,
                              text=True).stdout.strip()

    def commit(self, message: str, files: dict[str, str | None]) -> str:
        """Write (or, for None, delete) files and commit; returns the commit SHA."""
        write_files(self.path, files)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


@dataclass(frozen=True)
class Gitray:
    """Runs the real gitray CLI against the test environment."""

    kubeconfig: str
    lease_namespace: str
    # None: gitray's default (`proxy` outside a cluster, through the API server), as users run it
    dashboard: str | None = None

    def argv(self, command: str, *args: str) -> list[str]:
        base = [sys.executable, "-m", "gitray", command, *args, "--kubeconfig", self.kubeconfig]
        if command in {"apply", "status", "promote", "abort", "approve", "suspend", "resume",
                       "retry"}:
            base += ["--lease-namespace", self.lease_namespace]
        if command in {"apply", "status"} and self.dashboard:
            base += ["--dashboard", self.dashboard]
        return base

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "NO_COLOR": "1"}

    def run(self, command: str, *args: str,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(command, *args), capture_output=True, text=True,
                              check=False, timeout=timeout, env=self.env(),
                              stdin=subprocess.DEVNULL, cwd=REPO_ROOT)

    def popen(self, command: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(command, *args), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.env(),
                                stdin=subprocess.DEVNULL, cwd=REPO_ROOT)


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
