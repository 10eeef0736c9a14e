"""gitray's container image, built for real from the repository's Dockerfile (issue 17 item 1).

The module fixture installs what the build needs (buildah, debootstrap, containerd) with the
project's own installer and builds the image — or reuses the one cached for these inputs — with
``testenv.gitray_image.build_gitray_image``: buildah (vfs, chroot isolation), the
unchanged Dockerfile, a locally made ``localhost/python:3.11-slim-bookworm`` base, no registry.
Then the image is checked from its archive: its metadata, gitray running inside it as uid 10001,
and ``ctr images import`` into a throwaway containerd. Real tools only; nothing is skipped: a
missing tool fails. Does not use the ``testenv`` fixture (no Kubernetes needed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testenv import gitray_image as gi
from testenv.helm import HELM
from testenv.kustomize import KUSTOMIZE

REPO = Path(__file__).resolve().parents[2]
VERSION = gi.gitray_version()
TAG = f"localhost/gitray:{VERSION}"
MAX_IMAGE_BYTES = 640_000_000  # base 136 MB + git 60 MB + venv 250 MB + helm 67 MB +
# kustomize 13 MB; a leak of a build stage (the Go toolchain alone is 270 MB) or of the test
# extras (ray alone is ~600 MB) crosses it


@pytest.fixture(scope="module")
def archive() -> Path:
    gi.install_packages()
    lines: list[str] = []
    path = gi.build_gitray_image(say=lines.append)
    print("\n".join(lines))
    return path


@pytest.fixture(scope="module")
def image(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return gi.read_docker_archive(archive)


@pytest.fixture(scope="module")
def inside(archive: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """Commands run once in a working container of the image, keyed by a short name."""
    commands = {
        "version": ["gitray", "--version"],
        "help": ["gitray", "--help"],
        "sync-help": ["gitray", "sync", "--help"],
        "uid": ["id", "-u"],
        "gid": ["id", "-g"],
        "python": ["python", "-c",
                   "import sys, gitray; print(sys.version); print(gitray.__file__)"],
        "git": ["git", "--version"],
        "cache-writable": ["sh", "-c",
                           "touch /var/cache/gitray/x && rm /var/cache/gitray/x && pwd"],
        "no-tests-in-venv": ["python", "-c",
                             "import importlib.util as u; print(u.find_spec('pytest') is None)"],
    }
    results = gi.run_in_image(archive, list(commands.values()))
    return dict(zip(commands, results, strict=True))


@pytest.fixture(scope="module")
def rendered(archive: Path, tmp_path_factory: pytest.TempPathFactory,
             ) -> dict[str, subprocess.CompletedProcess[str]]:
    """The renderers in the image, and gitray planning the examples' Kustomize overlays and
    Helm chart with them: examples-repo committed to a fresh Git repository owned by the
    image's user, mounted read-only."""
    repo = tmp_path_factory.mktemp("examples") / "repo"
    shutil.copytree(REPO / "examples-repo", repo)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "examples"], check=True)
    subprocess.run(["chown", "-R", "10001:10001", str(repo)], check=True)
    commands = {
        "kustomize": ["kustomize", "version"],
        "helm": ["helm", "version", "--short"],
        "plan-kustomize": ["gitray", "plan", "--repo", "/examples/kustomize", "--against",
                           "empty", "--color", "never"],
        "plan-helm": ["gitray", "plan", "--repo", "/examples/helm", "--against", "empty",
                      "--color", "never"],
    }
    results = gi.run_in_image(archive, list(commands.values()),
                              volumes=[f"{repo}:/examples:ro"])
    return dict(zip(commands, results, strict=True))


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout


# ---- what the build reads -------------------------------------------------------------------


def test_every_copy_source_of_the_dockerfile_is_a_hashed_input() -> None:
    sources = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w.rstrip("/") for w in words[1:-1] if not w.startswith("--")]
    assert sources, "no COPY from the build context found"
    for src in sources:
        assert src in gi.INPUTS, f"COPY {src} is not in gitray_image.INPUTS (the cache key)"


def test_the_dockerfile_still_names_the_official_base_by_default() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text
    assert text.count("FROM ${PYTHON_IMAGE}") == 2


def test_the_image_renders_with_the_versions_the_tests_use() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert "ARG GO_IMAGE=golang:1.26-bookworm" in text
    assert "FROM ${GO_IMAGE} AS tools" in text
    assert f"ARG KUSTOMIZE_VERSION={KUSTOMIZE[1]}" in text
    assert f"ARG HELM_VERSION={HELM[1]}" in text
    assert "COPY --from=tools /out/kustomize /out/helm /usr/local/bin/" in text


def test_the_cache_key_follows_gitray_and_nothing_else(tmp_path: Path) -> None:
    for name in gi.INPUTS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, tmp_path / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copyfile(src, tmp_path / name)
    key = gi.source_key(tmp_path)
    assert key == gi.source_key(REPO), "a copy of the inputs has another key"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("x = 1\n")
    (tmp_path / "gitray" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "gitray" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    assert gi.source_key(tmp_path) == key, "tests/ or bytecode changed the key"
    init = tmp_path / "gitray" / "__init__.py"
    init.write_text(init.read_text() + "\n# changed\n")
    assert gi.source_key(tmp_path) != key, "a change in gitray/ kept the key"
    init.write_text(init.read_text().removesuffix("\n# changed\n"))
    assert gi.source_key(tmp_path) == key
    (tmp_path / "Dockerfile").write_text((REPO / "Dockerfile").read_text() + "\n")
    assert gi.source_key(tmp_path) != key, "a change in the Dockerfile kept the key"


# ---- the image ------------------------------------------------------------------------------


def test_archive_is_one_image_tagged_for_the_node(archive: Path,
                                                  image: tuple[dict[str, Any], dict[str, Any]],
                                                  ) -> None:
    manifest, config = image
    assert manifest["RepoTags"] == [TAG]
    assert archive == gi.image_archive_path()
    assert config["config"]["Labels"][gi.INPUTS_LABEL] == gi.source_key()
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == VERSION
    assert config["os"] == "linux" and config["architecture"] == "amd64"
    size = archive.stat().st_size
    print(f"{TAG}: {size / 1e6:.0f} MB, {len(manifest['Layers'])} layers")
    assert size < MAX_IMAGE_BYTES


def test_image_runs_gitray_sync_as_uid_10001(image: tuple[dict[str, Any], dict[str, Any]]) -> None:
    cfg = image[1]["config"]
    assert cfg["User"] == "10001:10001"
    assert cfg["Entrypoint"] == ["gitray", "sync"]
    assert not cfg.get("Cmd")
    assert cfg["WorkingDir"] == "/home/gitray"
    assert "8080/tcp" in cfg["ExposedPorts"]
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert env["PATH"].startswith("/opt/gitray/bin:")
    assert env["GITRAY_CACHE_DIR"] == "/var/cache/gitray"
    assert env["HOME"] == "/home/gitray"
    # --format docker keeps the Dockerfile's HEALTHCHECK (the OCI format drops it).
    health = cfg["Healthcheck"]
    assert health["Test"][0] == "CMD" and "/healthz" in health["Test"][-1]


def test_gitray_runs_inside_the_image(inside: dict[str, subprocess.CompletedProcess[str]]
                                      ) -> None:
    version = _ok(inside["version"]).strip()
    print(f"gitray --version in the image: {version}")
    assert VERSION in version
    assert "sync" in _ok(inside["help"])
    assert "--help" in _ok(inside["sync-help"]) or "usage" in inside["sync-help"].stdout.lower()
    assert _ok(inside["uid"]).strip() == "10001"
    assert _ok(inside["gid"]).strip() == "10001"
    py = _ok(inside["python"]).splitlines()
    assert py[0].startswith("3.11."), py
    assert py[1].startswith("/opt/gitray/lib/python3.11/site-packages/gitray/"), py
    assert re.match(r"git version 2\.", _ok(inside["git"]))
    assert _ok(inside["cache-writable"]).strip() == "/home/gitray"
    assert _ok(inside["no-tests-in-venv"]).strip() == "True", "test extras in the image"


def test_gitray_renders_kustomize_and_helm_inside_the_image(
        rendered: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert _ok(rendered["kustomize"]).strip() == KUSTOMIZE[1]
    assert _ok(rendered["helm"]).strip().startswith(HELM[1])
    for name, source in (("plan-kustomize", "overlays/prod/kustomization.yaml"),
                         ("plan-helm", "charts/text-service/templates/rayservice.yaml")):
        out = _ok(rendered[name])
        print(f"{name} in the image:\n{out}")
        assert "not installed" not in out + rendered[name].stderr
        assert f"# RayService ray-prod/text-service  ({source}:" in out, out
        assert "# RayService ray-staging/text-service" in out, out
        assert "Plan: 2 to create" in out, out


def test_a_warm_build_reuses_the_archive(archive: Path) -> None:
    mtime = archive.stat().st_mtime_ns
    lines: list[str] = []
    assert gi.build_gitray_image(say=lines.append) == archive
    assert len(lines) == 1 and "cached" in lines[0], lines
    assert archive.stat().st_mtime_ns == mtime


def test_running_buildah_leaves_no_machine_wide_paths(archive: Path) -> None:
    absent = [p for p in gi.HOST_PATHS if not p.exists()]
    proc = gi.run_in_image(archive, [["true"]])[0]
    _ok(proc)
    assert [p for p in absent if p.exists()] == []
    assert not (gi.buildah_dir() / "created-host-paths.json").exists()


# ---- containerd -----------------------------------------------------------------------------


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[Path]:
    """A throwaway containerd (Debian's): own root, state, socket and config under tmp_path, in
    its own mount namespace, the CRI plugin off. Stopped by PID afterwards."""
    root, state = tmp_path / "root", tmp_path / "state"
    sock = tmp_path / "containerd.sock"
    config = tmp_path / "config.toml"
    config.write_text(
        "version = 2\n"
        f'root = "{root}"\nstate = "{state}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\naddress = "{sock}"\n'
        f'[ttrpc]\naddress = "{sock}.ttrpc"\n'
        '[debug]\naddress = ""\n[metrics]\naddress = ""\n'
        f'[plugins."io.containerd.internal.v1.opt"]\npath = "{tmp_path / "opt"}"\n')
    log = (tmp_path / "containerd.log").open("w")
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "containerd", "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(["ctr", "--address", str(sock), "version"],
                                   capture_output=True, check=False)
            if ready.returncode == 0:
                break
            assert proc.poll() is None, (tmp_path / "containerd.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "containerd did not answer in 60 s"
            time.sleep(0.3)
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_ctr_imports_the_archive(archive: Path, image: tuple[dict[str, Any], dict[str, Any]],
                                 containerd: Path) -> None:
    t0 = time.monotonic()
    gi.import_image(archive, containerd, namespace="k8s.io", snapshotter="native")
    print(f"ctr images import: {time.monotonic() - t0:.1f}s")
    ctr = ["ctr", "--address", str(containerd), "-n", "k8s.io"]
    listed = subprocess.run([*ctr, "images", "ls"], capture_output=True, text=True, check=True)
    assert TAG in listed.stdout, listed.stdout
    # The image's config as containerd stored it (same digest as in the archive).
    config_digest = "sha256:" + image[0]["Config"].removesuffix(".json")
    stored = subprocess.run([*ctr, "content", "get", config_digest], capture_output=True,
                            check=True)
    cfg = json.loads(stored.stdout)["config"]
    assert cfg["User"] == "10001:10001" and cfg["Entrypoint"] == ["gitray", "sync"]
    # Unpacked into the snapshotter: one committed snapshot per layer.
    snaps = subprocess.run([*ctr, "snapshots", "--snapshotter", "native", "ls"],
                           capture_output=True, text=True, check=True)
    with tarfile.open(archive) as tar:
        layers = json.load(tar.extractfile("manifest.json"))[0]["Layers"]  # type: ignore[arg-type]
    assert sum(" Committed" in line for line in snaps.stdout.splitlines()) == len(layers)
