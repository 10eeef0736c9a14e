"""Build the pinned test-environment binaries from the Go module proxy into a version-keyed cache.

Stdlib only: `scripts/testenv build` runs before any project dependency is installed.
Its parts: the Go build of each component (gosteps.py), the real node's Debian packages
(debian.py), the Ray and gitray images built beside the compiles (imagelane.py).

Layout of the cache (``$GITRAY_TESTENV_CACHE`` or ``~/.cache/gitray-testenv``)::

    <root>/probe-<hash>.json   which candidate versions the proxy actually serves
    <root>/<key>/bin/          etcd kube-apiserver kube-controller-manager kube-scheduler
                               kubectl kwok kuberay-operator, and for the real node:
                               kubelet kube-proxy coredns pause
    <root>/images/             the node's Ray and pause images (docker archives; images.py) and
                               gitray's own image from the Dockerfile (gitray_image.py)
    <root>/<key>/crds/         KubeRay CRDs (from the KubeRay source folder, else the module)
    <root>/<key>/kwok-stages/  kwok stage files (from the kwok module)
    <root>/<key>/versions.json versions used, Go version, build times
    <root>/<key>/build.log     full output of every go command
    <root>/<key>/src/          throwaway modules used for the builds
    <root>/kustomize-<v>/bin/kustomize  the real kustomize v5 of the rendering tests, keyed by
                               its own version (testenv/kustomize.py)
    <root>/helm-<v>/bin/helm   the real helm v4 of the chart-rendering tests, keyed by its own
                               version (testenv/helm.py)
    <root>/traefik-<v>/, <root>/gateway-api-<v>/   Traefik and the Gateway API CRDs, keyed
                               by their own versions (testenv/traefik.py); built last
                               by ``main``, needed only by ``up --gateway``

KubeRay v1.7.0 is built from KubeRay's source folder beside the repository, else the module
proxy's v1.6.2 (kuberay.py). A component another key of the same cache was built with at the
same version (a new KubeRay beside the same Kubernetes, etcd, kwok and CoreDNS) is hard-linked
from there, not rebuilt.

``GOFLAGS`` from the environment is passed on (e.g. ``GOFLAGS=-p=1`` on a shared machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from testenv.timings import note_build

if TYPE_CHECKING:
    from testenv.kuberay import KubeRaySource

# Preferred version first; later entries are fallbacks used only when the proxy does not serve
# the earlier ones (probed with `go mod download`). ray-operator v1.7.0 has a .mod but its zip is
# refused by the proxy ("403 This module version is not available"), hence the fallbacks.
CANDIDATES: dict[str, tuple[str, list[str]]] = {
    "kubernetes": ("k8s.io/kubernetes", ["v1.36.3"]),
    "etcd": ("go.etcd.io/etcd/server/v3", ["v3.6.16", "v3.6.15", "v3.6.14", "v3.6.13"]),
    "kwok": ("sigs.k8s.io/kwok", ["v0.8.0", "v0.7.0"]),
    "kuberay": (
        "github.com/ray-project/kuberay/ray-operator",
        ["v1.7.0", "v1.6.2", "v1.6.1", "v1.6.0", "v1.5.1", "v1.5.0"],
    ),
    # Cluster DNS of the real node (KubeRay's head Service is headless; workers find the head
    # by name). Not part of the cache key: its binary is simply built when missing.
    "coredns": ("github.com/coredns/coredns", ["v1.14.7"]),
}

K8S_COMMANDS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
                "kubelet", "kube-proxy"]
BINARIES = ["etcd", *K8S_COMMANDS, "kwok", "kuberay-operator", "coredns", "pause"]
GOSRC = Path(__file__).resolve().parent / "gosrc"
CRD_NAMES = ["ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml"]
KWOK_STAGES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
]


class BuildError(RuntimeError):
    """A build step failed; the message carries the last log lines."""


@dataclass(frozen=True)
class Layout:
    """Paths of one version-keyed cache entry."""

    root: Path
    versions: dict[str, str]
    # the source the operator is built from; None: the module proxy's release (``kuberay_why``)
    kuberay_source: KubeRaySource | None = None
    kuberay_why: str = ""

    @property
    def key(self) -> str:
        v = self.versions
        return (
            f"k8s-{v['kubernetes']}_etcd-{v['etcd']}_kwok-{v['kwok']}_kuberay-{v['kuberay']}"
        )

    @property
    def dir(self) -> Path:
        return self.root / self.key

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    @property
    def crds(self) -> Path:
        return self.dir / "crds"

    @property
    def stages(self) -> Path:
        return self.dir / "kwok-stages"

    @property
    def log(self) -> Path:
        return self.dir / "build.log"

    @property
    def versions_file(self) -> Path:
        return self.dir / "versions.json"

    def binary(self, name: str) -> Path:
        return self.bin / name

    def missing(self) -> list[str]:
        """What a complete environment has and this one lacks (a Ray image is of this
        checkout's test apps: another checkout's apps need another image)."""
        from testenv import images

        wanted = [*(self.binary(b) for b in sorted(BINARIES)), images.ray_image_path(self.root),
                  images.pause_image_path(self.root), *(self.crds / c for c in CRD_NAMES),
                  *(self.stages / Path(s).name for s in KWOK_STAGES)]
        return [str(p.relative_to(self.root)) for p in wanted if not p.is_file()]

    def complete(self) -> bool:
        return not self.missing()


def cache_root() -> Path:
    env = os.environ.get("GITRAY_TESTENV_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "gitray-testenv"


def _candidates_hash() -> str:
    blob = json.dumps(CANDIDATES, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _go_env(extra: dict[str, str] | None = None, goflags: str = "-mod=mod") -> dict[str, str]:
    env = dict(os.environ)
    flags = " ".join(f for f in (goflags, os.environ.get("GOFLAGS", "")) if f)
    env.update({"CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": flags})
    env.setdefault("GOTOOLCHAIN", "local")
    if extra:
        env.update(extra)
    return env


class _Runner:
    """Runs go commands with their output appended to the build log."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def run(self, args: list[str], cwd: Path | None = None, capture: bool = False,
            goflags: str = "-mod=mod") -> str:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as fh:
            fh.write(f"\n$ (cd {cwd or os.getcwd()}) {' '.join(args)}\n")
            fh.flush()
            proc = subprocess.run(
                args,
                cwd=cwd,
                env=_go_env(goflags=goflags),
                stdout=subprocess.PIPE if capture else fh,
                stderr=fh,
                text=True,
                check=False,
            )
            if capture and proc.stdout:
                fh.write(proc.stdout[-4000:] + "\n")
        if proc.returncode != 0:
            raise BuildError(f"command failed ({proc.returncode}): {' '.join(args)}\n{self.tail()}")
        return proc.stdout or ""

    def tail(self, n: int = 25) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


def _download(module: str, version: str, cwd: Path) -> dict[str, str]:
    """`go mod download -json`: returns its JSON (with "Error" when not served)."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        data: dict[str, str] = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        data = {}
    if proc.returncode != 0 and "Error" not in data:
        data["Error"] = (proc.stderr or proc.stdout).strip()[-500:]
    return data


def probe(root: Path, say: bool = True) -> dict[str, str]:
    """Pick, per component, the first candidate version the module proxy serves (zip included).

    The answer is remembered in ``<root>/probe-<hash>.json`` so warm runs need no network.
    """
    root.mkdir(parents=True, exist_ok=True)
    memo = root / f"probe-{_candidates_hash()}.json"
    if memo.is_file():
        return dict(json.loads(memo.read_text())["versions"])
    if shutil.which("go") is None:
        raise BuildError("`go` is not on PATH (needed to probe the Go module proxy)")
    chosen: dict[str, str] = {}
    refused: dict[str, dict[str, str]] = {}
    for name, (module, versions) in CANDIDATES.items():
        t0 = time.monotonic()
        for version in versions:
            info = _download(module, version, root)
            if "Error" not in info and info.get("Dir"):
                chosen[name] = version
                break
            refused.setdefault(name, {})[version] = info.get("Error", "no Dir")
        if name not in chosen:
            raise BuildError(f"no served version of {module} among {versions}: {refused[name]}")
        if say:
            note = f" (refused: {', '.join(refused[name])})" if name in refused else ""
            print(
                f"probe {module}@{chosen[name]}: served{note} "
                f"[{time.monotonic() - t0:.0f}s]",
                flush=True,
            )
    memo.write_text(json.dumps({"versions": chosen, "refused": refused}, indent=2) + "\n")
    return chosen


def module_dir(module: str, version: str, cwd: Path) -> Path:
    info = _download(module, version, cwd)
    if "Error" in info:
        raise BuildError(f"go mod download {module}@{version}: {info['Error']}")
    return Path(info["Dir"])


def _extract_stages(lay: Layout) -> None:
    kwok = module_dir(CANDIDATES["kwok"][0], lay.versions["kwok"], lay.root)
    lay.stages.mkdir(parents=True, exist_ok=True)
    for stage in KWOK_STAGES:
        shutil.copyfile(kwok / stage, lay.stages / Path(stage).name)


def _go_version() -> str:
    proc = subprocess.run(
        ["go", "version"], capture_output=True, text=True, env=_go_env(), check=False
    )
    return proc.stdout.strip()


def layout(root: Path | None = None, probe_if_needed: bool = True) -> Layout:
    """The cache layout for the versions in use (probing the proxy on first use)."""
    root = root or cache_root()
    memo = root / f"probe-{_candidates_hash()}.json"
    if not memo.is_file() and not probe_if_needed:
        raise BuildError(f"test environment not built yet (no {memo}); run: scripts/testenv build")
    versions = probe(root, say=probe_if_needed)
    from testenv.kuberay import find_source

    source, why = find_source()
    if source is not None:
        versions["kuberay"] = source.version
    return Layout(root=root, versions=versions, kuberay_source=source, kuberay_why=why)


def build(root: Path | None = None) -> Layout:
    """Build whatever is missing; print one line per component. Raises BuildError on failure."""
    lay = layout(root)
    lay.bin.mkdir(parents=True, exist_ok=True)
    run = _Runner(lay.log)
    from testenv import debian, gosteps, images, kuberay
    from testenv.imagelane import ImageLane

    debian.ensure_debian_packages(lay.log)
    recorded: dict[str, object] = {}
    if lay.versions_file.is_file():
        recorded = json.loads(lay.versions_file.read_text())
    timings: dict[str, float] = dict(recorded.get("build_seconds", {}))  # type: ignore[call-overload]
    steps = [
        ("etcd", ["etcd"], gosteps.build_etcd),
        ("kwok", ["kwok"], gosteps.build_kwok),
        ("kuberay", ["kuberay-operator"], gosteps.build_kuberay),
        ("kubernetes", K8S_COMMANDS, gosteps.build_kubernetes),
        ("coredns", ["coredns"], gosteps.build_coredns),
    ]
    image_lane = ImageLane(lay, timings)  # the Ray and gitray images, beside the compiles
    image_lane.start()
    if lay.kuberay_source is None:
        print(kuberay.fallback_line(lay), flush=True)
    try:
        for name, outputs, step in steps:
            label = kuberay.label(lay, outputs) if name == "kuberay" else \
                f"{CANDIDATES[name][0]}@{lay.versions[name]} -> {', '.join(outputs)}"
            if all(lay.binary(o).is_file() for o in outputs):
                print(f"{label}: cached", flush=True)
                note_build(name, None)
                continue
            other = gosteps.link_from_sibling(lay, name, [lay.binary(o) for o in outputs])
            if other is not None:
                print(f"{label}: linked from {other.name} (same version)", flush=True)
                note_build(name, None)
                continue
            if shutil.which("go") is None:
                raise BuildError(f"`go` is not on PATH (needed to build {label})")
            print(f"{label}: building (log: {lay.log}) ...", flush=True)
            t0 = time.monotonic()
            step(lay, run)
            timings[name] = round(time.monotonic() - t0, 1)
            print(f"{label}: built in {timings[name]:.0f}s", flush=True)
            note_build(name, timings[name])
        crds = f"KubeRay {lay.versions['kuberay']} CRDs"
        if all((lay.crds / c).is_file() for c in CRD_NAMES):
            print(f"{crds}: cached")
        else:
            t0 = time.monotonic()
            kuberay.copy_crds(lay)
            print(f"{crds}: copied in {time.monotonic() - t0:.0f}s")
        stages = [lay.stages / Path(s).name for s in KWOK_STAGES]
        if all(p.is_file() for p in stages):
            print("kwok stages: cached")
        elif (other := gosteps.link_from_sibling(lay, "kwok", stages)) is not None:
            print(f"kwok stages: linked from {other.name} (same version)")
        else:
            t0 = time.monotonic()
            _extract_stages(lay)
            print(f"kwok stages: extracted in {time.monotonic() - t0:.0f}s")
        if not lay.binary("pause").is_file():
            t0 = time.monotonic()
            gosteps.build_pause(lay, run)
            print(f"pause (testenv/gosrc/pause): built in {time.monotonic() - t0:.0f}s")
        if images.pause_image_path(lay.root).is_file():
            print(f"pause image {images.PAUSE_TAG}: cached")
        else:
            images.build_pause_image(lay.root, lay.binary("pause"))
            print(f"pause image {images.PAUSE_TAG}: built")
    finally:
        image_lane.join()  # a failed compile still lets the image finish (the cache keeps it)
    image_lane.finish()
    modules = {n: {"module": CANDIDATES[n][0], "version": lay.versions[n]} for n in CANDIDATES}
    if lay.kuberay_source is not None:  # not the module: its source folder
        modules["kuberay"]["source"] = str(lay.kuberay_source.operator)
    versions = {
        "modules": modules,
        "go": recorded.get("go") or _go_version(),
        "build_seconds": timings,
        "binaries": sorted(BINARIES),
        "debian": debian.debian_versions(),
    }
    lay.versions_file.write_text(json.dumps(versions, indent=2) + "\n")
    if not lay.complete():
        raise BuildError(f"build finished but {lay.dir} is incomplete: missing "
                         f"{', '.join(lay.missing()[:5])}")
    return lay


def main(gateway_only: bool = False) -> int:
    """``scripts/testenv build``: the environment (``build``), then Traefik and the Gateway API
    CRDs (``traefik.build_gateway``: a wheel and a module's files, nothing compiled);
    ``gateway_only``: only those."""
    t0 = time.monotonic()
    try:
        if not gateway_only:
            lay = build()
            print(f"testenv ready in {lay.bin}: KubeRay {lay.versions['kuberay']} "
                  f"[{time.monotonic() - t0:.0f}s]")
        if not gateway_only:
            from testenv.kustomize import build_kustomize

            build_kustomize(cache_root(), say=lambda m: print(m, flush=True))
            from testenv.helm import build_helm

            build_helm(cache_root(), say=lambda m: print(m, flush=True))
        from testenv.traefik import build_gateway

        gl = build_gateway(cache_root(), say=lambda m: print(m, flush=True))
        print(f"Traefik and the Gateway API CRDs ready in {gl.traefik_dir}, {gl.crds} "
              f"[{time.monotonic() - t0:.0f}s]")
    except BuildError as exc:
        print(f"testenv build FAILED: {exc}", file=sys.stderr)
        return 1
    return 0
