"""Every RayService ``spec`` field: honoured by gitray's planner, or refused by name. Pure.

gitray does the RayService controller's job itself (``gitray.plans.rayservice.planner``), so a
field that changes what KubeRay's controller does must either change what gitray does or be
refused: a manifest asking for something gitray does not do is never accepted silently. A unit
test walks the CRD schema's ``spec`` properties and fails when one is in neither table.

``HANDLED`` says how each accepted field is honoured; where only some values are honoured,
``refused_fields`` refuses the others with a message naming the field and why.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gitray.core.model import Diagnostic
from gitray.parsing.text import JsonPath
from gitray.parsing.yamlsafe import YamlDocument
from gitray.plans.rayservice.upgradeoptions import options_problems

__all__ = [
    "HANDLED",
    "KUBERAY_MANAGER",
    "REFUSED",
    "UPGRADE_INCREMENTAL",
    "UPGRADE_NEW_CLUSTER",
    "UPGRADE_NONE",
    "foreign_manager",
    "refused_fields",
    "refused_path",
    "upgrade_type",
]

UPGRADE_NEW_CLUSTER = "NewCluster"
UPGRADE_INCREMENTAL = "NewClusterWithIncrementalUpgrade"
UPGRADE_NONE = "None"
KUBERAY_MANAGER = "ray.io/kuberay-operator"  # the default: the RayService controller's job

_DEPRECATED = "deprecated, KubeRay no longer uses it (kuberay#1685): accepted and ignored"

HANDLED: Mapping[str, str] = {
    "rayClusterConfig": "the spec of the cluster <service>-<hash>; a change is a blue-green "
                        "upgrade, a replica-only change is applied in place; suspend: true "
                        "or another managedBy is refused (the cluster would never be ready)",
    "serveConfigV2": "checked against Ray Serve's schema, deployed to the pending or active "
                     "cluster's Serve",
    "rayClusterDeletionDelaySeconds": "how long an old cluster is kept after the switch "
                                      "(over rayService.deletionDelay)",
    "upgradeStrategy": f"type {UPGRADE_NEW_CLUSTER} (the default) is gitray's blue-green "
                       f"upgrade; {UPGRADE_NONE} never builds a new cluster: Serve changes, "
                       "replicas and appended worker groups apply in place to the active "
                       "cluster, any other cluster change is refused at plan time "
                       f"(gitray.plans.rayservice.inplace); {UPGRADE_INCREMENTAL} moves the "
                       "traffic through a Gateway API HTTPRoute in weight steps from "
                       "clusterUpgradeOptions, analysed per gitray.io/analysis "
                       "(gitray.plans.rayservice.incremental)",
    "excludeHeadPodFromServeSvc": "true: the serve Service selects only worker pods with a "
                                  "healthy Serve proxy (ray.io/node-type=worker), as KubeRay "
                                  "does; refused when the cluster has no worker group",
    "managedBy": f"absent or {KUBERAY_MANAGER} (gitray does that controller's job); another "
                 "manager's RayService is left alone: its plan is a no-op that says so and "
                 "gitray never touches its objects",
    "serveService": "the serve Service follows the template (name, labels, annotations, type, "
                    "ports, ...) and gitray owns its selector "
                    "(gitray.plans.rayservice.serveservice)",
    "serviceUnhealthySecondThreshold": _DEPRECATED,
    "deploymentUnhealthySecondThreshold": _DEPRECATED,
}

REFUSED: Mapping[str, str] = {
    # a field of KubeRay v1.7 (unknown to v1.6.2's CRD), refused by name
    "suspend": "suspending a RayService (KubeRay v1.7) is not supported by gitray; remove "
               "spec.suspend, or remove the RayService from Git to delete its clusters",
}


def refused_path(path: JsonPath) -> bool:
    """Whether a schema error at ``path`` is superseded by the refusal of that field."""
    return len(path) == 2 and path[0] == "spec" and path[1] in REFUSED


def refused_fields(document: YamlDocument, spec: Mapping[str, Any]) -> list[Diagnostic]:
    """A diagnostic for each field (or value) of a RayService spec that gitray refuses."""
    return [Diagnostic(document.locate(path), message)
            for path, message in _refusals(spec)]


def _refusals(spec: Mapping[str, Any]) -> Iterator[tuple[JsonPath, str]]:
    for name in sorted(REFUSED):
        if name in spec:
            yield ("spec", name), f"spec.{name} is not supported: {REFUSED[name]}"
    yield from _upgrade_strategy(spec.get("upgradeStrategy"))
    config = spec.get("rayClusterConfig")
    workers = config.get("workerGroupSpecs") if isinstance(config, Mapping) else None
    if spec.get("excludeHeadPodFromServeSvc") is True and not workers:
        yield (("spec", "excludeHeadPodFromServeSvc"),
               "spec.excludeHeadPodFromServeSvc: true leaves the serve Service without any pod: "
               "rayClusterConfig has no workerGroupSpecs; add a worker group or remove it")
    yield from _cluster_config(spec.get("rayClusterConfig"))


def foreign_manager(spec: Mapping[str, Any]) -> str | None:
    """The other controller a RayService's ``spec.managedBy`` hands it to (None: gitray's)."""
    manager = spec.get("managedBy")
    if isinstance(manager, str) and manager != KUBERAY_MANAGER:
        return manager
    return None


def upgrade_type(spec: Mapping[str, Any]) -> str:
    """``spec.upgradeStrategy.type``, defaulting to NewCluster as KubeRay does."""
    strategy = spec.get("upgradeStrategy")
    kind = strategy.get("type") if isinstance(strategy, Mapping) else None
    return kind if isinstance(kind, str) else UPGRADE_NEW_CLUSTER


def _cluster_config(config: object) -> Iterator[tuple[JsonPath, str]]:
    """RayCluster fields that would leave a RayService's cluster never ready."""
    if not isinstance(config, Mapping):
        return
    # rayClusterConfig.suspend stays accepted: scale benchmarks plan thousands of RayServices
    # whose clusters are suspended (kwok, no pods); an upgrade of one waits and times out.
    manager = config.get("managedBy")
    if manager is not None and manager != KUBERAY_MANAGER:
        yield ("spec", "rayClusterConfig", "managedBy"), (
            f"spec.rayClusterConfig.managedBy {manager!r} is not supported: KubeRay would "
            "leave the RayService's cluster to another controller and gitray would wait for it "
            f"in vain; remove it (or set {KUBERAY_MANAGER!r})")


def _upgrade_strategy(strategy: object) -> Iterator[tuple[JsonPath, str]]:
    if not isinstance(strategy, Mapping):
        return  # absent, or reported by the schema
    kind = strategy.get("type")
    where: JsonPath = ("spec", "upgradeStrategy", "type")
    if kind == UPGRADE_INCREMENTAL:
        yield from options_problems(strategy)
    elif kind is not None and kind not in {UPGRADE_NEW_CLUSTER, UPGRADE_NONE}:
        yield where, (
            f"spec.upgradeStrategy.type {kind!r} is not an upgrade type: write "
            f"{UPGRADE_NEW_CLUSTER}, {UPGRADE_INCREMENTAL} or {UPGRADE_NONE}")
    if "clusterUpgradeOptions" in strategy and kind != UPGRADE_INCREMENTAL:
        yield ("spec", "upgradeStrategy", "clusterUpgradeOptions"), (
            "spec.upgradeStrategy.clusterUpgradeOptions only applies to "
            f"{UPGRADE_INCREMENTAL}; set that type or remove the options")
