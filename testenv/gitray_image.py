"""gitray's container image, built on this machine from the repository's Dockerfile.

No Docker engine and no registry: the image is built by Debian's ``buildah`` (vfs storage, chroot
isolation, its storage under the cache dir) from the **unchanged** Dockerfile, with
``--build-arg PYTHON_IMAGE=localhost/python:3.11-slim-bookworm``: a locally made stand-in for the
official base, a Debian bookworm minbase root (``debootstrap``, from Debian's packages; bookworm's
python3 is 3.11) with python3, python3-venv, python-is-python3 and ca-certificates. Nothing is
ever pulled from a registry (``--pull=never``; the base enters buildah's storage from its own
docker archive, and no search registries are configured). The build's ``RUN`` steps reach only
PyPI (``pip install .``) and Debian's mirror (``apt-get install git``).

Entry points (stdlib only; needs root, as debootstrap and buildah's chroot isolation do):

- ``install_packages()``: apt-get install buildah, debootstrap and containerd (for ``ctr``) when
  one is missing (``apt-get update`` first); a quiet no-op otherwise.
- ``build_gitray_image(cache_dir) -> Path``: the docker archive of ``localhost/gitray:<version>``
  (cached by the hash of its inputs; rebuilt when gitray changes).
- ``import_image(archive, containerd_address, namespace="k8s.io")``: ``ctr images import``.

Layout under ``<cache_dir>/images/`` (``cache_dir`` defaults to
``${GITRAY_TESTENV_CACHE:-~/.cache/gitray-testenv}``)::

    python-3.11-slim-bookworm-<base key>/base.tar   the base image (docker archive) + build.log
    gitray-<version>-<key>/gitray.tar                gitray's image (docker archive) + image.json
    buildah/{root,runroot,tmp,*.conf}                buildah's own storage and configuration
    gitray-image.lock                                one build at a time per cache dir

CLI: ``scripts/build-image [install|base|build|import ADDRESS|info]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Debian packages the project's own scripts install (buildah builds, debootstrap makes the base,
# containerd brings `ctr` for the import).
PACKAGES = ["buildah", "debootstrap", "containerd"]

# ---- the base image: a stand-in for python:3.11-slim-bookworm ------------------------------
DEBIAN_SUITE = "bookworm"
# python3-distutils: python3.11-venv depends on the virtual python3.11-distutils, which
# debootstrap does not resolve; python3-distutils provides it.
BASE_PACKAGES = ["python3", "python3-venv", "python3-distutils", "python-is-python3",
                 "ca-certificates"]
BASE_TAG = "localhost/python:3.11-slim-bookworm"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_RECIPE = 2  # bump when the recipe below changes in a way the package list does not show
# This machine reaches PyPI through a TLS proxy whose CA is among its local CAs: the base carries
# the machine's local CAs (as a company's base image carries the company's), so `pip install .`
# verifies inside the build. A machine without local CAs adds none.
LOCAL_CA_DIR = Path("/usr/local/share/ca-certificates")
# "slim", as Debian's official images: dpkg leaves out documentation, manuals and translations
# (copyright files kept), apt keeps no .debs and no binary caches, fetches no translations.
DPKG_SLIM = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
"""
APT_CLEAN = """\
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb \
/var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb \
/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""
APT_NO_LANGUAGES = 'Acquire::Languages "none";\n'
SLIM_DIRS = ["usr/share/info", "usr/share/linda", "usr/share/lintian/overrides",
             "usr/share/locale", "usr/share/man", "usr/share/groff"]

# ---- gitray's image -------------------------------------------------------------------------
# What the build reads: the Dockerfile, its .dockerignore, and what its COPY lines name
# (tests/integration/test_image.py checks that every COPY source is listed here).
INPUTS = ["Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "gitray"]
IGNORED_PARTS = {"__pycache__"}
IGNORED_SUFFIXES = (".pyc", ".pyo")
IMAGE_NAME = "localhost/gitray"
INPUTS_LABEL = "io.gitray.testenv.inputs"
RECIPE = 2  # bump when the build command below changes
KEEP_BUILDS = 3  # archives of other source versions kept in the cache


class ImageError(RuntimeError):
    """A build or import step failed (the message carries the command and its output tail)."""


# ---- paths and keys -------------------------------------------------------------------------


def cache_root() -> Path:
    env = os.environ.get("GITRAY_TESTENV_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "gitray-testenv"


def images_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir if cache_dir is not None else cache_root()) / "images"


def gitray_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def image_tag() -> str:
    return f"{IMAGE_NAME}:{gitray_version()}"


def local_cas() -> list[Path]:
    return sorted(LOCAL_CA_DIR.rglob("*.crt")) if LOCAL_CA_DIR.is_dir() else []


def base_key() -> str:
    blob = json.dumps([DEBIAN_SUITE, sorted(BASE_PACKAGES), BASE_TAG, BASE_PATH, BASE_RECIPE])
    h = hashlib.sha256(blob.encode())
    for ca in local_cas():
        h.update(str(ca.relative_to(LOCAL_CA_DIR)).encode() + b"\0" + ca.read_bytes())
    return h.hexdigest()[:12]


def base_archive_path(cache_dir: Path | None = None) -> Path:
    return images_dir(cache_dir) / f"python-3.11-slim-{DEBIAN_SUITE}-{base_key()}" / "base.tar"


def input_files(repo: Path = REPO) -> list[Path]:
    """Every file the build reads, sorted (caches and bytecode left out, as .dockerignore)."""
    files: list[Path] = []
    for name in INPUTS:
        path = repo / name
        if path.is_dir():
            files.extend(p for p in path.rglob("*") if p.is_file()
                         and not IGNORED_PARTS.intersection(p.relative_to(repo).parts)
                         and not p.name.endswith(IGNORED_SUFFIXES)
                         and ".egg-info" not in str(p.relative_to(repo)))
        elif path.is_file():
            files.append(path)
    return sorted(files)


def source_key(repo: Path = REPO) -> str:
    """Hash of the build's inputs: its files (names and bytes), the base and the recipe."""
    h = hashlib.sha256(json.dumps([RECIPE, base_key(), image_tag()]).encode())
    for path in input_files(repo):
        h.update(str(path.relative_to(repo)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:12]


def image_work_dir(cache_dir: Path | None = None) -> Path:
    return images_dir(cache_dir) / f"gitray-{gitray_version()}-{source_key()}"


def image_archive_path(cache_dir: Path | None = None) -> Path:
    return image_work_dir(cache_dir) / "gitray.tar"


# ---- helpers --------------------------------------------------------------------------------


def _run(args: list[str], log: Path, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> str:
    """Run a command, its output appended to `log`; stdout returned; ImageError on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(args)}\n")
        fh.flush()
        proc = subprocess.run(args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=fh,
                              text=True, check=False)
        fh.write(proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise ImageError(f"command failed ({proc.returncode}): {' '.join(args)}\n{tail}")
    return proc.stdout


@contextlib.contextmanager
def _lock(images: Path, say: Callable[[str], None]) -> Iterator[None]:
    images.mkdir(parents=True, exist_ok=True)
    with (images / "gitray-image.lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another image build ({images / 'gitray-image.lock'})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _missing_packages() -> list[str]:
    missing = []
    for pkg in PACKAGES:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0 or "install ok installed" not in proc.stdout:
            missing.append(pkg)
    return missing


def install_packages(say: Callable[[str], None] = print) -> None:
    """apt-get install what the image build needs, if anything is missing (idempotent, quiet)."""
    missing = _missing_packages()
    if not missing:
        return
    t0 = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", *missing]):
        proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError(f"{' '.join(args)} failed ({proc.returncode}):\n"
                             f"{(proc.stdout + proc.stderr)[-3000:]}")
    say(f"installed {', '.join(missing)} [{time.monotonic() - t0:.0f}s]")


def _debian_mirrors() -> tuple[str, str]:
    """The Debian mirrors apt uses here (main, security), from deb822 or one-line sources."""
    uris: list[str] = []
    for src in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        uris += [line.split()[1] for line in src.read_text().splitlines()
                 if line.startswith("URIs:") and len(line.split()) > 1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            parts = [p for p in line.split() if not p.startswith("[")]
            if len(parts) >= 3 and parts[0] == "deb":
                uris.append(parts[1])
    main = next((u for u in uris if "security" not in u), "http://deb.debian.org/debian")
    security = next((u for u in uris if "security" in u), "http://deb.debian.org/debian-security")
    return main, security


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_docker_archive(out: Path, layer: Path, config: dict[str, Any], tag: str) -> str:
    """One-layer docker archive (the `docker save` format); returns the image ID (config hash)."""
    diff_id = _sha256_file(layer)
    config = {**config, "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]}}
    blob = json.dumps(config, sort_keys=True).encode()
    image_id = hashlib.sha256(blob).hexdigest()
    manifest = [{"Config": f"{image_id}.json", "RepoTags": [tag],
                 "Layers": [f"{diff_id}/layer.tar"]}]
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        tar.add(layer, arcname=f"{diff_id}/layer.tar")
        for name, data in ((f"{image_id}.json", blob),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)
    return f"sha256:{image_id}"


def read_docker_archive(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest entry, image config) of a one-image docker archive."""
    with tarfile.open(archive) as tar:
        manifest = json.load(_member(tar, "manifest.json"))
        if len(manifest) != 1:
            raise ImageError(f"{archive}: {len(manifest)} images, expected 1")
        config = json.load(_member(tar, manifest[0]["Config"]))
    return manifest[0], config


def _member(tar: tarfile.TarFile, name: str) -> io.BufferedReader:
    fh = tar.extractfile(name)
    if fh is None:
        raise ImageError(f"{name} missing from {tar.name!r}")
    return fh  # type: ignore[return-value]


# ---- buildah --------------------------------------------------------------------------------


def buildah_dir(cache_dir: Path | None = None) -> Path:
    return images_dir(cache_dir) / "buildah"


# Paths outside the cache dir that buildah 1.28 creates whatever it is told: its blob-info cache
# (/var/lib/containers/cache/blob-info-cache-v1.boltdb is hard-wired for root) and network
# directories. Those that did not exist before a build are removed after it (host_paths_guard).
HOST_PATHS = [Path("/var/lib/containers"), Path("/run/containers"),
              Path("/etc/containers/networks")]


@contextlib.contextmanager
def host_paths_guard(cache_dir: Path | None = None) -> Iterator[None]:
    """Remove afterwards the HOST_PATHS that buildah creates during the block. The list of
    created paths is recorded first, so a build that was killed is cleaned by the next one."""
    record = buildah_dir(cache_dir) / "created-host-paths.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    created = set(json.loads(record.read_text())) if record.is_file() else set()
    created |= {str(p) for p in HOST_PATHS if not p.exists()}
    record.write_text(json.dumps(sorted(created)))
    try:
        yield
    finally:
        for path in sorted(created, reverse=True):
            shutil.rmtree(path, ignore_errors=True)
        record.unlink()


def buildah_env(cache_dir: Path | None = None) -> dict[str, str]:
    """Environment for buildah: its own storage.conf, registries.conf, containers.conf and TMPDIR
    under the cache dir (see HOST_PATHS for what it still creates elsewhere)."""
    d = buildah_dir(cache_dir)
    for sub in ("root", "runroot", "tmp", "networks"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    containers = d / "containers.conf"
    # RUN steps use the host's network (chroot isolation): no network backend is ever used;
    # CNI with a config dir of our own keeps buildah from writing netavark's machine-wide dirs.
    containers.write_text(f'[network]\nnetwork_backend = "cni"\n'
                          f'network_config_dir = "{d / "networks"}"\n'
                          f'cni_plugin_dirs = ["/usr/lib/cni"]\n')
    storage = d / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{d / "root"}"\n'
                       f'runroot = "{d / "runroot"}"\n')
    registries = d / "registries.conf"
    # No search registries: a short name never resolves to a registry; and none is pulled from.
    registries.write_text('unqualified-search-registries = []\nshort-name-mode = "enforcing"\n')
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(storage),
            "CONTAINERS_CONF": str(containers),
            "CONTAINERS_REGISTRIES_CONF": str(registries), "TMPDIR": str(d / "tmp"),
            "BUILDAH_ISOLATION": "chroot", "BUILDAH_FORMAT": "docker"}


def buildah(cache_dir: Path | None, *args: str, log: Path) -> str:
    d = buildah_dir(cache_dir)
    return _run(["buildah", "--root", str(d / "root"), "--runroot", str(d / "runroot"),
                 "--storage-driver", "vfs", *args], log, env=buildah_env(cache_dir))


def _stored_image_id(cache_dir: Path | None, name: str, log: Path) -> str | None:
    try:
        out = buildah(cache_dir, "inspect", "--type", "image", "--format", "{{.FromImageID}}",
                      name, log=log)
    except ImageError:
        return None
    return out.strip() or None


# ---- the base image -------------------------------------------------------------------------


def build_base_image(cache_dir: Path | None = None,
                     say: Callable[[str], None] = print) -> Path:
    """The docker archive of `BASE_TAG` (debootstrap minbase + python3); cached by its key."""
    out = base_archive_path(cache_dir)
    if out.is_file():
        return out
    work = out.parent
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    rootfs = work / "rootfs.tmp"
    main, security = _debian_mirrors()
    t0 = time.monotonic()
    _remove_tree(rootfs)
    # In a mount namespace of its own: the /proc and /sys debootstrap mounts in the target go
    # away with it even when it is killed.
    _run(["unshare", "--mount", "--propagation", "private",
          "debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
          DEBIAN_SUITE, str(rootfs), main], log)
    t_boot = time.monotonic() - t0
    # As the official Debian images: deb822 sources with updates and security, no package
    # lists or .debs in the image (the Dockerfile runs apt-get update itself).
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(
        f"Types: deb\nURIs: {main}\nSuites: {DEBIAN_SUITE} {DEBIAN_SUITE}-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {security}\nSuites: {DEBIAN_SUITE}-security\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    _slim(rootfs)
    for name in ("etc/hostname", "etc/resolv.conf"):  # the host's; runtimes provide their own
        (rootfs / name).unlink(missing_ok=True)
    cas = local_cas()
    if cas:
        for ca in cas:
            dest = rootfs / "usr/local/share/ca-certificates" / ca.relative_to(LOCAL_CA_DIR)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ca, dest)
        _run(["chroot", str(rootfs), "/usr/sbin/update-ca-certificates"], log,
             env={"PATH": BASE_PATH, "LANG": "C.UTF-8"})
    layer = work / "layer.tar"
    _run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
          "-C", str(rootfs), "-cf", str(layer),
          "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./tmp/*",
          "--exclude=./run/*", "--exclude=./var/cache/apt/*", "--exclude=./var/lib/apt/lists/*",
          "--exclude=./var/log/*", "."], log)
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Env": [f"PATH={BASE_PATH}", "LANG=C.UTF-8"], "Cmd": ["python3"],
                   "Labels": {"org.opencontainers.image.description":
                              f"local stand-in for python:3.11-slim-{DEBIAN_SUITE}: debootstrap "
                              f"--variant=minbase {DEBIAN_SUITE} + {' '.join(BASE_PACKAGES)}"}},
        "history": [{"created_by": f"gitray testenv: debootstrap --variant=minbase "
                                   f"--include={','.join(BASE_PACKAGES)} {DEBIAN_SUITE}"}],
    }
    write_docker_archive(out, layer, config, BASE_TAG)
    layer.unlink()
    _remove_tree(rootfs)
    for old in out.parent.parent.glob(f"python-3.11-slim-{DEBIAN_SUITE}-*"):
        if old != work:
            _remove_tree(old)
    say(f"base image {BASE_TAG}: built (debootstrap {t_boot:.0f}s, "
        f"{out.stat().st_size / 1e6:.0f} MB) [{time.monotonic() - t0:.0f}s]")
    return out


def _mounts_under(path: Path) -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(path) or point.startswith(f"{path}/"):
            points.append(point)
    return points


def _remove_tree(path: Path) -> None:
    """rmtree, never into a mount: anything still mounted below (a debootstrap run by an older
    version, killed) is unmounted first, deepest first."""
    for point in sorted(_mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False)
    if _mounts_under(path):
        raise ImageError(f"still mounted below {path}: {_mounts_under(path)}")
    shutil.rmtree(path, ignore_errors=True)


def _slim(rootfs: Path) -> None:
    """The slim configuration (DPKG_SLIM, APT_CLEAN) and the files it excludes removed now."""
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(DPKG_SLIM)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN)
    (rootfs / "etc/apt/apt.conf.d/docker-no-languages").write_text(APT_NO_LANGUAGES)
    for name in SLIM_DIRS:
        d = rootfs / name
        if d.is_dir():
            for child in d.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    doc = rootfs / "usr/share/doc"
    for path in sorted(doc.rglob("*"), reverse=True):  # children before their directories
        if path.is_symlink() or path.is_file():
            if path.name != "copyright" or path.parent.parent != doc:
                path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def load_base_image(cache_dir: Path | None, base: Path, log: Path) -> None:
    """Put the base archive into buildah's storage under `BASE_TAG` unless it is there already
    (a local file, not a registry: the `docker-archive:` transport)."""
    manifest, _ = read_docker_archive(base)
    want = "sha256:" + manifest["Config"].removesuffix(".json")
    have = _stored_image_id(cache_dir, BASE_TAG, log)
    if have is not None and want.endswith(have.removeprefix("sha256:")):
        return
    buildah(cache_dir, "pull", "--quiet", f"docker-archive:{base}", log=log)


# ---- gitray's image -------------------------------------------------------------------------


def build_gitray_image(cache_dir: Path | None = None,
                       say: Callable[[str], None] = print) -> Path:
    """Build gitray's image from the repository's Dockerfile (or reuse the cached one) and
    return its docker archive (tag `localhost/gitray:<version>`, `ctr images import` reads it).

    Cached by the hash of its inputs (`INPUTS`, the base image's key and this recipe); one line
    of output with the time it took. Interrupted builds leave only temporary files and working
    containers, removed by the next run."""
    from testenv import goimage  # it builds on this module

    t0 = time.monotonic()
    images = images_dir(cache_dir)
    with _lock(images, say):
        out = image_archive_path(cache_dir)
        tag = image_tag()
        if out.is_file():
            say(f"gitray image {tag}: cached ({out}) [{time.monotonic() - t0:.1f}s]")
            return out
        base = build_base_image(cache_dir, say)
        work = out.parent
        work.mkdir(parents=True, exist_ok=True)
        log = work / "build.log"
        log.write_text("")
        key = source_key()
        t_build = time.monotonic()
        with host_paths_guard(cache_dir):
            # Working containers left by an interrupted build (the storage is ours alone).
            buildah(cache_dir, "rm", "--all", log=log)
            load_base_image(cache_dir, base, log)
            goimage.ensure_go_image(cache_dir, log, say)
            iidfile = work / "image-id"
            buildah(cache_dir, "build", "--quiet", "--isolation", "chroot", "--format", "docker",
                    "--pull=never", "--layers=false", "--file", str(REPO / "Dockerfile"),
                    *goimage.volumes(), "--build-arg", f"GO_IMAGE={goimage.GO_TAG}",
                    "--tag", tag, "--build-arg", f"PYTHON_IMAGE={BASE_TAG}",
                    "--build-arg", f"VERSION={gitray_version()}",
                    "--label", f"{INPUTS_LABEL}={key}", "--iidfile", str(iidfile), str(REPO),
                    log=log)
            image_id = iidfile.read_text().strip()
            build_s = time.monotonic() - t_build
            tmp = work / "gitray.tar.tmp"
            tmp.unlink(missing_ok=True)
            buildah(cache_dir, "push", "--quiet", image_id, f"docker-archive:{tmp}:{tag}", log=log)
            os.replace(tmp, out)
            # The archive is the cache: drop the image (and the dangling previous ones) from
            # buildah's storage, keeping the base.
            buildah(cache_dir, "rmi", "--force", image_id, log=log)
            buildah(cache_dir, "rmi", "--prune", log=log)
        total = time.monotonic() - t0
        info = {"tag": tag, "image_id": image_id, "inputs": key, "base": BASE_TAG,
                "base_key": base_key(), "archive": str(out), "bytes": out.stat().st_size,
                "build_seconds": round(build_s, 1), "total_seconds": round(total, 1)}
        (work / "image.json").write_text(json.dumps(info, indent=2) + "\n")
        _prune_old_builds(images, keep=work)
        say(f"gitray image {tag}: built from the Dockerfile ({out.stat().st_size / 1e6:.0f} MB, "
            f"{out}) [{total:.0f}s]")
        return out


def run_in_image(archive: Path, commands: list[list[str]], cache_dir: Path | None = None,
                 user: str | None = None, volumes: list[str] | None = None,
                 ) -> list[subprocess.CompletedProcess[str]]:
    """Run each command in one working container made from the archive (``buildah from
    docker-archive:…`` + ``buildah run``, chroot isolation, the image's user unless `user`);
    the container and the loaded image are removed afterwards. Returns the completed processes
    (stdout and stderr captured; a failing command is returned, not raised). `volumes` are
    ``HOST:CONTAINER[:OPTIONS]`` bind mounts for every command."""
    d = buildah_dir(cache_dir)
    base_args = ["buildah", "--root", str(d / "root"), "--runroot", str(d / "runroot"),
                 "--storage-driver", "vfs"]
    log = d / "run.log"
    results = []
    with _lock(images_dir(cache_dir), lambda _m: None), host_paths_guard(cache_dir):
        env = buildah_env(cache_dir)
        before = _run([*base_args, "images", "--quiet", "--no-trunc"], log, env=env).split()
        name = _run([*base_args, "from", "--quiet", "--pull=never",
                     f"docker-archive:{archive}"], log, env=env).strip()
        try:
            for cmd in commands:
                extra = ["--user", user] if user else []
                extra += [arg for v in volumes or [] for arg in ("--volume", v)]
                results.append(subprocess.run(
                    [*base_args, "run", "--isolation", "chroot", *extra, name, "--", *cmd],
                    env=env, capture_output=True, text=True, check=False))
        finally:
            _run([*base_args, "rm", name], log, env=env)
            after = _run([*base_args, "images", "--quiet", "--no-trunc"], log, env=env).split()
            for image in set(after) - set(before):
                _run([*base_args, "rmi", "--force", image], log, env=env)
    return results


def _prune_old_builds(images: Path, keep: Path) -> None:
    """Keep the newest KEEP_BUILDS archives made on the current base; drop the rest."""
    def stale(d: Path) -> bool:
        try:
            return bool(json.loads((d / "image.json").read_text())["base_key"] != base_key())
        except (OSError, ValueError, KeyError):
            return True  # an interrupted build's leftovers
    others = [d for d in images.glob("gitray-*-*") if d.is_dir() and d != keep]
    for d in [d for d in others if stale(d)]:
        shutil.rmtree(d, ignore_errors=True)
        others.remove(d)
    for d in sorted(others, key=lambda d: d.stat().st_mtime, reverse=True)[KEEP_BUILDS - 1:]:
        shutil.rmtree(d, ignore_errors=True)


# ---- containerd -----------------------------------------------------------------------------


def import_image(archive: Path, containerd_address: str | Path, namespace: str = "k8s.io",
                 snapshotter: str | None = None) -> str:
    """`ctr images import` the archive into a running containerd; returns ctr's output."""
    args = ["ctr", "--address", str(containerd_address), "-n", namespace, "images", "import"]
    if snapshotter:
        args.append(f"--snapshotter={snapshotter}")
    proc = subprocess.run([*args, str(archive)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageError(f"{' '.join(args)} {archive} failed ({proc.returncode}):\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout


# ---- CLI ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/build-image",
        description="Build gitray's image from the Dockerfile with buildah (no Docker engine, no "
                    "registry); cached in ${GITRAY_TESTENV_CACHE:-~/.cache/gitray-testenv}/images")
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("install", help="apt-get install buildah, debootstrap, containerd if missing")
    sub.add_parser("base", help="build (or reuse) the base image only")
    sub.add_parser("build", help="install, then build (or reuse) the image (the default)")
    sub.add_parser("info", help="print the cached image's path and key (exit 1 if not built)")
    imp = sub.add_parser("import", help="build, then ctr images import into a containerd")
    imp.add_argument("address", help="containerd socket")
    imp.add_argument("--namespace", "-n", default="k8s.io")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "info":
            out = image_archive_path()
            print(json.dumps({"tag": image_tag(), "inputs": source_key(), "archive": str(out),
                              "built": out.is_file()}, indent=2))
            return 0 if out.is_file() else 1
        install_packages()
        if args.cmd == "install":
            return 0
        if args.cmd == "base":
            print(build_base_image())
            return 0
        archive = build_gitray_image()
        if args.cmd == "import":
            t0 = time.monotonic()
            import_image(archive, args.address, args.namespace)
            print(f"imported {image_tag()} into {args.address} ({args.namespace}) "
                  f"[{time.monotonic() - t0:.0f}s]")
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
