"""Capacity pre-flight against the live cluster: read ResourceQuotas and nodes, judge the plan
(``gitray.plans.capacity``), and turn shortfalls into plan errors or notes. I/O, read-only.

Reading nodes and every pod needs cluster-wide ``list`` on ``nodes`` and ``pods``, which the
least-privilege RBAC of ``deploy/`` does not grant (see ``deploy/base/rbac.yaml``): without it
the node check is skipped with a note saying so, never passed silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any

from gitray.core.config import CapacityMode, Config
from gitray.core.errors import ForbiddenError
from gitray.core.model import Diagnostic
from gitray.k8s.client import Kube
from gitray.plans.capacity import NodeRoom, QuotaRoom, Shortfall, check_nodes, check_quotas
from gitray.plans.plan import Plan
from gitray.plans.quantities import Amounts, parse_quantity
from gitray.plans.resources import pod_requests

__all__ = ["preflight", "read_nodes", "read_quotas"]


def _quantities(values: Mapping[str, Any] | None) -> Amounts:
    out: Amounts = {}
    for k, v in (values or {}).items():
        try:
            out[str(k)] = parse_quantity(v)
        except ValueError:
            continue
    return out


def read_quotas(kube: Kube, namespaces: Iterable[str]) -> list[QuotaRoom]:
    out = []
    for ns in sorted(set(namespaces)):
        items, _ = kube.list("v1", "ResourceQuota", namespace=ns)
        for q in items:
            spec, status = q.get("spec") or {}, q.get("status") or {}
            out.append(QuotaRoom(ns, q["metadata"]["name"],
                                 _quantities(status.get("hard") or spec.get("hard")),
                                 _quantities(status.get("used")),
                                 bool(spec.get("scopes") or spec.get("scopeSelector"))))
    return out


def read_nodes(kube: Kube) -> list[NodeRoom]:
    """Every node with allocatable minus what the pods bound to it (not finished) request."""
    requested: dict[str, Amounts] = {}
    for page, _ in kube.list_pages("v1", "Pod"):
        for pod in page:
            spec = pod.get("spec") or {}
            node = spec.get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if not node or phase in {"Succeeded", "Failed"}:
                continue
            need = pod_requests(spec)
            for k, v in _quantities(spec.get("overhead")).items():
                need[k] = need.get(k, Fraction(0)) + v
            need["pods"] = Fraction(1)
            total = requested.setdefault(str(node), {})
            for k, v in need.items():
                total[k] = total.get(k, Fraction(0)) + v
    nodes, _ = kube.list("v1", "Node")
    out = []
    for n in nodes:
        name = n["metadata"]["name"]
        allocatable = _quantities((n.get("status") or {}).get("allocatable"))
        used = requested.get(name, {})
        free = {k: v - used.get(k, Fraction(0)) for k, v in allocatable.items()}
        spec = n.get("spec") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or [])
        out.append(NodeRoom(name, free, dict(n["metadata"].get("labels") or {}),
                            tuple(spec.get("taints") or ()),
                            ready and not spec.get("unschedulable")))
    return out


def preflight(kube: Kube, plan: Plan, config: Config) -> tuple[Plan, list[Diagnostic]]:
    """``plan`` with a note per shortfall set to warn, and the shortfalls set to refuse (plan
    errors: nothing is applied). Only plans that add resources are checked."""
    adds = [w for w in plan.workloads if w.resources is not None
            and any(r.low > 0 for r in w.resources.while_both.values())]
    if not adds:
        return plan, []
    settings = config.capacity
    refused: list[Shortfall] = []
    notes: list[str] = []

    def judge(mode: CapacityMode, found: list[Shortfall]) -> None:
        if mode is CapacityMode.REFUSE:
            refused.extend(found)
        else:
            notes.extend(f"warning: {s.location}: {s.message}" for s in found)

    if settings.quota is not CapacityMode.OFF:
        try:
            quotas = read_quotas(kube, {w.key.namespace for w in adds})
        except ForbiddenError as e:
            notes.append(f"ResourceQuota headroom not checked: {e}")
        else:
            judge(settings.quota, check_quotas(plan, quotas))
    if settings.nodes is not CapacityMode.OFF:
        try:
            nodes = read_nodes(kube)
        except ForbiddenError as e:
            notes.append(f"node capacity not checked: {e}")
        else:
            judge(settings.nodes, check_nodes(plan, nodes))
    errors = sorted({s.diagnostic() for s in refused})
    return (replace(plan, notes=(*plan.notes, *notes)) if notes else plan), errors
