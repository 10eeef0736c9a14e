"""Gateway API objects for a RayService's incremental upgrade: names and manifests. Pure.

A RayService with ``upgradeStrategy.type: NewClusterWithIncrementalUpgrade`` is reached through

- ``<service>-gateway``: a Gateway of ``clusterUpgradeOptions.gatewayClassName``, one HTTP
  listener on port 80;
- ``<service>-httproute``: an HTTPRoute on that Gateway whose ``backendRefs`` are the
  per-cluster serve Services, weighted (100 % the active cluster outside an upgrade);
- ``<cluster>-serve-svc``: one serve Service per cluster (the stable ``<service>-serve-svc``
  follows the active cluster as in a blue-green upgrade; a route needs one backend per cluster
  to split traffic between them).

Every object carries gitray's labels and the owning workload's key, like the other objects
gitray makes (``gitray.plans.manifests``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gitray.core.model import ANN_WORKLOAD_KEY, JSON, Role, Workload
from gitray.plans.manifests import (
    managed_labels,
    serves_from_workers_only,
    service_selector,
)
from gitray.plans.rayservice.serveservice import head_ports

__all__ = [
    "GATEWAY_API_VERSION",
    "GATEWAY_PORT",
    "backends",
    "cluster_serve_service_manifest",
    "cluster_serve_service_name",
    "gateway_manifest",
    "gateway_name",
    "route_manifest",
    "route_name",
    "route_refs",
    "serve_port",
]

GATEWAY_API_VERSION = "gateway.networking.k8s.io/v1"
GATEWAY_PORT = 80


def gateway_name(service: str) -> str:
    return f"{service}-gateway"


def route_name(service: str) -> str:
    return f"{service}-httproute"


def cluster_serve_service_name(cluster: str) -> str:
    # <= 63 chars: a cluster name is at most 53 (gitray.plans.rules.MAX_RAY_NAME + 6)
    return f"{cluster}-serve-svc"


def _metadata(workload: Workload, name: str, instance: str, role: Role) -> dict[str, Any]:
    return {"name": name, "namespace": workload.key.namespace,
            "labels": managed_labels(workload.key, instance, role),
            "annotations": {ANN_WORKLOAD_KEY: str(workload.key)}}


def serve_port(workload: Workload) -> int:
    return head_ports(workload.spec.get("rayClusterConfig") or {})["serve"]


def cluster_serve_service_manifest(workload: Workload, cluster: str,
                                   instance: str) -> dict[str, Any]:
    """``<cluster>-serve-svc``: the Serve pods of one cluster (Serve-gated, as the stable
    serve Service is)."""
    port = serve_port(workload)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(workload, cluster_serve_service_name(cluster), instance,
                              Role.CLUSTER_SERVE_SERVICE),
        "spec": {
            "type": "ClusterIP",
            "selector": service_selector(Role.SERVE_SERVICE, cluster,
                                         workers_only=serves_from_workers_only(workload)),
            "ports": [{"name": "serve", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def gateway_manifest(workload: Workload, gateway_class: str, instance: str) -> dict[str, Any]:
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "Gateway",
        "metadata": _metadata(workload, gateway_name(workload.key.name), instance,
                              Role.GATEWAY),
        "spec": {
            "gatewayClassName": gateway_class,
            "listeners": [{"name": "http", "protocol": "HTTP", "port": GATEWAY_PORT}],
        },
    }


def backends(workload: Workload, weights: Sequence[tuple[str, int]]) -> list[dict[str, JSON]]:
    """``backendRefs`` for ``(cluster, weight)`` pairs (a weight of 0 is kept: it says where
    the traffic is not going, and an executor can check it)."""
    port = serve_port(workload)
    return [{"group": "", "kind": "Service", "name": cluster_serve_service_name(cluster),
             "namespace": workload.key.namespace, "port": port, "weight": weight}
            for cluster, weight in weights]


def route_refs(route: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The route's backends and weights, sorted (a backend without a weight has 1)."""
    rules = (route.get("spec") or {}).get("rules") or []
    return sorted((str(ref.get("name")), int(ref.get("weight", 1)))
                  for rule in rules for ref in rule.get("backendRefs") or [])


def route_manifest(workload: Workload, weights: Sequence[tuple[str, int]],
                   instance: str) -> dict[str, Any]:
    """``<service>-httproute`` splitting every path between the clusters by ``weights``."""
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": _metadata(workload, route_name(workload.key.name), instance, Role.ROUTE),
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                            "name": gateway_name(workload.key.name),
                            "namespace": workload.key.namespace}],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": backends(workload, weights)}],
        },
    }
