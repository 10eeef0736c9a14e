"""The schemas manifests are judged by when a cluster is read: the CRDs it serves. I/O (reads
the CRDs through ``gitray.k8s.crds``); the conversion is ``gitray.parsing.kuberay.from_crds``.

Read once per run; converted again only when a CRD's uid or resourceVersion changed (the
daemon keeps the conversion from one pass to the next, and then reads the CRDs' metadata only).
"""

from __future__ import annotations

import threading

from gitray.k8s.client import Kube
from gitray.k8s.crds import Stamp, crd_stamp, read_ray_crd_stamp, read_ray_crds
from gitray.parsing.kuberay import KubeRaySchemas, from_crds

__all__ = ["cluster_schemas"]

_lock = threading.Lock()
_last: dict[Stamp, KubeRaySchemas] = {}  # at most one entry


def cluster_schemas(kube: Kube, fallback: KubeRaySchemas) -> KubeRaySchemas:
    """The schemas of the ray.io CRDs ``kube``'s cluster serves; ``fallback`` (with the
    reason in its origin) when it serves none or they cannot be read."""
    if _last:  # converted before: unchanged, when the metadata says so
        known = _known(read_ray_crd_stamp(kube), fallback)
        if known is not None:
            return known
    crds, why_not = read_ray_crds(kube)
    if not crds:
        return KubeRaySchemas(fallback.version, f"{fallback.origin}; {why_not}", fallback.key,
                              fallback.schemas, fallback.rules)
    stamp = crd_stamp(crds)
    with _lock:
        known = _known(stamp, fallback)
        if known is not None:
            return known
        schemas = from_crds(crds, fallback)
        _last.clear()
        _last[stamp] = schemas
        return schemas


def _known(stamp: Stamp | None, fallback: KubeRaySchemas) -> KubeRaySchemas | None:
    known = _last.get(stamp) if stamp else None
    return known if known is not None and known.key.endswith(f"|{fallback.key}") else None
