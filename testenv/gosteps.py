"""The Go builds of the environment's components, each into its version-keyed cache entry
(stdlib only; ``build.build`` runs them when an output is missing): Kubernetes' commands in one
``go build`` with its staging modules pinned, etcd, kwok and KubeRay's operator from throwaway
modules requiring them (KubeRay's from its source folder when there is one: kuberay.py),
CoreDNS with only the plugins the node uses, the pause binary. ``link_from_sibling``: a
component another key of the same cache holds at the same version is linked, not rebuilt."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from testenv.build import CANDIDATES, GOSRC, K8S_COMMANDS, BuildError, Layout, _download, _Runner

__all__ = ["build_coredns", "build_etcd", "build_kuberay", "build_kubernetes", "build_kwok",
           "build_pause", "link_from_sibling"]


def _k8s_gomod(k8s_version: str, cwd: Path) -> str:
    """Throwaway go.mod requiring k8s.io/kubernetes with its staging replaces pinned to v0.Y.Z."""
    info = _download("k8s.io/kubernetes", k8s_version, cwd)
    if "Error" in info:
        raise BuildError(f"go mod download k8s.io/kubernetes@{k8s_version}: {info['Error']}")
    upstream = Path(info["GoMod"]).read_text()
    staging = "v0." + k8s_version.removeprefix("v1.")
    replaces = re.findall(r"^\s*(k8s\.io/[A-Za-z0-9._/-]+)\s*=>\s*\./staging/", upstream, re.M)
    if not replaces:
        raise BuildError("k8s.io/kubernetes go.mod has no staging replace directives?")
    godebug = re.findall(r"^godebug\b.*$", upstream, re.M)
    go_line = re.search(r"^go\s+(\S+)", upstream, re.M)
    lines = ["module local/k8sbuild", "", f"go {go_line.group(1) if go_line else '1.26.0'}", ""]
    lines += [*godebug, "", f"require k8s.io/kubernetes {k8s_version}", "", "replace ("]
    lines += [f"\t{m} => {m} {staging}" for m in replaces]
    lines += [")", ""]
    return "\n".join(lines)


def _version_ldflags(k8s_version: str) -> str:
    minor = k8s_version.split(".")[1]
    parts = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        parts += [
            f"-X {pkg}.gitVersion={k8s_version}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(parts)


def build_kubernetes(lay: Layout, run: _Runner) -> None:
    version = lay.versions["kubernetes"]
    src = lay.dir / "src" / "kubernetes"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(_k8s_gomod(version, src))
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{c}"' for c in K8S_COMMANDS)
    (src / "tools.go").write_text(
        f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n"
    )
    run.run(["go", "mod", "tidy", "-e"], cwd=src)
    out = lay.dir / "tmp-bin-kubernetes"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    run.run(
        [
            "go", "build", "-trimpath", "-tags=selinux,notest",
            "-ldflags", _version_ldflags(version), "-o", f"{out}/",
            *[f"k8s.io/kubernetes/cmd/{c}" for c in K8S_COMMANDS],
        ],
        cwd=src,
    )
    for c in K8S_COMMANDS:
        os.replace(out / c, lay.binary(c))
    shutil.rmtree(out, ignore_errors=True)


def _build_in_module(
    lay: Layout, run: _Runner, name: str, *, module: str, pkg: str, binary: str, ldflags: str
) -> None:
    """Throwaway module requiring `module`, then one go build of `pkg` (works with replaces)."""
    version = lay.versions[name]
    src = lay.dir / "src" / name
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(f"module local/{name}build\n\ngo 1.26.0\n")
    (src / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{pkg}"\n')
    run.run(["go", "get", f"{module}@{version}"], cwd=src)
    run.run(["go", "mod", "tidy", "-e"], cwd=src)
    tmp = lay.dir / f"tmp-bin-{binary}"
    run.run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), pkg], cwd=src)
    os.replace(tmp, lay.binary(binary))


def build_etcd(lay: Layout, run: _Runner) -> None:
    v = lay.versions["etcd"]
    _build_in_module(
        lay, run, "etcd", module=CANDIDATES["etcd"][0], pkg="go.etcd.io/etcd/server/v3",
        binary="etcd", ldflags=f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-{v}",
    )


def build_kwok(lay: Layout, run: _Runner) -> None:
    v = lay.versions["kwok"]
    _build_in_module(
        lay, run, "kwok", module=CANDIDATES["kwok"][0], pkg="sigs.k8s.io/kwok/cmd/kwok",
        binary="kwok",
        ldflags=f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={v.removeprefix('v')}",
    )


def build_kuberay(lay: Layout, run: _Runner) -> None:
    """From KubeRay's source folder when there is one (testenv/kuberay.py; built where it is,
    read-only: its own go.mod and go.sum, the dependencies from the module proxy), else from
    the module."""
    source = lay.kuberay_source
    if source is None:
        module = CANDIDATES["kuberay"][0]
        _build_in_module(lay, run, "kuberay", module=module, pkg=module,
                         binary="kuberay-operator", ldflags="-s -w")
        return
    tmp = lay.dir / "tmp-bin-kuberay-operator"
    run.run(["go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", str(tmp),
             "."], cwd=source.operator, goflags="-mod=readonly")
    os.replace(tmp, lay.binary("kuberay-operator"))


def build_coredns(lay: Layout, run: _Runner) -> None:
    """CoreDNS with only the plugins the node uses (testenv/gosrc/coredns/main.go)."""
    module, version = CANDIDATES["coredns"][0], lay.versions["coredns"]
    src = lay.dir / "src" / "coredns"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text("module local/corednsbuild\n\ngo 1.26.0\n")
    shutil.copyfile(GOSRC / "coredns" / "main.go", src / "main.go")
    run.run(["go", "get", f"{module}@{version}"], cwd=src)
    run.run(["go", "mod", "tidy", "-e"], cwd=src)
    tmp = lay.dir / "tmp-bin-coredns"
    ldflags = f"-s -w -X github.com/coredns/coredns/coremain.GitCommit=module-{version}"
    run.run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), "."], cwd=src)
    os.replace(tmp, lay.binary("coredns"))


def build_pause(lay: Layout, run: _Runner) -> None:
    src = lay.dir / "src" / "pause"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text("module local/pause\n\ngo 1.26.0\n")
    shutil.copyfile(GOSRC / "pause" / "main.go", src / "main.go")
    tmp = lay.dir / "tmp-bin-pause"
    run.run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "."], cwd=src)
    os.replace(tmp, lay.binary("pause"))


def link_from_sibling(lay: Layout, name: str, outputs: list[Path]) -> Path | None:
    """Hard-link (else copy) ``outputs`` from another key of the same cache whose versions.json
    records component ``name`` at the version this key uses (a new KubeRay does not rebuild
    Kubernetes); returns that key's folder, None when no key has them. Never for KubeRay itself
    (one version may come from a source folder or from the module)."""
    if name == "kuberay" or not lay.root.is_dir():
        return None
    for other in sorted(lay.root.iterdir()):
        if other == lay.dir or not (other / "versions.json").is_file():
            continue
        try:
            recorded = json.loads((other / "versions.json").read_text())
            version = recorded["modules"][name]["version"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        sources = [other / out.relative_to(lay.dir) for out in outputs]
        if version != lay.versions[name] or not all(src.is_file() for src in sources):
            continue
        for src, out in zip(sources, outputs, strict=True):
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(f"{out.name}.link")
            tmp.unlink(missing_ok=True)
            try:
                os.link(src, tmp)
            except OSError:  # another file system
                shutil.copy2(src, tmp)
            os.replace(tmp, out)
        return other
    return None
