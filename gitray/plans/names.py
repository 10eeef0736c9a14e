"""Names and hashes gitray derives from specs. Pure, no I/O.

Deterministic names make steps idempotent: the cluster for a RayService spec is always
``<service>-<hash>``, so repeating ``create-cluster`` after a crash finds the one it made.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gitray.core.model import JSON, stable_hash
from gitray.parsing.yamlsafe import parse_documents

__all__ = [
    "NAME_HASH_LENGTH",
    "autoscaling_enabled",
    "blank_autoscaler_fields",
    "cluster_hash",
    "cluster_spec_hash",
    "head_service_name",
    "job_run_name",
    "object_spec_hash",
    "parse_serve_config",
    "serve_config_hash",
    "serve_service_name",
    "service_cluster_name",
]

NAME_HASH_LENGTH = 5  # <service(<=47)>-<5> <= 53 chars, so "<cluster>-serve-svc" fits 63


def autoscaling_enabled(cluster_spec: Mapping[str, JSON]) -> bool:
    return cluster_spec.get("enableInTreeAutoscaling") is True


def blank_autoscaler_fields(
    cluster_spec: Mapping[str, JSON], *, bounds: bool = True
) -> dict[str, Any]:
    """A copy of a RayCluster spec without the fields the autoscaler (or scaling) owns.

    ``bounds`` also blanks min/maxReplicas: a change to them alone updates in place rather
    than building a new cluster (as KubeRay's hash-without-replicas does).
    """
    spec: dict[str, Any] = copy.deepcopy(dict(cluster_spec))
    spec.pop("suspend", None)
    for group in spec.get("workerGroupSpecs") or []:
        if not isinstance(group, dict):
            continue
        group.pop("replicas", None)
        group.pop("suspend", None)
        if bounds:
            group.pop("minReplicas", None)
            group.pop("maxReplicas", None)
        strategy = group.get("scaleStrategy")
        if isinstance(strategy, dict):
            strategy.pop("workersToDelete", None)
            if not strategy:
                group.pop("scaleStrategy")
    return spec


def cluster_hash(cluster_spec: Mapping[str, JSON]) -> str:
    """Identity of a RayService cluster: changes to it need a new cluster (blue-green)."""
    return stable_hash(blank_autoscaler_fields(cluster_spec))


def cluster_spec_hash(cluster_spec: Mapping[str, JSON]) -> str:
    """What gitray last applied to a cluster; replicas left out when the autoscaler owns them."""
    if autoscaling_enabled(cluster_spec):
        return stable_hash(blank_autoscaler_fields(cluster_spec, bounds=False))
    spec = copy.deepcopy(dict(cluster_spec))
    for group in spec.get("workerGroupSpecs") or []:
        if isinstance(group, dict) and isinstance(group.get("scaleStrategy"), dict):
            group["scaleStrategy"].pop("workersToDelete", None)
    return stable_hash(spec)


def object_spec_hash(manifest: Mapping[str, JSON]) -> str:
    """Hash of a manifest's content: everything but metadata/status, plus labels/annotations."""
    meta = manifest.get("metadata") or {}
    body = {k: v for k, v in manifest.items() if k not in {"metadata", "status"}}
    body["metadata"] = {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
    }
    return stable_hash(body)


def service_cluster_name(service: str, cluster_spec: Mapping[str, JSON]) -> str:
    return f"{service}-{cluster_hash(cluster_spec)[:NAME_HASH_LENGTH]}"


def head_service_name(service: str) -> str:
    return f"{service}-head-svc"


def serve_service_name(service: str) -> str:
    return f"{service}-serve-svc"


def job_run_name(job: str, job_spec: Mapping[str, JSON]) -> str:
    return f"{job}-{stable_hash(job_spec)[:NAME_HASH_LENGTH]}"


def parse_serve_config(text: str) -> dict[str, Any]:
    """``serveConfigV2`` (YAML text, already validated by the loader) as JSON-safe data.

    Read with the loader's own parser (same YAML 1.2 core scalars, same limits), so what is
    deployed is exactly what was validated.
    """
    documents, problems = parse_documents(text, "spec.serveConfigV2")
    if problems or not documents or not isinstance(documents[0].value, dict):
        return {}
    return documents[0].value


def serve_config_hash(serve_config: Mapping[str, JSON]) -> str:
    return stable_hash(serve_config, 16)
