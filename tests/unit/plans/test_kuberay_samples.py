"""Every KubeRay v1.6.2 sample (config/samples of the ray-operator module) validates and plans,
judged by the schemas of each KubeRay release gitray ships (v1.6.2 and v1.7.0).

A new user brings KubeRay's own manifests: each sample's ``ray.io`` objects and ConfigMaps go
in a repository of their own (``allowedNamespaces: ["*"]``, ``kuberayVersion`` the release),
then load and plan against an empty cluster. (The v1.7.0 source beside the repository,
``../shared/kuberay-v1.7.0``, comes without ``config/samples``; when a samples folder is
there it is checked the same way.) The exceptions are listed below with the message they
must get; any other failure, or a listed sample that passes, fails the test.

The module comes from the Go module cache through ``go mod download -json`` (the same module
``scripts/gen-schemas`` and ``scripts/testenv build`` use). Without it the test fails: the
corpus is part of the suite, never silently skipped.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gitray.core.model import LiveState
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.parsing.kuberay import KUBERAY_VERSIONS
from gitray.plans.load import load_snapshot
from gitray.plans.plan import Action
from gitray.plans.planner import compute_plan
from testenv.kuberay import SOURCE

MODULE = "github.com/ray-project/kuberay/ray-operator"
VERSION = "v1.6.2"  # the newest release the Go module proxy serves
V170_SAMPLES = SOURCE / "ray-operator" / "config" / "samples"
CONFIG = 'apiVersion: gitray.io/v1alpha1\nkind: Config\nallowedNamespaces: ["*"]\n' \
    'kuberayVersion: {}\n'
GENERATE_NAME = "metadata.generateName is not supported: GitOps needs a stable name"

# Samples that ask for something gitray refuses by name, with the message they must get.
REFUSED: dict[str, str] = {}


def _samples_dir() -> tuple[Path | None, str]:
    try:
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
            capture_output=True, text=True, check=False, timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"cannot run go: {e}"
    try:
        info = json.loads(result.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    if result.returncode != 0 or "Dir" not in info:
        return None, str(info.get("Error") or result.stderr.strip() or "no output")
    return Path(info["Dir"]) / "config" / "samples", ""


SAMPLES, PROBLEM = _samples_dir()
YAML_FILES = sorted(p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*.yaml")) \
    if SAMPLES is not None and SAMPLES.is_dir() else []
V170_FILES = sorted(p.relative_to(V170_SAMPLES).as_posix() for p in V170_SAMPLES.rglob("*.yaml")) \
    if V170_SAMPLES.is_dir() else []


@dataclass(frozen=True)
class Sample:
    text: str  # the sample's ray.io objects and ConfigMaps, as written
    kinds: tuple[str, ...]
    generate_name: bool


def _sample(path: str, folder: Path | None = None) -> Sample:
    folder = folder or SAMPLES
    assert folder is not None
    text = (folder / path).read_text(encoding="utf-8")
    kept: list[str] = []
    kinds: list[str] = []
    generate_name = False
    for chunk in re.split(r"(?m)^---[ \t]*$", text):
        value = YAML(typ="safe", pure=True).load(chunk)
        if not isinstance(value, dict):
            continue
        api, kind = str(value.get("apiVersion", "")), str(value.get("kind", ""))
        if api.startswith("ray.io/") or (api == "v1" and kind == "ConfigMap"):
            kept.append(chunk.strip("\n") + "\n")
            kinds.append(kind)
            generate_name |= "generateName" in (value.get("metadata") or {})
    return Sample("---\n".join(kept), tuple(kinds), generate_name)


# The samples with Ray objects (a few files only hold a Gateway, an Ingress or MetalLB config).
SAMPLE_FILES = [path for path in YAML_FILES
                if any(k != "ConfigMap" for k in _sample(path).kinds)]


def test_the_sample_corpus_is_there() -> None:
    where = f"{MODULE}@{VERSION}"
    assert SAMPLES is not None, f"the KubeRay samples are needed: go mod download {where}: " \
        f"{PROBLEM}"
    assert len(SAMPLE_FILES) >= 60, f"only {len(SAMPLE_FILES)} samples in {SAMPLES}"
    kinds = {k for path in SAMPLE_FILES for k in _sample(path).kinds}
    assert {"RayCluster", "RayJob", "RayService", "ConfigMap"} <= kinds
    assert set(REFUSED) <= set(SAMPLE_FILES), "a refused sample is gone: update REFUSED"


# Without the module there is one case, which fails (pytest would skip an empty list).
@pytest.mark.parametrize("release", KUBERAY_VERSIONS)
@pytest.mark.parametrize("path", SAMPLE_FILES or ["(no KubeRay samples)"])
def test_a_kuberay_sample_validates_and_plans(path: str, release: str) -> None:
    assert path in SAMPLE_FILES, f"no KubeRay samples: {PROBLEM}"
    _check(_sample(path), path, release)


def test_the_kuberay_v170_samples_validate_and_plan_when_there() -> None:
    if not V170_FILES:  # as its README says: released source without config/samples
        readme = (V170_SAMPLES.parents[2] / "README.md").read_text()
        assert "config/samples/` is left out" in readme
        return
    for path in V170_FILES:
        sample = _sample(path, V170_SAMPLES)
        if any(k != "ConfigMap" for k in sample.kinds):
            _check(sample, path, "v1.7.0")


def _check(sample: Sample, path: str, release: str) -> None:
    config = CONFIG.format(release).encode()
    files = (RepoFile("gitray.yaml", config), RepoFile(Path(path).name, sample.text.encode()))
    result = load_snapshot(Snapshot("worktree", path, files))
    assert result.kuberay is not None and result.kuberay.version == release
    messages = [str(d) for d in result.diagnostics]
    if sample.generate_name:
        assert messages, f"{path} uses generateName and was accepted"
        assert all(GENERATE_NAME in m and "write 'metadata.name: " in m for m in messages), \
            messages
        return
    if path in REFUSED:
        assert any(REFUSED[path] in m for m in messages), messages
        return
    assert not messages, "\n".join(messages)
    assert len(result.workloads) == len(sample.kinds)
    plan = compute_plan(result.workloads, LiveState(), result.config, revision="worktree",
                        against="empty", now=datetime(2026, 1, 1, tzinfo=UTC), exact=True)
    assert {w.key for w in plan.workloads} == {w.key for w in result.workloads}
    for workload in plan.workloads:
        assert workload.action is Action.CREATE and workload.steps, workload.key

