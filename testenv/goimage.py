"""The Go image of the Dockerfile's ``tools`` stage (kustomize and helm built from the Go module
proxy), made on this machine: a stand-in for ``golang:1.26-bookworm`` as the base image is one
for ``python:3.11-slim-bookworm`` (nothing is pulled from a registry).

It is the base image plus this machine's Go toolchain at ``/usr/local/go``, laid out as the
official image (``GOPATH=/go``, ``/go/bin`` and ``/usr/local/go/bin`` first on PATH). It lives in
buildah's storage under ``GO_TAG``, labelled with its key (Go version + base image key) and remade
when the key changes. The build mounts this machine's Go module and build caches into the
``tools`` stage's RUN (``volumes()``): the test environment builds the same two CLIs at the same
versions, so the stage links in seconds instead of compiling for minutes. The Dockerfile's
``go install`` lines run unchanged, as they do for a user's ``docker build``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from testenv import gitray_image as gi

GO_TAG = "localhost/golang:1.26-bookworm"
GO_LABEL = "io.gitray.testenv.go"
GO_PATH = f"/go/bin:/usr/local/go/bin:{gi.BASE_PATH}"


def go_env() -> dict[str, str]:
    """GOROOT, GOVERSION, GOMODCACHE and GOCACHE of this machine's `go`."""
    go = shutil.which("go")
    if go is None:
        raise gi.ImageError("go not found on PATH: the tools stage of the Dockerfile needs Go "
                            "(the test environment's build uses the same one)")
    names = ["GOROOT", "GOVERSION", "GOMODCACHE", "GOCACHE"]
    out = subprocess.run([go, "env", *names], capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines(), strict=True))


def go_key(env: dict[str, str]) -> str:
    return hashlib.sha256(f"{env['GOVERSION']}\n{gi.base_key()}\n".encode()).hexdigest()[:12]


def ensure_go_image(cache_dir: Path | None, log: Path,
                    say: Callable[[str], None] = print) -> None:
    """Make `GO_TAG` in buildah's storage unless the one there has the current key. Call inside
    gitray_image's lock and host_paths_guard, after the base image is loaded."""
    env = go_env()
    key = go_key(env)
    try:
        have = gi.buildah(cache_dir, "inspect", "--type", "image", "--format",
                          f'{{{{index .OCIv1.Config.Labels "{GO_LABEL}"}}}}', GO_TAG,
                          log=log).strip()
    except gi.ImageError:
        have = ""
    if have == key:
        return
    name = gi.buildah(cache_dir, "from", "--quiet", "--pull=never", gi.BASE_TAG, log=log).strip()
    try:
        gi.buildah(cache_dir, "copy", "--quiet", name, env["GOROOT"], "/usr/local/go", log=log)
        gi.buildah(cache_dir, "config", "--env", "GOPATH=/go", "--env", f"PATH={GO_PATH}",
                   "--label", f"{GO_LABEL}={key}", name, log=log)
        gi.buildah(cache_dir, "commit", "--quiet", "--rm", name, GO_TAG, log=log)
    except gi.ImageError:
        gi.buildah(cache_dir, "rm", name, log=log)
        raise
    say(f"Go image {GO_TAG}: made ({env['GOVERSION']} from {env['GOROOT']})")


def volumes() -> list[str]:
    """`buildah build` arguments mounting this machine's Go caches where the stage's Go looks
    (GOPATH=/go; root's HOME is /root)."""
    env = go_env()
    args = []
    for host, inside in ((env["GOMODCACHE"], "/go/pkg/mod"),
                         (env["GOCACHE"], "/root/.cache/go-build")):
        Path(host).mkdir(parents=True, exist_ok=True)
        args += ["--volume", f"{host}:{inside}:rw"]
    return args
