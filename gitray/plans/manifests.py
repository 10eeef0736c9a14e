"""The Kubernetes objects gitray creates, built from desired workloads. Pure, no I/O.

Every object carries ``app.kubernetes.io/managed-by: gitray``, the instance label, a
``gitray.io/workload`` label and the owning workload's key as an annotation. RayService
clusters never get KubeRay's ``ray.io/originated-from-*`` labels: a KubeRay RayService of the
same name would garbage-collect them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitray.core.model import (
    ANN_CLUSTER_HASH,
    ANN_DELETE_AFTER,
    ANN_FAILED,
    ANN_PRUNE,
    ANN_SERVE_CONFIG_HASH,
    ANN_SPEC_HASH,
    ANN_TEMPLATE_HASH,
    ANN_WAVE,
    ANN_WORKLOAD_KEY,
    API_VERSION_RAY,
    JSON,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    LABEL_SERVE,
    LABEL_WORKLOAD,
    MANAGED_BY,
    Kind,
    ObjectKey,
    Role,
    Workload,
    json_copy,
    stable_hash,
    workload_label,
)
from gitray.plans.names import (
    cluster_hash,
    cluster_spec_hash,
    head_service_name,
    job_run_name,
    object_spec_hash,
    serve_service_name,
    service_cluster_name,
    template_hash,
)
from gitray.plans.rayservice.serveservice import (
    head_ports,
    serve_service_hash,
    serve_service_ports,
    serve_service_template,
    wanted_serve_service_name,
)

__all__ = [
    "cluster_manifest",
    "job_manifest",
    "managed_labels",
    "object_manifest",
    "serves_from_workers_only",
    "service_cluster_manifest",
    "service_manifest",
    "service_selector",
]

# Annotations only gitray writes; a manifest from Git cannot set them.
_OWN_ANNOTATIONS = frozenset({ANN_WORKLOAD_KEY, ANN_SPEC_HASH, ANN_CLUSTER_HASH,
                              ANN_SERVE_CONFIG_HASH, ANN_DELETE_AFTER, ANN_FAILED,
                              ANN_TEMPLATE_HASH})


def managed_labels(key: ObjectKey, instance: str, role: Role) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_INSTANCE: instance,
        LABEL_WORKLOAD: workload_label(key),
        LABEL_ROLE: role.value,
    }


def _metadata(
    source: Mapping[str, JSON],
    name: str,
    key: ObjectKey,
    instance: str,
    role: Role,
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    meta = source.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(managed_labels(key, instance, role))
    merged = {k: v for k, v in (meta.get("annotations") or {}).items()
              if k not in _OWN_ANNOTATIONS}
    merged[ANN_WORKLOAD_KEY] = str(key)
    merged.update(annotations)
    return {"name": name, "namespace": key.namespace, "labels": labels, "annotations": merged}


def _wave_only(workload: Workload) -> dict[str, Any]:
    """Generated objects keep only the wave (for pruning order) and the prune opt-out of the
    workload's annotations."""
    annotations = (workload.manifest.get("metadata") or {}).get("annotations") or {}
    kept = {k: annotations[k] for k in (ANN_WAVE, ANN_PRUNE) if annotations.get(k) is not None}
    return {"metadata": {"annotations": kept}} if kept else {}


def cluster_manifest(workload: Workload, instance: str) -> dict[str, Any]:
    """A standalone RayCluster as gitray applies it."""
    spec = json_copy(dict(workload.spec))
    return {
        "apiVersion": API_VERSION_RAY,
        "kind": Kind.RAY_CLUSTER.value,
        "metadata": _metadata(
            workload.manifest, workload.key.name, workload.key, instance, Role.CLUSTER,
            {ANN_SPEC_HASH: cluster_spec_hash(spec), ANN_TEMPLATE_HASH: template_hash(spec)},
        ),
        "spec": spec,
    }


def service_cluster_manifest(workload: Workload, instance: str,
                             name: str | None = None) -> dict[str, Any]:
    """The RayCluster ``<service>-<hash>`` materialising a RayService's rayClusterConfig
    (``name``: an existing cluster updated in place under ``upgradeStrategy.type: None``)."""
    config = json_copy(dict(workload.spec.get("rayClusterConfig") or {}))
    name = name or service_cluster_name(workload.key.name, config)
    meta = _metadata(
        _wave_only(workload), name, workload.key, instance, Role.SERVICE_CLUSTER,
        {ANN_CLUSTER_HASH: cluster_hash(config), ANN_SPEC_HASH: cluster_spec_hash(config)},
    )
    return {"apiVersion": API_VERSION_RAY, "kind": Kind.RAY_CLUSTER.value, "metadata": meta,
            "spec": config}


def serves_from_workers_only(workload: Workload) -> bool:
    """RayService ``excludeHeadPodFromServeSvc: true``: the serve Service skips the head."""
    return workload.spec.get("excludeHeadPodFromServeSvc") is True


def service_selector(role: Role, cluster: str, *, workers_only: bool = False) -> dict[str, str]:
    if role is Role.HEAD_SERVICE:
        return {"ray.io/cluster": cluster, "ray.io/node-type": "head"}
    # Serve gating: only pods whose Serve proxy gitray found healthy carry this label.
    selector = {"ray.io/cluster": cluster, LABEL_SERVE: "true"}
    if workers_only:  # as KubeRay keeps the head out of the serve Service
        selector["ray.io/node-type"] = "worker"
    return selector


def service_manifest(
    workload: Workload, role: Role, cluster: str, instance: str
) -> dict[str, Any]:
    """``<service>-head-svc`` or ``<service>-serve-svc`` pointing at ``cluster``."""
    ports = head_ports(workload.spec.get("rayClusterConfig") or {})
    template = serve_service_template(workload.spec)
    if role is Role.SERVE_SERVICE and template is not None:
        return _templated_serve_service(workload, template, cluster, instance, ports)
    if role is Role.HEAD_SERVICE:
        name = head_service_name(workload.key.name)
        wanted = [(n, p) for n, p in sorted(ports.items())]
    else:
        name = serve_service_name(workload.key.name)
        wanted = [("serve", ports["serve"])]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(_wave_only(workload), name, workload.key, instance, role, {}),
        "spec": {
            "type": "ClusterIP",
            "selector": service_selector(role, cluster,
                                         workers_only=serves_from_workers_only(workload)),
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"}
                      for n, p in wanted],
        },
    }


def _templated_serve_service(workload: Workload, template: Mapping[str, Any], cluster: str,
                             instance: str, ports: Mapping[str, int]) -> dict[str, Any]:
    """The serve Service following ``spec.serveService``; the selector is gitray's."""
    source = json_copy(dict(template.get("metadata") or {}))
    wave = _wave_only(workload).get("metadata", {}).get("annotations", {})
    source["annotations"] = {**(source.get("annotations") or {}), **wave}
    name = wanted_serve_service_name(workload.key.name, workload.spec)
    meta = _metadata({"metadata": source}, name, workload.key, instance, Role.SERVE_SERVICE,
                     {ANN_SPEC_HASH: serve_service_hash(workload.spec) or ""})
    spec = json_copy(dict(template.get("spec") or {}))
    spec["selector"] = service_selector(Role.SERVE_SERVICE, cluster,
                                        workers_only=serves_from_workers_only(workload))
    head = (workload.spec.get("rayClusterConfig") or {}).get("headGroupSpec") or {}
    spec.setdefault("type", head.get("serviceType") or "ClusterIP")  # KubeRay's default too
    spec["ports"] = serve_service_ports(template, ports)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def job_manifest(workload: Workload, instance: str) -> dict[str, Any]:
    """One run of a RayJob, named after its spec: a changed spec is a new run."""
    spec = json_copy(dict(workload.spec))
    name = job_run_name(workload.key.name, spec)
    return {
        "apiVersion": API_VERSION_RAY,
        "kind": Kind.RAY_JOB.value,
        "metadata": _metadata(workload.manifest, name, workload.key, instance, Role.JOB,
                              {ANN_SPEC_HASH: stable_hash(spec)}),
        "spec": spec,
    }


def object_manifest(workload: Workload, instance: str) -> dict[str, Any]:
    """A supporting object (ConfigMap, ...) as gitray applies it."""
    body: dict[str, Any] = json_copy(dict(workload.manifest))
    body.pop("status", None)
    body["metadata"] = _metadata(
        workload.manifest, workload.key.name, workload.key, instance, Role.OBJECT,
        {ANN_SPEC_HASH: object_spec_hash(workload.manifest)},
    )
    return body

