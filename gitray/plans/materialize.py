"""The live state a cluster would have if it exactly matched a set of workloads. Pure.

Used for ``gitray plan --against REV`` (offline PR previews) and by tests to build live
states: RayServices get their cluster and both Services with Serve RUNNING (and, upgraded
incrementally, their per-cluster serve Service, Gateway and HTTPRoute); RayJob runs are
finished; everything else is as applied. resourceVersions are empty: nothing here is real.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gitray.core.config import Config
from gitray.core.model import ANN_SERVE_CONFIG_HASH, Kind, LiveObject, LiveState, Role, Workload
from gitray.plans.fields import UPGRADE_INCREMENTAL, foreign_manager, upgrade_type
from gitray.plans.gateway import (
    cluster_serve_service_manifest,
    gateway_manifest,
    route_manifest,
)
from gitray.plans.inputs import with_inputs
from gitray.plans.manifests import (
    cluster_manifest,
    job_manifest,
    object_manifest,
    service_cluster_manifest,
    service_manifest,
)
from gitray.plans.names import parse_serve_config, serve_config_hash
from gitray.plans.upgradeoptions import read_options

__all__ = ["as_live", "materialize"]


def as_live(manifest: Mapping[str, Any], status: Mapping[str, Any] | None = None,
            resource_version: str = "") -> LiveObject:
    body = dict(manifest)
    if status is not None:
        body["status"] = dict(status)
    meta = body["metadata"]
    return LiveObject(body["kind"], meta["namespace"], meta["name"], resource_version, body)


def materialize(workloads: Sequence[Workload], config: Config) -> LiveState:
    objects: list[LiveObject] = []
    for w in with_inputs(workloads):
        if w.key.kind == Kind.RAY_SERVICE and foreign_manager(w.spec) is not None:
            continue  # another controller's: gitray made nothing for it
        if w.key.kind == Kind.RAY_SERVICE:
            cluster = service_cluster_manifest(w, config.instance)
            serve = parse_serve_config(str(w.spec.get("serveConfigV2") or ""))
            cluster["metadata"]["annotations"][ANN_SERVE_CONFIG_HASH] = serve_config_hash(serve)
            name = cluster["metadata"]["name"]
            objects.append(as_live(cluster, {"state": "ready"}))
            for role in (Role.HEAD_SERVICE, Role.SERVE_SERVICE):
                objects.append(as_live(service_manifest(w, role, name, config.instance)))
            if upgrade_type(w.spec) == UPGRADE_INCREMENTAL:
                options = read_options(w.spec["upgradeStrategy"])
                objects += [as_live(cluster_serve_service_manifest(w, name, config.instance)),
                            as_live(gateway_manifest(w, options.gateway_class,
                                                     config.instance)),
                            as_live(route_manifest(w, [(name, 100)], config.instance))]
        elif w.key.kind == Kind.RAY_CLUSTER:
            objects.append(as_live(cluster_manifest(w, config.instance), {"state": "ready"}))
        elif w.key.kind == Kind.RAY_JOB:
            objects.append(as_live(job_manifest(w, config.instance),
                                   {"jobDeploymentStatus": "Complete",
                                    "jobStatus": "SUCCEEDED"}))
        else:
            objects.append(as_live(object_manifest(w, config.instance)))
    return LiveState(tuple(objects))
