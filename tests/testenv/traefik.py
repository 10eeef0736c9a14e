"""Traefik and the Gateway API CRDs for the test environment (issue 16's data plane): built
from the Go module proxy into the test-environment cache, keyed by their own versions. Stdlib
only. Opt-in: ``scripts/testenv build --gateway`` (or ``--gateway-only``) calls
``build_gateway``; plain ``scripts/testenv build`` (scripts/test, .ci/run) never does, because
Traefik's cold compile (~15 min) would not fit the cold CI budget.

Layout (beside the Kubernetes key in ``$GITRAY_TESTENV_CACHE``)::

    <root>/traefik-<version>/bin/traefik        github.com/traefik/traefik/v3, ./cmd/traefik
    <root>/traefik-<version>/build.log          every go command and its output
    <root>/traefik-<version>/versions.json      module, Go, build seconds, binary size
    <root>/gateway-api-<version>/crds/*.yaml    config/crd/standard of sigs.k8s.io/gateway-api

Traefik's go.mod has replace directives, so ``go install ...@version`` fails; but its module
directory is a complete main module (go.sum; the web UI's ``static`` placeholder for
``go:embed``): it is copied out of the module cache and ``go build ./cmd/traefik`` runs in the
copy (``-mod=readonly``: nothing is resolved again). v3.6.12 because v3.7.x cannot be built from
the proxy (some of its dependencies' zips are refused); the Gateway API version must be the
one that Traefik's go.mod requires (checked). Each output is written under a temporary name
and renamed, so an interrupted build is resumed (Go's build cache keeps the compiled packages).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.testenv.build import BuildError, _go_version, _Runner, module_dir

__all__ = ["GATEWAY_API", "TRAEFIK", "GatewayLayout", "build_gateway"]

TRAEFIK = ("github.com/traefik/traefik/v3", "v3.6.12")
GATEWAY_API = ("sigs.k8s.io/gateway-api", "v1.4.0")
_VERSION_PKG = "github.com/traefik/traefik/v3/pkg/version"


@dataclass(frozen=True)
class GatewayLayout:
    """Paths of the Traefik and Gateway API cache entries under ``root``."""

    root: Path
    traefik_version: str = TRAEFIK[1]
    gateway_api_version: str = GATEWAY_API[1]

    @property
    def traefik_dir(self) -> Path:
        return self.root / f"traefik-{self.traefik_version}"

    @property
    def traefik(self) -> Path:
        return self.traefik_dir / "bin" / "traefik"

    @property
    def log(self) -> Path:
        return self.traefik_dir / "build.log"

    @property
    def versions_file(self) -> Path:
        return self.traefik_dir / "versions.json"

    @property
    def crds(self) -> Path:
        return self.root / f"gateway-api-{self.gateway_api_version}" / "crds"

    def crd_files(self) -> list[Path]:
        return sorted(self.crds.glob("*.yaml")) if self.crds.is_dir() else []

    def complete(self) -> bool:
        return self.traefik.is_file() and bool(self.crd_files())


def _copy_writable(src: Path, dst: Path) -> None:
    """Copy a module directory (read-only in the module cache) as a writable tree."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    for path in [dst, *dst.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _required_version(gomod: str, module: str) -> str | None:
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", gomod, re.M)
    return found.group(1) if found else None


def _extract_crds(gl: GatewayLayout, cwd: Path) -> int:
    source = module_dir(GATEWAY_API[0], gl.gateway_api_version, cwd) / "config/crd/standard"
    files = sorted(source.glob("*.yaml"))
    if not files:
        raise BuildError(f"{GATEWAY_API[0]}@{gl.gateway_api_version}: no CRDs in {source}")
    tmp = gl.crds.with_name("crds.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for crd in files:
        shutil.copyfile(crd, tmp / crd.name)
    shutil.rmtree(gl.crds, ignore_errors=True)
    os.replace(tmp, gl.crds)
    return len(files)


def _build_traefik(gl: GatewayLayout, run: _Runner) -> None:
    module, version = TRAEFIK[0], gl.traefik_version
    source = module_dir(module, version, gl.root)
    wanted = _required_version((source / "go.mod").read_text(), GATEWAY_API[0])
    if wanted != gl.gateway_api_version:
        raise BuildError(f"{module}@{version} requires {GATEWAY_API[0]} {wanted}, not "
                         f"{gl.gateway_api_version}: move the two pins together")
    src = gl.traefik_dir / "src"
    _copy_writable(source, src)
    tmp = gl.traefik.with_name("traefik.tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    ldflags = (f"-s -w -X {_VERSION_PKG}.Version={version} -X {_VERSION_PKG}.Codename=cheddar "
               f"-X {_VERSION_PKG}.BuildDate=module")
    run.run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), "./cmd/traefik"],
            cwd=src, goflags="-mod=readonly")
    os.replace(tmp, gl.traefik)
    shutil.rmtree(src, ignore_errors=True)  # the module cache keeps the source


def build_gateway(root: Path, say: Callable[[str], None]) -> GatewayLayout:
    """Build Traefik and extract the Gateway API CRDs when missing; one line each."""
    gl = GatewayLayout(root)
    root.mkdir(parents=True, exist_ok=True)  # `go mod download` runs there
    crds = f"{GATEWAY_API[0]}@{gl.gateway_api_version} -> Gateway API CRDs (standard)"
    if gl.crd_files():
        say(f"{crds}: cached")
    else:
        t0 = time.monotonic()
        n = _extract_crds(gl, root)
        say(f"{crds}: {n} extracted in {time.monotonic() - t0:.0f}s")
    label = f"{TRAEFIK[0]}@{gl.traefik_version} -> traefik"
    if gl.traefik.is_file():
        say(f"{label}: cached")
        return gl
    if shutil.which("go") is None:
        raise BuildError(f"`go` is not on PATH (needed to build {label})")
    say(f"{label}: building (log: {gl.log}) ...")
    t0 = time.monotonic()
    _build_traefik(gl, _Runner(gl.log))
    seconds = round(time.monotonic() - t0, 1)
    size = gl.traefik.stat().st_size
    gl.versions_file.write_text(json.dumps({
        "modules": {"traefik": {"module": TRAEFIK[0], "version": gl.traefik_version},
                    "gateway-api": {"module": GATEWAY_API[0],
                                    "version": gl.gateway_api_version}},
        "go": _go_version(), "build_seconds": seconds, "binary_bytes": size,
    }, indent=2) + "\n")
    say(f"{label}: built in {seconds:.0f}s ({size / 1e6:.0f} MB)")
    return gl
