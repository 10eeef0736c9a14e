"""Capacity pre-flight: does what a plan adds fit the live cluster? Pure, no I/O.

Two independent checks, each refusing the revision, warning in the plan, or off
(``gitray.yaml`` ``capacity.quota`` / ``capacity.nodes``):

- **Quota**: per namespace, what each workload's plan adds while old and new clusters overlap
  (``ResourceChange.while_both``, at minReplicas) against each ResourceQuota's headroom
  (``status.hard - status.used``): ``requests.<r>`` and a bare ``cpu``/``memory``/extended
  resource count pod requests, ``pods`` and ``count/pods`` count pods. ``limits.*`` and scoped
  quotas are not judged here (the server-side dry-run and KubeRay's events report them).
- **Nodes**: every pod a plan creates (the clusters of ``create-cluster`` and ``create-job``,
  at minReplicas) is placed, first fit, largest first, on a node that is schedulable, whose
  taints (NoSchedule, NoExecute) the pod tolerates and whose labels match its
  ``nodeSelector``, within that node's allocatable minus what its running pods request.
  Pods added by an in-place update are judged in total against the free capacity of all
  schedulable nodes. Affinity, topology spread and pod overhead are not modelled.

Workloads are taken in plan order and their demands accumulate: the first that does not fit is
named, with the shortfall. Workloads that free resources never count as freeing them in time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gitray.core.model import Diagnostic, Kind, SourceLocation
from gitray.plans.plan import Plan, WorkloadPlan
from gitray.plans.quantities import Amounts, ResourceChange, format_quantity
from gitray.plans.resources import PodGroup, cluster_pods
from gitray.plans.steptypes import StepType

__all__ = ["NodeRoom", "QuotaRoom", "Shortfall", "check_nodes", "check_quotas",
           "quota_resource"]


@dataclass(frozen=True)
class QuotaRoom:
    """One ResourceQuota: ``hard`` and ``used`` by quota key (``requests.cpu``, ``pods``)."""

    namespace: str
    name: str
    hard: Mapping[str, Fraction] = field(compare=False, hash=False)
    used: Mapping[str, Fraction] = field(compare=False, hash=False)
    scoped: bool = False  # scopes/scopeSelector: applies to some pods only (not judged)


@dataclass(frozen=True)
class NodeRoom:
    """One node: what is free on it (allocatable minus running pods' requests, ``pods``
    included), whether new pods may land there, and its labels and taints."""

    name: str
    free: Mapping[str, Fraction] = field(compare=False, hash=False)
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    taints: tuple[Mapping[str, Any], ...] = field(default=(), compare=False, hash=False)
    schedulable: bool = True


@dataclass(frozen=True, order=True)
class Shortfall:
    """A workload whose change does not fit, and why (one line)."""

    location: SourceLocation
    key: str
    message: str

    def diagnostic(self) -> Diagnostic:
        return Diagnostic(self.location, self.message)


def quota_resource(key: str) -> str | None:
    """The pod resource a quota key limits (``requests.cpu`` -> ``cpu``, ``count/pods`` ->
    ``pods``), or None for what this check does not judge (``limits.*``, storage, counts of
    other objects)."""
    if key in {"pods", "count/pods"}:
        return "pods"
    if "storage" in key:
        return None
    if key.startswith("requests."):
        return key.removeprefix("requests.")
    if key.startswith(("limits.", "count/")) or "storage" in key or key in {
            "services", "secrets", "configmaps", "persistentvolumeclaims",
            "replicationcontrollers", "resourcequotas", "services.loadbalancers",
            "services.nodeports"}:
        return None
    return key  # cpu, memory and extended resources written bare mean requests


def _wanted(change: ResourceChange) -> Amounts:
    """What a workload's plan adds at its peak, at minReplicas (never negative)."""
    return {k: r.low for k, r in change.while_both.items() if r.low > 0}


def _advice(wp: WorkloadPlan, change: ResourceChange) -> str:
    if wp.key.kind == Kind.RAY_SERVICE.value and change.strategy == "blue-green":
        return ("use upgradeStrategy NewClusterWithIncrementalUpgrade (old and new clusters "
                "resized step by step) or None (the cluster updated in place), lower the "
                "requests, or free capacity")
    return "lower the requests or free capacity"


def _amounts(amounts: Mapping[str, Fraction], sign: str = "") -> str:
    return ", ".join(f"{sign}{format_quantity(k, v)} {k}" for k, v in sorted(amounts.items()))


def _what(wp: WorkloadPlan, change: ResourceChange) -> str:
    overlap = " while both clusters run" if change.overlaps else ""
    return f"{change.strategy} needs {_amounts(_wanted(change), '+')}{overlap}"


def _where(wp: WorkloadPlan) -> SourceLocation:
    return wp.source or SourceLocation(f"{wp.key.namespace}/{wp.key.kind}/{wp.key.name}")


def check_quotas(plan: Plan, quotas: Iterable[QuotaRoom]) -> list[Shortfall]:
    """The workloads whose requests exceed what a ResourceQuota of their namespace has left."""
    room: dict[tuple[str, str], dict[str, Fraction]] = {}
    for q in quotas:
        if q.scoped:
            continue
        for key, hard in q.hard.items():
            resource = quota_resource(key)
            if resource is not None:
                headroom = hard - q.used.get(key, Fraction(0))
                slot = room.setdefault((q.namespace, q.name), {})
                slot[resource] = min(headroom, slot.get(resource, headroom))
    out: list[Shortfall] = []
    for wp in plan.workloads:
        change = wp.resources
        if change is None or not _wanted(change):
            continue
        wanted = _wanted(change)
        for (ns, name), left in sorted(room.items()):
            if ns != wp.key.namespace:
                continue
            short = {k: v - left[k] for k, v in wanted.items() if k in left and v > left[k]}
            if short:
                have = {k: max(left[k], Fraction(0)) for k in short}
                out.append(Shortfall(
                    _where(wp), str(wp.key),
                    f"{wp.key.kind} {wp.key.namespace}/{wp.key.name} does not fit: "
                    f"{_what(wp, change)}; ResourceQuota {name} has {_amounts(have)} left "
                    f"(short of {_amounts(short)}): {_advice(wp, change)}"))
                break
            for k, v in wanted.items():  # the next workload sees what this one takes
                if k in left:
                    left[k] -= v
    return out


def _tolerates(pod_spec: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if taint.get("effect") not in {"NoSchedule", "NoExecute"}:
        return True  # PreferNoSchedule only prefers
    for t in pod_spec.get("tolerations") or []:
        if not isinstance(t, Mapping):
            continue
        if t.get("effect") not in (None, "", taint.get("effect")):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("operator", "Equal") == "Equal" \
                and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _eligible(node: NodeRoom, pod_spec: Mapping[str, Any]) -> bool:
    if not node.schedulable:
        return False
    selector = pod_spec.get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    return all(_tolerates(pod_spec, t) for t in node.taints)


def _fits(free: Mapping[str, Fraction], pod: Mapping[str, Fraction]) -> bool:
    return all(free.get(k, Fraction(0)) >= v for k, v in pod.items())


def _new_pods(wp: WorkloadPlan) -> list[PodGroup]:
    groups: list[PodGroup] = []
    for step in wp.steps:
        if step.type not in {StepType.CREATE_CLUSTER, StepType.CREATE_JOB}:
            continue
        manifest = step.params.get("manifest")
        spec = manifest.get("spec") if isinstance(manifest, Mapping) else None
        if isinstance(spec, Mapping) and step.type is StepType.CREATE_JOB:
            spec = spec.get("rayClusterSpec")
        if isinstance(spec, Mapping):
            groups += [g for g in cluster_pods(spec) if g.low]
    return groups


def _per_pod(group: PodGroup) -> dict[str, Fraction]:
    return {**group.per_pod, "pods": Fraction(1)}


def check_nodes(plan: Plan, nodes: Sequence[NodeRoom]) -> list[Shortfall]:
    """The workloads whose new pods fit on no node (first fit, largest pods first)."""
    free = {n.name: dict(n.free) for n in nodes}
    out: list[Shortfall] = []
    for wp in plan.workloads:
        change = wp.resources
        if change is None or not _wanted(change):
            continue
        groups = _new_pods(wp)
        trial = {name: dict(f) for name, f in free.items()}
        pods = sorted(((g, _per_pod(g)) for g in groups for _ in range(g.low)),
                      key=lambda gp: sorted(gp[1].items(), key=lambda kv: kv[0]),
                      reverse=True)
        unplaced: list[PodGroup] = []
        for group, need in pods:
            for node in nodes:
                room = trial[node.name]
                if _eligible(node, group.pod_spec) and _fits(room, need):
                    for k, v in need.items():
                        room[k] = room.get(k, Fraction(0)) - v
                    break
            else:
                unplaced.append(group)
        rest = _wanted(change)  # what in-place growth adds beyond the new clusters' pods
        if not groups:
            total = {k: sum((trial[n.name].get(k, Fraction(0)) for n in nodes
                             if n.schedulable), Fraction(0)) for k in rest}
            short = {k: v - total[k] for k, v in rest.items() if v > total[k]}
            if short:
                out.append(Shortfall(
                    _where(wp), str(wp.key),
                    f"{wp.key.kind} {wp.key.namespace}/{wp.key.name} does not fit: "
                    f"{_what(wp, change)}; the schedulable nodes have "
                    f"{_amounts({k: max(total[k], Fraction(0)) for k in short})} free "
                    f"(short of {_amounts(short)}): {_advice(wp, change)}"))
                continue
            for k, v in rest.items():  # taken from the nodes, largest free first
                todo = v
                for node in sorted(nodes, key=lambda n: -trial[n.name].get(k, Fraction(0))):
                    take = min(todo, max(trial[node.name].get(k, Fraction(0)), Fraction(0)))
                    trial[node.name][k] = trial[node.name].get(k, Fraction(0)) - take
                    todo -= take
            free = trial
            continue
        if unplaced:
            first = unplaced[0]
            best = _roomiest(nodes, trial, first)
            out.append(Shortfall(
                _where(wp), str(wp.key),
                f"{wp.key.kind} {wp.key.namespace}/{wp.key.name} does not fit: "
                f"{_what(wp, change)}; {len(unplaced)} of {len(pods)} new pods fit on no "
                f"node: a {first.name} pod requests {_amounts(_per_pod(first))}, {best}: "
                f"{_advice(wp, change)}"))
            continue
        free = trial
    return out


def _roomiest(nodes: Sequence[NodeRoom], free: Mapping[str, Mapping[str, Fraction]],
              group: PodGroup) -> str:
    need = _per_pod(group)
    eligible = [n for n in nodes if _eligible(n, group.pod_spec)]
    if not eligible:
        return (f"no node takes it ({len(nodes)} node(s): unschedulable, taints not "
                "tolerated or nodeSelector not matched)")

    def short(n: NodeRoom) -> tuple[Fraction, ...]:
        room = free[n.name]
        return tuple(max(v - room.get(k, Fraction(0)), Fraction(0)) / v
                     for k, v in sorted(need.items()) if v)

    node = min(eligible, key=lambda n: (sum(short(n)), n.name))
    room = free[node.name]
    have = {k: max(room.get(k, Fraction(0)), Fraction(0)) for k in need}
    missing = {k: v - have[k] for k, v in need.items() if v > have[k]}
    return (f"the roomiest node {node.name} has {_amounts(have)} free "
            f"(short of {_amounts(missing)})")
