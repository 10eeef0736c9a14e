"""The real ``kustomize`` v5 for gitray's rendering tests (issue 32), built from the Go module
proxy into the test-environment cache, keyed by its own version. Stdlib only. Part of every
``scripts/testenv build`` (after the environment, before Traefik).

Layout (beside the Kubernetes key in ``$GITRAY_TESTENV_CACHE``)::

    <root>/kustomize-<version>/bin/kustomize     the CLI (sigs.k8s.io/kustomize/kustomize/v5)
    <root>/kustomize-<version>/build.log         every go command's output
    <root>/kustomize-<version>/versions.json     module, version, Go version, build seconds
    <root>/kustomize-<version>/src/              the throwaway module of the build

v5.8.2: the newest CLI whose go.mod asks for no newer Go than this machine's 1.26 (v5.8.3 needs
1.27); it requires sigs.k8s.io/kustomize/api v0.21.2. Tests find the binary with
``kustomize_binary()``; gitray itself finds ``kustomize`` on PATH or through gitray.yaml's
``render.kustomize`` (docs/rendering.md).
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

__all__ = ["KUSTOMIZE", "build_kustomize", "kustomize_binary"]

KUSTOMIZE = ("sigs.k8s.io/kustomize/kustomize/v5", "v5.8.2")


def kustomize_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"kustomize-{KUSTOMIZE[1]}"


def kustomize_binary(root: Path | None = None) -> Path:
    """Where the built binary is (whether or not it has been built)."""
    return kustomize_dir(root) / "bin" / "kustomize"


def build_kustomize(root: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Build the CLI when missing; return its path. Raises BuildError (log tail) on failure."""
    module, version = KUSTOMIZE
    out = kustomize_binary(root)
    label = f"{module}@{version} -> kustomize"
    if out.is_file():
        say(f"{label}: cached")
        note_build("kustomize", None)
        return out
    base = kustomize_dir(root)
    src = base / "src"
    src.mkdir(parents=True, exist_ok=True)
    run = _Runner(base / "build.log")
    say(f"{label}: building (log: {run.log}) ...")
    t0 = time.monotonic()
    (src / "go.mod").write_text("module local/kustomizebuild\n\ngo 1.26.0\n")
    (src / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{module}"\n')
    run.run(["go", "get", f"{module}@{version}"], cwd=src)
    run.run(["go", "mod", "tidy", "-e"], cwd=src)
    tmp = base / "tmp-kustomize"
    ldflags = f"-s -w -X sigs.k8s.io/kustomize/api/provenance.version=kustomize/{version}"
    run.run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), module], cwd=src)
    proc = subprocess.run([str(tmp), "version"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"built kustomize does not run: {proc.stderr.strip()[-300:]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    seconds = round(time.monotonic() - t0, 1)
    (base / "versions.json").write_text(json.dumps({
        "module": module, "version": version, "go": _go_version(),
        "reports": proc.stdout.strip(), "build_seconds": seconds,
    }, indent=2) + "\n")
    say(f"{label}: built in {seconds:.0f}s")
    note_build("kustomize", seconds)
    return out


def kustomize_for_tests() -> str:
    """The kustomize the rendering tests run: the one built here, else ``$GITRAY_KUSTOMIZE``,
    else one on PATH. Missing: the test fails with CI=true, else is skipped saying why."""
    import shutil

    from tests.testenv.components import missing  # pytest: only when tests run

    built = kustomize_binary()
    found = (str(built) if built.is_file() else None) or os.environ.get("GITRAY_KUSTOMIZE") \
        or shutil.which("kustomize")
    if found:
        return found
    message = (f"kustomize is not built ({built}): run scripts/testenv build "
               "(tests/testenv/kustomize.py)")
    missing(message)


if __name__ == "__main__":
    build_kustomize(say=lambda m: print(m, flush=True))
