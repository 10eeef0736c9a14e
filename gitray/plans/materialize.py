"""The live state a cluster would have if it exactly matched a set of workloads. Pure.

Used for ``gitray plan --against REV`` (offline PR previews) and by tests to build live
states: RayServices get their cluster and both Services with Serve RUNNING (and, upgraded
incrementally, their per-cluster serve Service, Gateway and HTTPRoute); RayJob runs are
finished; everything else is as applied. resourceVersions are empty: nothing here is real.
``materialized_store`` keeps such a state compressed by namespace and ``plan_against_store``
plans against it one namespace at a time, so a preview of a large repository holds one
namespace's synthesised objects decoded, not all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gitray.core.config import Config
from gitray.core.livestore import LiveStore
from gitray.core.model import ANN_SERVE_CONFIG_HASH, Kind, LiveObject, LiveState, Role, Workload
from gitray.plans.inputs import with_inputs
from gitray.plans.manifests import (
    cluster_manifest,
    job_manifest,
    object_manifest,
    service_cluster_manifest,
    service_manifest,
)
from gitray.plans.names import parse_serve_config, serve_config_hash
from gitray.plans.plan import Plan
from gitray.plans.planner import Planner
from gitray.plans.rayservice.fields import UPGRADE_INCREMENTAL, foreign_manager, upgrade_type
from gitray.plans.rayservice.gateway import (
    cluster_serve_service_manifest,
    gateway_manifest,
    route_manifest,
)
from gitray.plans.rayservice.upgradeoptions import read_options

__all__ = ["as_live", "materialize", "materialized_store", "plan_against_store"]


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



def materialized_store(workloads: Sequence[Workload], config: Config) -> LiveStore:
    """``materialize(workloads, config)`` kept compressed by namespace in a :class:`LiveStore`,
    built one namespace at a time (a pod can only use its own namespace's ConfigMaps and
    Secrets, so each namespace stands alone): a large revision's synthesised objects take a
    tenth of their decoded size, and the revision itself can be dropped once this is built."""
    store = LiveStore()
    by_ns: dict[str, list[Workload]] = {}
    for w in workloads:
        by_ns.setdefault(w.key.namespace, []).append(w)
    for ns in sorted(by_ns):
        store.add(materialize(by_ns.pop(ns), config).objects)
    return store


def plan_against_store(desired: Sequence[Workload], config: Config, store: LiveStore, *,
                       revision: str, against: str, now: datetime, label: str = "") -> Plan:
    """The plan of ``desired`` against a :func:`materialized_store` of another revision
    (``exact``: full field diffs), one batch at a time; the same plan as ``compute_plan``
    against the whole materialized state (tests/unit/plans/test_plan_batches.py)."""
    planner = Planner(desired, config, now=now, exact=True)
    for batch in store.batches():
        planner.add([batch], store.take(batch))
    return planner.finish(revision=revision, against=against, label=label)
