"""Reading the ray.io CustomResourceDefinitions a cluster serves. I/O (GETs via ``Kube``).

Four GETs by name (cluster-scoped objects, no LIST of every CRD in the cluster). What they
mean for validation is decided elsewhere (``gitray.parsing.kuberay.from_crds``).
"""

from __future__ import annotations

from typing import Any

from gitray.core.errors import ForbiddenError, NotFoundError
from gitray.k8s.client import Kube

__all__ = ["RAY_CRDS", "read_ray_crds"]

RAY_CRDS = ("rayclusters.ray.io", "raycronjobs.ray.io", "rayjobs.ray.io", "rayservices.ray.io")
_CRD_API = "apiextensions.k8s.io/v1"


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
