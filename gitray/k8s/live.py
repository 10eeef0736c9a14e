"""Live state: everything gitray manages, read with a constant number of LIST calls. I/O.

One LIST per kind across all namespaces (by label selector ``managed-by=gitray`` and the
instance label). Where RBAC only grants some namespaces, one LIST per kind and namespace.
Never one GET per workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gitray.core.config import Config
from gitray.core.errors import ForbiddenError, NotFoundError
from gitray.core.model import (
    API_VERSION_RAY,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_PROGRESS,
    Kind,
    LiveObject,
    LiveState,
)
from gitray.k8s.client import Kube

__all__ = ["SUPPORTING_API_VERSIONS", "live_kinds", "managed_selector", "read_live_state"]

# apiVersions of common supporting kinds; others come from the manifests in Git.
SUPPORTING_API_VERSIONS = {
    "ConfigMap": "v1",
    "Secret": "v1",
    "ServiceAccount": "v1",
    "PersistentVolumeClaim": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
}
# Ray kinds whose CRD only newer KubeRay releases install (RayCronJob: v1.6+).
_OPTIONAL_KINDS = frozenset({Kind.RAY_CRON_JOB.value})


def managed_selector(instance: str) -> str:
    return (f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={instance},"
            f"{LABEL_ROLE}!={ROLE_PROGRESS}")


def live_kinds(config: Config, desired_api_versions: dict[str, str]) -> list[tuple[str, str]]:
    """(apiVersion, kind) pairs to list: Ray kinds, Services, and the supporting kinds."""
    kinds = [(API_VERSION_RAY, Kind.RAY_CLUSTER.value), (API_VERSION_RAY, Kind.RAY_JOB.value),
             ("v1", "Service"), (API_VERSION_RAY, Kind.RAY_CRON_JOB.value)]
    for kind in config.supporting_kinds:
        api = desired_api_versions.get(kind) or SUPPORTING_API_VERSIONS.get(kind, "v1")
        if (api, kind) not in kinds:
            kinds.append((api, kind))
    return kinds


def _slim(item: dict[str, Any]) -> dict[str, Any]:
    meta = dict(item.get("metadata") or {})
    meta.pop("managedFields", None)
    return {**item, "metadata": meta}


def read_live_state(kube: Kube, config: Config, *, namespaces: Sequence[str] = (),
                    desired_api_versions: dict[str, str] | None = None) -> LiveState:
    """Every object gitray manages for this instance.

    ``namespaces`` is the fallback scope when listing across all namespaces is forbidden.
    """
    selector = managed_selector(config.instance)
    objects: list[LiveObject] = []
    for api_version, kind in live_kinds(config, desired_api_versions or {}):
        for item in _list_scoped(kube, api_version, kind, selector, namespaces):
            meta = item.get("metadata") or {}
            objects.append(LiveObject(kind, str(meta.get("namespace", "")),
                                      str(meta.get("name", "")),
                                      str(meta.get("resourceVersion", "")), _slim(item)))
    objects.sort(key=lambda o: (o.kind, o.namespace, o.name))
    return LiveState(tuple(objects))


def _list_scoped(kube: Kube, api_version: str, kind: str, selector: str,
                 namespaces: Iterable[str]) -> list[dict[str, Any]]:
    if kind in _OPTIONAL_KINDS:
        try:
            kube.resource(api_version, kind)
        except NotFoundError:
            return []  # an older KubeRay without this CRD: nothing of that kind can exist
    try:
        items, _ = kube.list(api_version, kind, label_selector=selector)
        return items
    except ForbiddenError:
        scoped = sorted(set(namespaces))
        if not scoped:
            raise
    out: list[dict[str, Any]] = []
    for ns in scoped:
        items, _ = kube.list(api_version, kind, namespace=ns, label_selector=selector)
        out.extend(items)
    return out
