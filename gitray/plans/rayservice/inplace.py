"""``upgradeStrategy.type: None``: which cluster changes apply in place. Pure, no I/O.

Under ``None`` KubeRay never builds a new cluster for a RayService. Its RayService controller
updates the running cluster only when the new ``rayClusterConfig`` equals the cluster's up to
the fields its hash leaves out (replicas, min/maxReplicas, workersToDelete, suspend) *or* adds
worker groups at the end of ``workerGroupSpecs``; any other change is ignored, silently. The
RayCluster controller would not apply such a change to running pods either: a template change
(image, resources, rayStartParams, ...) only reaches pods created later, and
``rayClusterConfig.upgradeStrategy: Recreate`` is not allowed for a RayService's cluster.

gitray does the same in place, and refuses the rest by name instead of ignoring it: applying an
image change to the RayCluster object would show a spec its pods do not run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gitray.core.model import ANN_CLUSTER_HASH, JSON, LiveObject
from gitray.plans.diff import full_changes, subset_changes
from gitray.plans.inputs import ANN_INPUTS, changed_inputs
from gitray.plans.names import blank_autoscaler_fields, cluster_hash
from gitray.plans.plan import FieldChange

__all__ = ["InPlace", "Verdict", "judge_in_place", "live_cluster_hash", "refusal_message"]


class InPlace(StrEnum):
    SAME = "same"          # only fields outside the cluster hash differ (replicas, ...)
    APPENDED = "appended"  # worker groups added at the end, the rest unchanged
    REFUSED = "refused"    # anything else: KubeRay would ignore it; gitray refuses it


@dataclass(frozen=True)
class Verdict:
    kind: InPlace
    changes: tuple[FieldChange, ...] = ()  # REFUSED: the fields that changed (display)
    appended: tuple[str, ...] = ()  # APPENDED: the new groups' names


def live_cluster_hash(active: LiveObject) -> str:
    """The hash of the config the active cluster runs (written by gitray at each apply)."""
    return active.annotations.get(ANN_CLUSTER_HASH, "")


def _groups(spec: Mapping[str, JSON]) -> list[Any]:
    groups = spec.get("workerGroupSpecs")
    return list(groups) if isinstance(groups, list) else []


def judge_in_place(desired: Mapping[str, JSON], active: LiveObject, exact: bool) -> Verdict:
    """How ``desired`` (a rayClusterConfig) reaches the running ``active`` cluster."""
    running = live_cluster_hash(active)
    if cluster_hash(desired) == running:
        return Verdict(InPlace.SAME)
    live_groups = len(_groups(active.spec))
    wanted = _groups(desired)
    if len(wanted) > live_groups:
        prefix = dict(desired)
        prefix["workerGroupSpecs"] = wanted[:live_groups]
        if cluster_hash(prefix) == running:
            names = tuple(str(g.get("groupName", "?")) if isinstance(g, Mapping) else "?"
                          for g in wanted[live_groups:])
            return Verdict(InPlace.APPENDED, appended=names)
    compare = full_changes if exact else subset_changes
    changes = compare(blank_autoscaler_fields(desired), blank_autoscaler_fields(active.spec),
                      "spec.rayClusterConfig")
    return Verdict(InPlace.REFUSED, changes=changes)


def refusal_message(cluster: str, verdict: Verdict) -> str:
    """One line naming the fields that changed and what to do."""
    shown = [_shown(c) for c in verdict.changes[:3]]
    more = len(verdict.changes) - len(shown)
    what = ", ".join(shown) + (f" and {more} more" if more > 0 else "") if shown else (
        "spec.rayClusterConfig (a field was removed or a worker group changed)")
    return (f"spec.upgradeStrategy.type: None: {what} cannot be applied in place to the running "
            f"cluster {cluster} (KubeRay applies only replicas and worker groups appended at the "
            "end) and None never builds a new cluster; revert the change, or remove "
            "upgradeStrategy (NewCluster) for a blue-green upgrade")


def _shown(change: FieldChange) -> str:
    if change.path.endswith(f"annotations.{ANN_INPUTS}"):  # digests are never shown
        names = changed_inputs(str(change.before or ""), str(change.after or ""))
        return f"a change of {' and '.join(names)} (which its pods use)"
    return f"{change.path} ({_short(change.before)} -> {_short(change.after)})"


def _short(value: JSON) -> str:
    if isinstance(value, Mapping | list):
        return "{...}" if isinstance(value, Mapping) else "[...]"
    text = "absent" if value is None else repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."
