"""The command line loads only what a command needs, and renders errors as one line.

``gitray --help`` and ``gitray plan`` against an empty cluster load neither the daemon
(apscheduler, prometheus_client) nor the Kubernetes client; errors raised deep in an adapter
(chained to their cause) still reach the user as one line, without a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitray.cli.contract import FORMATS
from gitray.plans.render import Format

REPO_ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("kubernetes", "apscheduler", "prometheus_client", "gitray.daemon", "gitray.k8s.client",
         "gitray.engine.wiring")

PROBE = """
import contextlib, io, json, sys
from gitray.cli import main
argv = json.loads(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(argv)
    except SystemExit:
        pass
heavy = json.loads(sys.argv[2])
print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".")
                                                      for h in heavy))))
"""


def loaded(*argv: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KUBECONFIG": "/nonexistent"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(argv)),
                          json.dumps(HEAVY)], capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT, env=env).stdout
    result: list[str] = json.loads(out)
    return result


def gitray(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KUBECONFIG": "/nonexistent"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run([sys.executable, "-m", "gitray", *argv], capture_output=True,
                          text=True, check=False, cwd=REPO_ROOT, env=env)


def test_help_loads_neither_the_daemon_nor_the_kubernetes_client() -> None:
    assert loaded("--help") == []
    assert loaded("plan", "--help") == []


def test_plan_against_an_empty_cluster_loads_neither() -> None:
    assert loaded("plan", "--repo", "examples-repo") == []
    assert loaded("plan", "--repo", "examples-repo", "--against", "empty",
                  "--format", "json") == []


def test_the_parser_offers_every_plan_format() -> None:
    assert tuple(f.value for f in Format) == FORMATS


def test_an_adapter_error_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    result = gitray("plan", "--repo", str(tmp_path), "--revision", "nope")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("gitray: error: ")
    assert "Traceback" not in result.stderr


def test_an_unreadable_remote_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    result = gitray("validate", "--repo", f"file://{tmp_path}/missing.git")
    assert result.returncode == 1
    assert result.stderr.startswith("gitray: error: cannot fetch ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
