"""Reading the ray.io CustomResourceDefinitions a cluster serves. I/O (GETs via ``Kube``).

Four GETs by name (cluster-scoped objects, no LIST of every CRD in the cluster). What they
mean for validation is decided elsewhere (``gitray.parsing.kuberay.from_crds``). Whether they
changed since the last read is asked with four GETs of their metadata only (a few hundred
bytes each, where the whole RayCluster CRD is megabytes of schema to send and parse).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gitray.core.errors import ForbiddenError, NotFoundError
from gitray.k8s.client import Kube

__all__ = ["RAY_CRDS", "Stamp", "crd_stamp", "read_ray_crd_stamp", "read_ray_crds"]

RAY_CRDS = ("rayclusters.ray.io", "raycronjobs.ray.io", "rayjobs.ray.io", "rayservices.ray.io")
_CRD_API = "apiextensions.k8s.io/v1"
_METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

Stamp = tuple[tuple[str, str], ...]  # (uid, resourceVersion) of each CRD served, sorted


def crd_stamp(crds: Sequence[Mapping[str, Any]]) -> Stamp:
    """What identifies this version of ``crds`` (objects, or their metadata only)."""
    return tuple(sorted((str(c["metadata"].get("uid", "")),
                         str(c["metadata"].get("resourceVersion", ""))) for c in crds))


def read_ray_crd_stamp(kube: Kube) -> Stamp | None:
    """The stamp of the ray.io CRDs the cluster serves, read as metadata only; None when it
    cannot be read so (the caller reads the CRDs whole, which says why)."""
    found = []
    for name in RAY_CRDS:
        r = kube.request("GET", f"/apis/{_CRD_API}/customresourcedefinitions/{name}",
                         headers={"Accept": _METADATA_ONLY})
        if r.status == 404 and r.api_server:
            continue
        if not r.ok:
            return None
        try:
            meta = json.loads(r.text)
            found.append({"metadata": dict(meta["metadata"])})
        except (ValueError, KeyError, TypeError):
            return None
    return crd_stamp(found)


def read_ray_crds(kube: Kube) -> tuple[list[dict[str, Any]], str]:
    """The ray.io CRDs the cluster serves, and why none were read ("" when read).

    A CRD the cluster does not have is left out; when RBAC refuses reading CRDs, none are
    returned and the reason says so (the caller falls back to packaged schemas).
    """
    found = []
    for name in RAY_CRDS:
        try:
            found.append(kube.get(_CRD_API, "CustomResourceDefinition", "", name))
        except NotFoundError:
            continue
        except ForbiddenError as e:
            return [], f"the cluster's CRDs could not be read ({e})"
    return found, "" if found else "the cluster serves no ray.io CRDs"
