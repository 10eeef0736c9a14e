"""A Go command-line tool of the rendering tests (kustomize, helm) built from the Go module
proxy into the test-environment cache, keyed by its own version. Stdlib only.

Layout (beside the Kubernetes key in ``$GITRAY_TESTENV_CACHE``)::

    <root>/<name>-<version>/bin/<name>       the CLI
    <root>/<name>-<version>/build.log        every go command's output
    <root>/<name>-<version>/versions.json    module, version, Go version, build seconds
    <root>/<name>-<version>/src/             the throwaway module of the build (resumable: the
                                             module cache keeps what an interrupted build
                                             downloaded)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from testenv.build import BuildError, _go_version, _Runner, cache_root
from testenv.timings import note_build

__all__ = ["GoCli"]


@dataclass(frozen=True)
class GoCli:
    name: str  # the binary's name, and the timing summary's component
    module: str  # what `go get` fetches
    version: str
    main: str  # the package built
    ldflags: str  # besides -s -w
    version_args: Sequence[str]  # how the built binary says it runs
    env_var: str  # where a user names another binary (GITRAY_KUSTOMIZE, GITRAY_HELM)
    source: str  # the module of this file, for "run scripts/testenv build (...)"

    def dir(self, root: Path | None = None) -> Path:
        return (root or cache_root()) / f"{self.name}-{self.version}"

    def binary(self, root: Path | None = None) -> Path:
        """Where the built binary is (whether or not it has been built)."""
        return self.dir(root) / "bin" / self.name

    def build(self, root: Path | None = None, say: Callable[[str], None] = print) -> Path:
        """Build the CLI when missing; return its path. Raises BuildError (log tail) on
        failure."""
        out = self.binary(root)
        label = f"{self.module}@{self.version} -> {self.name}"
        if out.is_file():
            say(f"{label}: cached")
            note_build(self.name, None)
            return out
        base = self.dir(root)
        src = base / "src"
        src.mkdir(parents=True, exist_ok=True)
        run = _Runner(base / "build.log")
        say(f"{label}: building (log: {run.log}) ...")
        t0 = time.monotonic()
        (src / "go.mod").write_text(f"module local/{self.name}build\n\ngo 1.26.0\n")
        (src / "tools.go").write_text(
            f'//go:build tools\n\npackage tools\n\nimport _ "{self.main}"\n')
        run.run(["go", "get", f"{self.module}@{self.version}"], cwd=src)
        run.run(["go", "mod", "tidy", "-e"], cwd=src)
        tmp = base / f"tmp-{self.name}"
        run.run(["go", "build", "-trimpath", "-ldflags", f"-s -w {self.ldflags}", "-o",
                 str(tmp), self.main], cwd=src)
        proc = subprocess.run([str(tmp), *self.version_args], capture_output=True, text=True,
                              check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(base)})
        if proc.returncode != 0:
            raise BuildError(f"built {self.name} does not run: {proc.stderr.strip()[-300:]}")
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out)
        seconds = round(time.monotonic() - t0, 1)
        (base / "versions.json").write_text(json.dumps({
            "module": self.module, "version": self.version, "go": _go_version(),
            "reports": proc.stdout.strip(), "build_seconds": seconds,
        }, indent=2) + "\n")
        say(f"{label}: built in {seconds:.0f}s")
        note_build(self.name, seconds)
        return out

    def for_tests(self) -> str:
        """The binary the rendering tests run: the one built here, else ``$<env_var>``, else
        one on PATH. Missing: the test fails with CI=true, else is skipped saying why."""
        from testenv.components import missing  # pytest: only when tests run

        built = self.binary()
        found = (str(built) if built.is_file() else None) or os.environ.get(self.env_var) \
            or shutil.which(self.name)
        if found:
            return found
        missing(f"{self.name} is not built ({built}): run scripts/testenv build "
                f"({self.source})")
