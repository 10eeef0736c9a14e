"""The real ``helm`` v4 for gitray's chart-rendering tests (issue 32), built from the Go module
proxy into the test-environment cache, keyed by its own version. Stdlib only. Part of every
``scripts/testenv build`` (after kustomize, before Traefik). Like kustomize: never committed.

Layout (beside the Kubernetes key in ``$GITRAY_TESTENV_CACHE``)::

    <root>/helm-<version>/bin/helm          the CLI (helm.sh/helm/v4/cmd/helm)
    <root>/helm-<version>/build.log         every go command's output
    <root>/helm-<version>/versions.json     module, version, Go version, build seconds
    <root>/helm-<version>/src/              the throwaway module of the build

v4.3.2: the newest helm v4 the module proxy serves here. Tests find the binary with
``helm_for_tests()``; gitray itself finds ``helm`` on PATH or through ``$GITRAY_HELM``
(gitray/render/helm.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.testenv.build import BuildError, _go_version, _Runner, cache_root
from tests.testenv.timings import note_build

__all__ = ["HELM", "build_helm", "helm_binary", "helm_for_tests"]

HELM = ("helm.sh/helm/v4", "v4.3.2")
_MAIN = "helm.sh/helm/v4/cmd/helm"


def helm_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"helm-{HELM[1]}"


def helm_binary(root: Path | None = None) -> Path:
    """Where the built binary is (whether or not it has been built)."""
    return helm_dir(root) / "bin" / "helm"


def build_helm(root: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Build the CLI when missing; return its path. Raises BuildError (log tail) on failure.
    Resumable: the module cache keeps what an interrupted build downloaded."""
    module, version = HELM
    out = helm_binary(root)
    label = f"{module}@{version} -> helm"
    if out.is_file():
        say(f"{label}: cached")
        note_build("helm", None)
        return out
    base = helm_dir(root)
    src = base / "src"
    src.mkdir(parents=True, exist_ok=True)
    run = _Runner(base / "build.log")
    say(f"{label}: building (log: {run.log}) ...")
    t0 = time.monotonic()
    (src / "go.mod").write_text("module local/helmbuild\n\ngo 1.26.0\n")
    (src / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{_MAIN}"\n')
    run.run(["go", "get", f"{module}@{version}"], cwd=src)
    run.run(["go", "mod", "tidy", "-e"], cwd=src)
    tmp = base / "tmp-helm"
    ldflags = f"-s -w -X helm.sh/helm/v4/internal/version.version={version}"
    run.run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), _MAIN], cwd=src)
    proc = subprocess.run([str(tmp), "version", "--short"], capture_output=True, text=True,
                          check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(base)})
    if proc.returncode != 0:
        raise BuildError(f"built helm does not run: {proc.stderr.strip()[-300:]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    seconds = round(time.monotonic() - t0, 1)
    (base / "versions.json").write_text(json.dumps({
        "module": module, "version": version, "go": _go_version(),
        "reports": proc.stdout.strip(), "build_seconds": seconds,
    }, indent=2) + "\n")
    say(f"{label}: built in {seconds:.0f}s")
    note_build("helm", seconds)
    return out


def helm_for_tests() -> str:
    """The helm the rendering tests run: the one built here, else ``$GITRAY_HELM``, else one
    on PATH. Missing: the test fails with CI=true, else is skipped saying why."""
    import shutil

    from tests.testenv.components import missing  # pytest: only when tests run

    built = helm_binary()
    found = (str(built) if built.is_file() else None) or os.environ.get("GITRAY_HELM") \
        or shutil.which("helm")
    if found:
        return found
    missing(f"helm is not built ({built}): run scripts/testenv build (tests/testenv/helm.py)")


if __name__ == "__main__":
    build_helm(say=lambda m: print(m, flush=True))
