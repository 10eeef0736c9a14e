"""Domain values shared by every layer: object keys, workloads, live objects. No I/O.

Everything here is a frozen value. Mappings held by these values are plain JSON-safe
``dict``/``list``/``str``/``int``/``float``/``bool``/``None`` trees and are never mutated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

__all__ = [
    "ANN_ANALYSIS",
    "ANN_CLUSTER_HASH",
    "ANN_DELETE_AFTER",
    "ANN_FAILED",
    "ANN_PRUNE",
    "ANN_SERVE_CONFIG_HASH",
    "ANN_SPEC_HASH",
    "ANN_TEMPLATE_HASH",
    "ANN_WAVE",
    "ANN_WORKLOAD_KEY",
    "API_VERSION_RAY",
    "JSON",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_ROLE",
    "LABEL_SERVE",
    "LABEL_WORKLOAD",
    "MANAGED_BY",
    "PRUNE_DISABLED",
    "ROLE_CONTROL",
    "ROLE_PROGRESS",
    "ROLE_SIGNAL",
    "Diagnostic",
    "Kind",
    "LiveObject",
    "LiveState",
    "ObjectKey",
    "Origin",
    "Role",
    "SourceLocation",
    "ValueLine",
    "Workload",
    "json_copy",
    "stable_hash",
    "workload_label",
]

JSON = Any
"""A JSON-safe value (dict/list/str/int/float/bool/None). Kept as Any for ergonomic access."""

API_VERSION_RAY = "ray.io/v1"
MANAGED_BY = "gitray"

# Labels gitray puts on everything it creates (selectable; values <= 63 chars).
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INSTANCE = "gitray.io/instance"
LABEL_WORKLOAD = "gitray.io/workload"
LABEL_ROLE = "gitray.io/role"
ROLE_PROGRESS = "progress"  # gitray.io/role of run records (never part of the live state)
ROLE_SIGNAL = "signal"  # gitray.io/role of promote/abort signals (never part of the live state)
# gitray.io/role of suspend/resume/retry controls (never part of the live state)
ROLE_CONTROL = "control"
# Set by gitray on a RayService cluster's pods whose Serve proxy answered healthy; the serve
# Service selects on it (KubeRay's own ray.io/serve gating only applies to its RayServices).
LABEL_SERVE = "gitray.io/serve"

# Annotations (free-form values).
ANN_WORKLOAD_KEY = "gitray.io/workload-key"  # "<namespace>/<Kind>/<name>" of the owning workload
ANN_SPEC_HASH = "gitray.io/spec-hash"  # hash of what gitray last applied (detects removals)
# a standalone RayCluster's pod-template hash as gitray last applied it (KubeRay's Recreate hash)
ANN_TEMPLATE_HASH = "gitray.io/template-hash"
ANN_CLUSTER_HASH = "gitray.io/cluster-hash"  # RayService cluster: hash in its name, in full
ANN_SERVE_CONFIG_HASH = "gitray.io/serve-config-hash"  # Serve config last RUNNING on the cluster
ANN_DELETE_AFTER = "gitray.io/delete-after"  # RFC 3339 UTC deadline; persisted deletion timer
ANN_FAILED = "gitray.io/failed"  # a kept, failed pending cluster: the reason
ANN_WAVE = "gitray.io/wave"  # set by users in Git: lower waves apply first
ANN_ANALYSIS = "gitray.io/analysis"  # set by users in Git on a RayService: progressive checks
# set by users (in Git, or by hand on a live object): "disabled" keeps the workload when it
# leaves Git (prune opt-out, like Flux's kustomize.toolkit.fluxcd.io/prune: disabled)
ANN_PRUNE = "gitray.io/prune"
PRUNE_DISABLED = "disabled"


class Kind(StrEnum):
    """The Ray workload kinds gitray manages (``ray.io/v1``)."""

    RAY_CLUSTER = "RayCluster"
    RAY_JOB = "RayJob"
    RAY_SERVICE = "RayService"
    RAY_CRON_JOB = "RayCronJob"  # KubeRay v1.6+: applied as written, KubeRay schedules runs


class Role(StrEnum):
    """What an object gitray created is for (value of ``gitray.io/role``)."""

    CLUSTER = "cluster"  # a standalone RayCluster workload
    SERVICE_CLUSTER = "service-cluster"  # a cluster materialising a RayService
    HEAD_SERVICE = "head-service"  # <rayservice>-head-svc
    SERVE_SERVICE = "serve-service"  # <rayservice>-serve-svc
    JOB = "job"  # one run of a RayJob
    OBJECT = "object"  # a supporting object (ConfigMap, ...)
    # progressive delivery (upgradeStrategy NewClusterWithIncrementalUpgrade)
    CLUSTER_SERVE_SERVICE = "cluster-serve-service"  # <cluster>-serve-svc: one cluster's Serve
    GATEWAY = "gateway"  # <rayservice>-gateway
    ROUTE = "route"  # <rayservice>-httproute: weights between two clusters' serve Services


@dataclass(frozen=True, order=True)
class ObjectKey:
    """Identity of a workload or object: (kind, namespace, name)."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ObjectKey:
        namespace, kind, name = text.split("/", 2)
        return cls(kind=kind, namespace=namespace, name=name)


@dataclass(frozen=True, order=True)
class SourceLocation:
    """Where something stands in the repository. ``line``/``col`` are 1-based."""

    path: str
    line: int = 1
    col: int = 1

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem in a revision, printed as ``path:line:col: message``."""

    location: SourceLocation
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


@dataclass(frozen=True)
class ValueLine:
    """A line of a Helm template whose value comes from values files (issue 32): the key it
    sets, the line as helm prints it, and the values-file lines it reads. ``block`` is the key
    of the block scalar (``serveConfigV2: |``) the line stands in, "" when none."""

    template: SourceLocation
    key: str
    text: str  # the line as rendered, without its indentation
    value: JSON  # the value it sets (None inside a block scalar)
    values: tuple[SourceLocation, ...]
    block: str = ""


@dataclass(frozen=True)
class Origin:
    """Where a rendered workload comes from, for plans: "rendered from charts/x with
    environments/prod.yaml", and the template lines that read values."""

    text: str
    lines: tuple[ValueLine, ...] = ()


@dataclass(frozen=True)
class Workload:
    """A validated object from Git: a Ray workload or a supporting object.

    ``manifest`` is the whole object as written in Git, with ``metadata.namespace`` filled in
    from the default namespace. ``wave`` comes from the ``gitray.io/wave`` annotation.
    """

    key: ObjectKey
    api_version: str
    manifest: Mapping[str, JSON] = field(compare=False, hash=False)
    source: SourceLocation
    wave: int = 0
    origin: Origin | None = field(default=None, compare=False, hash=False)

    @property
    def is_ray(self) -> bool:
        return self.key.kind in {k.value for k in Kind}

    @property
    def spec(self) -> Mapping[str, JSON]:
        spec = self.manifest.get("spec")
        return spec if isinstance(spec, Mapping) else {}


@dataclass(frozen=True)
class LiveObject:
    """One object gitray manages, as read from the cluster (or synthesised for a preview)."""

    kind: str
    namespace: str
    name: str
    resource_version: str
    body: Mapping[str, JSON] = field(compare=False, hash=False)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.kind, self.namespace, self.name)

    @property
    def metadata(self) -> Mapping[str, JSON]:
        meta = self.body.get("metadata")
        return meta if isinstance(meta, Mapping) else {}

    @property
    def labels(self) -> Mapping[str, str]:
        labels = self.metadata.get("labels")
        return labels if isinstance(labels, Mapping) else {}

    @property
    def annotations(self) -> Mapping[str, str]:
        annotations = self.metadata.get("annotations")
        return annotations if isinstance(annotations, Mapping) else {}

    @property
    def spec(self) -> Mapping[str, JSON]:
        spec = self.body.get("spec")
        return spec if isinstance(spec, Mapping) else {}

    @property
    def status(self) -> Mapping[str, JSON]:
        status = self.body.get("status")
        return status if isinstance(status, Mapping) else {}

    @property
    def owner(self) -> ObjectKey | None:
        """The workload this object belongs to (from its ``gitray.io/workload-key``)."""
        text = self.annotations.get(ANN_WORKLOAD_KEY)
        if not text or text.count("/") < 2:
            return None
        return ObjectKey.parse(text)

    @property
    def role(self) -> str:
        return self.labels.get(LABEL_ROLE, "")


@dataclass(frozen=True)
class LiveState:
    """Every object gitray manages in the scope it looked at. Empty for ``--against empty``."""

    objects: tuple[LiveObject, ...] = ()

    @cached_property
    def _by_owner(self) -> dict[ObjectKey, tuple[LiveObject, ...]]:
        # Built once: planning looks up every workload's objects (O(N), not O(N^2)).
        index: dict[ObjectKey, list[LiveObject]] = {}
        for obj in self.objects:
            owner = obj.owner
            if owner is not None:
                index.setdefault(owner, []).append(obj)
        return {k: tuple(v) for k, v in index.items()}

    def owned_by(self, key: ObjectKey) -> tuple[LiveObject, ...]:
        return self._by_owner.get(key, ())

    def owners(self) -> frozenset[ObjectKey]:
        return frozenset(self._by_owner)


def json_copy(value: JSON) -> Any:
    """An independent copy of a JSON-safe tree (through the C JSON codec: many times faster
    than ``copy.deepcopy``, and the same for plain dicts, lists and scalars)."""
    return json.loads(json.dumps(value))


def stable_hash(value: JSON, length: int = 64) -> str:
    """Hex SHA-256 of the canonical JSON of ``value`` (sorted keys), cut to ``length``."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def workload_label(key: ObjectKey) -> str:
    """Value of ``gitray.io/workload``: readable when it fits in 63 chars, else hashed."""
    readable = f"{key.kind.lower()}.{key.name}"
    if len(readable) <= 63:
        return readable
    return f"{readable[:52]}-{stable_hash(str(key), 10)}"
