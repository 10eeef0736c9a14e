"""Live state: everything gitray manages, read with a constant number of LIST calls. I/O.

One LIST per kind across all namespaces (by label selector ``managed-by=gitray`` and the
instance label), read in pages. Where RBAC only grants some namespaces, one LIST per kind and
namespace. Never one GET per workload.

Gateway API objects (``gateway.networking.k8s.io/v1`` Gateway and HTTPRoute, made for
incremental RayService upgrades) are listed only when something needs them: a RayService of
the repository upgrades incrementally, or the live state holds a per-cluster serve Service
(routing left from such a RayService, to be cleaned up). Without the Gateway API CRDs
(``absent_apis``) none are listed: the plan is still made, with a note, and applying it is
refused (``gitray.plans.prerequisites``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from gitray.core.config import Config
from gitray.core.errors import ForbiddenError, NotFoundError
from gitray.core.model import (
    API_VERSION_RAY,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_CONTROL,
    ROLE_PROGRESS,
    ROLE_SIGNAL,
    Kind,
    LiveObject,
    LiveState,
    Role,
)
from gitray.k8s.client import Kube

__all__ = [
    "GATEWAY_API",
    "GATEWAY_KINDS",
    "SUPPORTING_API_VERSIONS",
    "absent_apis",
    "live_kinds",
    "live_pages",
    "managed_selector",
    "read_live_state",
]

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
GATEWAY_API = "gateway.networking.k8s.io/v1"
GATEWAY_KINDS = ((GATEWAY_API, "Gateway"), (GATEWAY_API, "HTTPRoute"))
# the kinds gitray uses of each apiVersion an API server may not serve
_OPTIONAL_API_KINDS = {GATEWAY_API: tuple(kind for _, kind in GATEWAY_KINDS)}


def managed_selector(instance: str) -> str:
    return (f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={instance},"
            f"{LABEL_ROLE} notin ({ROLE_PROGRESS},{ROLE_SIGNAL},{ROLE_CONTROL})")


def live_kinds(config: Config, desired_api_versions: dict[str, str]) -> list[tuple[str, str]]:
    """(apiVersion, kind) pairs to list: Ray kinds, Services, and the supporting kinds."""
    kinds = [(API_VERSION_RAY, Kind.RAY_CLUSTER.value), (API_VERSION_RAY, Kind.RAY_JOB.value),
             ("v1", "Service"), (API_VERSION_RAY, Kind.RAY_CRON_JOB.value)]
    for kind in config.supporting_kinds:
        api = desired_api_versions.get(kind) or SUPPORTING_API_VERSIONS.get(kind, "v1")
        if (api, kind) not in kinds:
            kinds.append((api, kind))
    return kinds


def _live_object(item: dict[str, Any]) -> LiveObject:
    meta = item.get("metadata") or {}
    meta.pop("managedFields", None)  # the largest part of most objects; never planned on
    return LiveObject(str(item.get("kind", "")), str(meta.get("namespace", "")),
                      str(meta.get("name", "")), str(meta.get("resourceVersion", "")), item)


def live_pages(kube: Kube, config: Config, *, namespaces: Sequence[str] = (),
               desired_api_versions: dict[str, str] | None = None,
               gateway_needed_by: Sequence[str] = ()) -> Iterator[list[LiveObject]]:
    """Every object gitray manages for this instance, one LIST page at a time (a caller that
    keeps pages compact, as ``gitray.core.livestore`` does, never holds the whole state).

    ``namespaces`` is the fallback scope when listing across all namespaces is forbidden.
    ``gateway_needed_by``: the workloads (as text) whose plans need the Gateway API objects.
    """
    selector = managed_selector(config.instance)
    routing_left = False
    for api_version, kind in live_kinds(config, desired_api_versions or {}):
        for items in _pages_scoped(kube, api_version, kind, selector, namespaces):
            page = [_live_object(item) for item in items]
            routing_left = routing_left or any(
                o.kind == "Service" and o.labels.get(LABEL_ROLE) == Role.CLUSTER_SERVE_SERVICE
                for o in page)
            yield page
    if (gateway_needed_by or routing_left) and not absent_apis(kube, [GATEWAY_API]):
        for api_version, kind in GATEWAY_KINDS:
            for items in _pages_scoped(kube, api_version, kind, selector, namespaces):
                yield [_live_object(item) for item in items]


def read_live_state(kube: Kube, config: Config, *, namespaces: Sequence[str] = (),
                    desired_api_versions: dict[str, str] | None = None,
                    gateway_needed_by: Sequence[str] = ()) -> LiveState:
    """Every object gitray manages for this instance, all at once."""
    objects = [o for page in live_pages(kube, config, namespaces=namespaces,
                                        desired_api_versions=desired_api_versions,
                                        gateway_needed_by=gateway_needed_by)
               for o in page]
    objects.sort(key=lambda o: (o.kind, o.namespace, o.name))
    return LiveState(tuple(objects))


def absent_apis(kube: Kube, api_versions: Iterable[str]) -> frozenset[str]:
    """Those of ``api_versions`` (of ``_OPTIONAL_API_KINDS``) whose kinds the API server does
    not all serve (CRDs not installed): one discovery look-up per kind."""
    absent = set()
    for api_version in api_versions:
        for kind in _OPTIONAL_API_KINDS.get(api_version, ()):
            try:
                kube.resource(api_version, kind)
            except NotFoundError:
                absent.add(api_version)
                break
    return frozenset(absent)


def _pages_scoped(kube: Kube, api_version: str, kind: str, selector: str,
                  namespaces: Iterable[str]) -> Iterator[list[dict[str, Any]]]:
    if kind in _OPTIONAL_KINDS:
        try:
            kube.resource(api_version, kind)
        except NotFoundError:
            return  # an older KubeRay without this CRD: nothing of that kind can exist
    started = False
    try:
        for items, _ in kube.list_pages(api_version, kind, label_selector=selector):
            started = True
            yield items
        return
    except ForbiddenError:
        scoped = sorted(set(namespaces))
        if started or not scoped:
            raise
    for ns in scoped:
        for items, _ in kube.list_pages(api_version, kind, namespace=ns,
                                        label_selector=selector):
            yield items
