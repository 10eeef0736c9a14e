"""Which KubeRay the test environment runs, and where its operator and CRDs come from (stdlib
only).

The Go module proxy refuses ray-operator v1.7.0's zip, so the operator and its CRDs come from
KubeRay's source folder beside the repository, ``../shared/kuberay-v1.7.0/ray-operator`` (an
input, like a package: read there, never copied into the repository; for a clone in a folder
of its own, beside the repository it was cloned from: ``beside_repository``).
``$GITRAY_KUBERAY_SOURCE`` names another folder holding ``ray-operator/`` (an error when it
holds none), or ``proxy``: the module proxy's release. The release is the source's own
``KUBERAY_VERSION``, so the cache key names it. Without that folder the newest release the
proxy serves (v1.6.2) is used, and ``build`` says so in one line (``fallback_line``).

``up`` records the release and its origin in the operator's component of ``state.json``; ``up``,
``status`` and ``TestEnv.kuberay_version`` name it (``recorded_version``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from testenv.build import CANDIDATES, BuildError, Layout, module_dir

if TYPE_CHECKING:
    from testenv.control import State

__all__ = [
    "SOURCE",
    "SOURCE_VAR",
    "VERSION_FILE",
    "KubeRaySource",
    "beside_repository",
    "copy_crds",
    "fallback_line",
    "find_source",
    "label",
    "origin",
    "recorded_version",
]

REPO = Path(__file__).resolve().parents[1]
SOURCE_VAR = "GITRAY_KUBERAY_SOURCE"
FOLDER = Path("shared") / "kuberay-v1.7.0"  # beside the repository: ../shared/kuberay-v1.7.0


def beside_repository(repo: Path) -> Path:
    """``../shared/kuberay-v1.7.0`` beside ``repo``; for a clone in a folder of its own (a clean
    clone in a temporary directory, as CI makes one), beside the repository it was cloned from
    (its ``origin``, a local path) when only that one has it."""
    here = repo.parent / FOLDER
    if here.is_dir():
        return here
    try:
        url = subprocess.run(["git", "-C", str(repo), "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return here
    url = url.strip().removeprefix("file://")
    if not url or "://" in url or ":" in url.split("/", 1)[0]:  # (a remote URL: not a path)
        return here
    origin = (repo / url).resolve()  # (a relative origin is relative to the clone)
    return origin.parent / FOLDER if (origin.parent / FOLDER).is_dir() else here


SOURCE = beside_repository(REPO)
MODULE = CANDIDATES["kuberay"][0]
# where the operator states its own release (a constant, not a build-time variable, in KubeRay)
VERSION_FILE = Path("controllers") / "ray" / "utils" / "constant.go"
_VERSION = re.compile(r'^\s*KUBERAY_VERSION\s*=\s*"(v\d+\.\d+\.\d+[^"]*)"', re.M)


@dataclass(frozen=True)
class KubeRaySource:
    """A KubeRay source folder (holding ``ray-operator/``) the operator is built from."""

    folder: Path
    version: str  # the source's own KUBERAY_VERSION

    @property
    def operator(self) -> Path:
        return self.folder / "ray-operator"

    @property
    def crds(self) -> Path:
        return self.operator / "config" / "crd" / "bases"


def find_source() -> tuple[KubeRaySource | None, str]:
    """The KubeRay source the environment's operator is built from, or None and why not (the
    module proxy's release is used then)."""
    value = os.environ.get(SOURCE_VAR, "").strip()
    if value == "proxy":
        return None, f"${SOURCE_VAR}=proxy"
    folder = Path(value).expanduser() if value else SOURCE
    operator = folder / "ray-operator"
    try:
        text = (operator / VERSION_FILE).read_text(errors="replace")
    except OSError:
        if value:
            raise BuildError(f"${SOURCE_VAR}={value} holds no KubeRay source (no "
                             f"{operator / VERSION_FILE}); unset it or set it to `proxy`"
                             ) from None
        return None, f"no KubeRay source in {folder}"
    found = _VERSION.search(text)
    source = KubeRaySource(folder, found.group(1)) if found else None
    if source is None or not source.crds.is_dir() or not (operator / "go.mod").is_file():
        raise BuildError(f"{operator} is not a KubeRay ray-operator source (its {VERSION_FILE} "
                         f"names no KUBERAY_VERSION, or go.mod or config/crd/bases is missing)")
    return source, ""


def origin(lay: Layout) -> str:
    """Where the operator and its CRDs come from, in words."""
    if lay.kuberay_source is not None:
        return f"built from the KubeRay source in {lay.kuberay_source.operator}"
    return f"{MODULE}@{lay.versions['kuberay']} from the Go module proxy"


def fallback_line(lay: Layout) -> str:
    """The one line ``build`` prints when KubeRay's source folder is missing."""
    return (f"KubeRay: {lay.kuberay_why}: the environment runs {MODULE}@"
            f"{lay.versions['kuberay']} from the Go module proxy instead (v1.7.0 and later are "
            f"not served there)")


def label(lay: Layout, outputs: list[str]) -> str:
    """``build``'s name for the operator's step: the release and its source folder, else the
    module."""
    if lay.kuberay_source is None:
        return f"{MODULE}@{lay.versions['kuberay']} -> {', '.join(outputs)}"
    return f"KubeRay {lay.versions['kuberay']} ({lay.kuberay_source.operator}) -> " \
        f"{', '.join(outputs)}"


def copy_crds(lay: Layout) -> None:
    """The CRDs of the KubeRay the environment runs (its source folder, else the module), all
    of them: CRD_NAMES plus e.g. raycronjobs. Never linked from another key: one release may
    come from a source folder or from the module."""
    if lay.kuberay_source is not None:
        bases = lay.kuberay_source.crds
    else:
        bases = module_dir(MODULE, lay.versions["kuberay"], lay.root) / "config" / "crd" / "bases"
    lay.crds.mkdir(parents=True, exist_ok=True)
    for crd in sorted(bases.glob("ray.io_*.yaml")):
        shutil.copyfile(crd, lay.crds / crd.name)


def recorded_version(state: State) -> str:
    """The KubeRay release the environment's operator is (its record in ``state.json``; for an
    environment started before that was recorded, the version in its cache key)."""
    version = state.components.get("kuberay-operator", {}).get("version")
    if version:
        return str(version)
    key = Path(state.cache).name
    return key.rsplit("_kuberay-", 1)[1] if "_kuberay-" in key else "unknown"
