"""Planner inputs for table-driven tests: workloads and live states as plain values.

Manifest builders (cluster specs, Serve configs) come from ``testenv.manifests``. These are
test doubles for *pure planner inputs* only (allowed by the project rules); anything
that touches Kubernetes or Ray is tested against the real environment in tests/integration.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from gitray.core.config import Config
from gitray.core.model import (
    ANN_DELETE_AFTER,
    ANN_FAILED,
    ANN_SERVE_CONFIG_HASH,
    LiveObject,
    LiveState,
    ObjectKey,
    SourceLocation,
    Workload,
)
from gitray.plans.manifests import service_cluster_manifest
from gitray.plans.materialize import as_live, materialize
from gitray.plans.names import parse_serve_config, serve_config_hash
from testenv.manifests import cluster_spec, serve_config

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CONFIG = Config()


def _workload(kind: str, name: str, ns: str, spec: dict[str, Any],
              annotations: dict[str, str] | None = None, api: str = "ray.io/v1") -> Workload:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = annotations
    wave = int((annotations or {}).get("gitray.io/wave", "0"))
    manifest = {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}
    return Workload(ObjectKey(kind, ns, name), api, manifest,
                    SourceLocation(f"{ns}/{name}.yaml", 1, 1), wave)


def rayservice(name: str = "svc", ns: str = "ray", *, serve: str | None = None,
               wave: int = 0, deletion_delay: int | None = None, upgrade: str | None = None,
               managed_by: str | None = None, extra_groups: tuple[str, ...] = (),
               **cluster: Any) -> Workload:
    """A RayService; ``extra_groups`` appends worker groups (copies of ``workers``)."""
    spec: dict[str, Any] = {"serveConfigV2": serve or serve_config(),
                            "rayClusterConfig": cluster_spec(**cluster)}
    groups = spec["rayClusterConfig"]["workerGroupSpecs"]
    for group in extra_groups:
        groups.append({**copy.deepcopy(groups[0]), "groupName": group})
    if deletion_delay is not None:
        spec["rayClusterDeletionDelaySeconds"] = deletion_delay
    if upgrade is not None:
        spec["upgradeStrategy"] = {"type": upgrade}
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return _workload("RayService", name, ns, spec,
                     {"gitray.io/wave": str(wave)} if wave else None)


def raycluster(name: str = "cl", ns: str = "ray", wave: int = 0, **cluster: Any) -> Workload:
    return _workload("RayCluster", name, ns, cluster_spec(**cluster),
                     {"gitray.io/wave": str(wave)} if wave else None)


def rayjob(name: str = "job", ns: str = "ray", entrypoint: str = "python /code/job.py",
           wave: int = 0) -> Workload:
    spec = {"entrypoint": entrypoint, "rayClusterSpec": cluster_spec(replicas=0)}
    return _workload("RayJob", name, ns, spec, {"gitray.io/wave": str(wave)} if wave else None)


def raycronjob(name: str = "nightly", ns: str = "ray", schedule: str = "0 3 * * *",
               entrypoint: str = "python /code/job.py", wave: int = 0) -> Workload:
    """A RayCronJob (KubeRay v1.6+): a schedule and the RayJob it starts."""
    spec = {"schedule": schedule, "jobTemplate": {"entrypoint": entrypoint}}
    return _workload("RayCronJob", name, ns, spec,
                     {"gitray.io/wave": str(wave)} if wave else None)


def configmap(name: str = "code", ns: str = "ray", data: dict[str, str] | None = None,
              wave: int = 0) -> Workload:
    w = _workload("ConfigMap", name, ns, {}, {"gitray.io/wave": str(wave)} if wave else None,
                  api="v1")
    manifest = dict(w.manifest)
    manifest.pop("spec")
    manifest["data"] = data or {"job.py": "print('hello')"}
    return Workload(w.key, "v1", manifest, w.source, w.wave)


def live(*workloads: Workload, config: Config = CONFIG) -> LiveState:
    """The cluster exactly as gitray leaves it for these workloads (Serve RUNNING, jobs done)."""
    return materialize(workloads, config)


def with_objects(state: LiveState, *extra: LiveObject) -> LiveState:
    return LiveState(state.objects + extra)


def replace_object(state: LiveState, name: str, **changes: Any) -> LiveState:
    """A copy of ``state`` where object ``name`` has body changes applied (deep-merged)."""
    out = []
    for obj in state.objects:
        if obj.name == name:
            body = copy.deepcopy(dict(obj.body))
            _merge(body, changes)
            out.append(LiveObject(obj.kind, obj.namespace, obj.name, obj.resource_version, body))
        else:
            out.append(obj)
    return LiveState(tuple(out))


def _merge(into: dict[str, Any], changes: dict[str, Any]) -> None:
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def cluster_for(service: Workload, *, delete_after: str | None = None,
                failed: str | None = None, rv: str = "", running: bool = False) -> LiveObject:
    """The RayCluster gitray builds for ``service``'s spec, optionally scheduled or failed;
    ``running`` records that its Serve config reached RUNNING there."""
    manifest = service_cluster_manifest(service, CONFIG.instance)
    if running:
        serve = parse_serve_config(service.spec["serveConfigV2"])
        manifest["metadata"]["annotations"][ANN_SERVE_CONFIG_HASH] = serve_config_hash(serve)
    if delete_after:
        manifest["metadata"]["annotations"][ANN_DELETE_AFTER] = delete_after
    if failed:
        manifest["metadata"]["annotations"][ANN_FAILED] = failed
    return as_live(manifest, {"state": "ready"}, rv)


def point_services(state: LiveState, head: str, serve: str) -> LiveState:
    """Make the head/serve Services select the given clusters."""
    out = []
    for obj in state.objects:
        if obj.kind == "Service":
            target = head if obj.name.endswith("-head-svc") else serve
            body = copy.deepcopy(dict(obj.body))
            body["spec"]["selector"]["ray.io/cluster"] = target
            out.append(LiveObject(obj.kind, obj.namespace, obj.name, obj.resource_version, body))
        else:
            out.append(obj)
    return LiveState(tuple(out))


def names(objs: Iterable[LiveObject]) -> list[str]:
    return [o.name for o in objs]
