"""RayCluster and supporting-object planning: apply in place, prune when removed. Pure.

A change is seen two ways: the spec-hash annotation (what gitray last applied) catches any
edit in Git, including a removed field; a subset comparison of the fields Git sets catches
drift in the cluster. Fields Git does not set (server defaults, operator-owned status) and
worker ``replicas`` under in-tree autoscaling are never compared.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from gitray.core.config import Config
from gitray.core.model import (
    ANN_SPEC_HASH,
    ANN_TEMPLATE_HASH,
    LiveObject,
    ObjectKey,
    Workload,
)
from gitray.plans.diff import full_changes, subset_changes
from gitray.plans.manifests import cluster_manifest, object_manifest
from gitray.plans.names import (
    UPGRADE_RECREATE,
    autoscaling_enabled,
    blank_autoscaler_fields,
    cluster_spec_hash,
    object_spec_hash,
    recreates_pods,
    template_hash,
    template_view,
)
from gitray.plans.plan import Action, FieldChange, WorkloadPlan
from gitray.plans.steps import StepList, removal_plan
from gitray.plans.steptypes import StepType

__all__ = ["TEMPLATE_WARNING", "compared_content", "plan_object", "plan_raycluster",
           "secret_as_stored"]


TEMPLATE_WARNING = (
    "the pod template changed, and KubeRay applies a template to pods it creates later only: "
    "the running pods keep the old one until they are recreated; set "
    f"spec.upgradeStrategy.type: {UPGRADE_RECREATE} to have KubeRay recreate them on such a "
    "change, or delete the pods")


def _template_changed(desired: Mapping[str, Any], live: LiveObject) -> bool:
    """Whether the pods KubeRay would create differ from the running ones' template."""
    applied = live.annotations.get(ANN_TEMPLATE_HASH)
    if applied is not None:  # what gitray last applied
        return applied != template_hash(desired)
    return bool(subset_changes(template_view(desired), template_view(live.spec), "spec"))


def _compared_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    if autoscaling_enabled(spec):
        return blank_autoscaler_fields(spec, bounds=False)
    return dict(spec)


def plan_raycluster(
    key: ObjectKey,
    workload: Workload | None,
    owned: tuple[LiveObject, ...],
    config: Config,
    exact: bool,
) -> WorkloadPlan:
    live = next((o for o in owned if o.kind == key.kind and o.name == key.name), None)
    if workload is None:
        return removal_plan(key, owned, StepType.DELETE_CLUSTER)
    steps = StepList()

    spec_hash = cluster_spec_hash(workload.spec)  # the manifest's annotation, unbuilt
    auto = autoscaling_enabled(workload.spec)
    if live is None:
        steps.add(StepType.CREATE_CLUSTER, key.name,
                  {"manifest": cluster_manifest(workload, config.instance)},
                  f"create RayCluster {key.name}")
        return WorkloadPlan(key, Action.CREATE, workload.wave, steps.build(), workload.source,
                            spec_hash)

    desired, current = _compared_spec(workload.spec), _compared_spec(live.spec)
    drift = subset_changes(desired, current, "spec")
    changes = full_changes(desired, current, "spec") if exact else drift
    changed_in_git = live.annotations.get(ANN_SPEC_HASH) != spec_hash
    notes: list[str] = []
    if auto:
        notes.append("worker replicas are owned by the Ray autoscaler and not compared")
    if changed_in_git or drift:
        reason = "spec changed in Git" if changed_in_git else "the cluster drifted from Git"
        params: dict[str, Any] = {"manifest": cluster_manifest(workload, config.instance),
                                  "preserveLiveReplicas": auto}
        if _template_changed(workload.spec, live):
            if recreates_pods(workload.spec):
                params["recreatePods"] = True
            else:
                params["newPodsOnly"] = True
                notes.append(f"WARNING: {TEMPLATE_WARNING}")
        steps.add(StepType.UPDATE_CLUSTER, key.name, params,
                  f"{reason}: update RayCluster {key.name} in place")
        if not changes:
            changes = (FieldChange("metadata.annotations", "(older gitray-applied spec)",
                                   "(spec from this revision)"),)
    return WorkloadPlan(key, Action.UPDATE if steps else Action.NOOP, workload.wave,
                        steps.build(), workload.source, spec_hash, tuple(notes),
                        changes if steps else ())


def compared_content(body: Mapping[str, Any]) -> dict[str, Any]:
    """What of an object's body is compared: all but apiVersion, kind, metadata and status; a
    Secret's ``stringData`` as the API server stores it (base64 in ``data``), so a Secret
    written with ``stringData`` does not differ from its live form for ever."""
    content = {k: v for k, v in body.items()
               if k not in {"apiVersion", "kind", "metadata", "status"}}
    if body.get("kind") == "Secret":
        content = secret_as_stored(content)
    return content


def secret_as_stored(content: Mapping[str, Any]) -> dict[str, Any]:
    """A Secret's ``data`` and ``stringData`` merged as the API server stores them: one
    ``data`` map of canonical base64 (``stringData`` wins on a key both set)."""
    out = {k: v for k, v in content.items() if k not in {"data", "stringData"}}
    data: dict[str, Any] = {}
    for key, value in (content.get("data") or {}).items():
        data[key] = _canonical_base64(value)
    for key, value in (content.get("stringData") or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode() if value is not None \
            else None
    if data or "data" in content or "stringData" in content:
        out["data"] = data
    return out


def _canonical_base64(value: Any) -> Any:
    """``value`` re-encoded as the API server returns it (it may be written with line
    breaks or without padding); left as it is when it is not base64 (the server refuses it)."""
    if not isinstance(value, str):
        return value
    text = "".join(value.split())
    try:
        return base64.b64encode(base64.b64decode(text + "=" * (-len(text) % 4),
                                                 validate=True)).decode()
    except ValueError:
        return value


def plan_object(
    key: ObjectKey,
    workload: Workload | None,
    owned: tuple[LiveObject, ...],
    config: Config,
    exact: bool,
) -> WorkloadPlan:
    """A supporting object (ConfigMap, ServiceAccount, ...): server-side apply, prune."""
    live = next((o for o in owned if o.kind == key.kind and o.name == key.name), None)
    if workload is None:
        return removal_plan(key, owned, StepType.DELETE_OBJECT)
    steps = StepList()
    spec_hash = object_spec_hash(workload.manifest)
    if live is None:
        steps.add(StepType.APPLY_OBJECT, key.name,
                  {"manifest": object_manifest(workload, config.instance)},
                  f"create {key.kind} {key.name}")
        return WorkloadPlan(key, Action.CREATE, workload.wave, steps.build(), workload.source,
                            spec_hash)
    desired = compared_content(workload.manifest)
    current = compared_content(live.body)
    drift = subset_changes(desired, current)
    changes = full_changes(desired, current) if exact else drift
    if live.annotations.get(ANN_SPEC_HASH) != spec_hash or drift:
        steps.add(StepType.APPLY_OBJECT, key.name,
                  {"manifest": object_manifest(workload, config.instance)},
                  f"update {key.kind} {key.name}")
    return WorkloadPlan(key, Action.UPDATE if steps else Action.NOOP, workload.wave,
                        steps.build(), workload.source, spec_hash, (),
                        changes if steps else ())
