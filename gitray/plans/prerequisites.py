"""Why a plan cannot be applied as planned, before anything is changed. Pure, no I/O.

Decided from a plan's steps (never from its display-only notes): objects of an apiVersion the
API server does not serve. An incremental RayService upgrade writes a Gateway and an HTTPRoute
(``gateway.networking.k8s.io/v1``), and ``gitray plan`` runs in CI against clusters that may
lack the Gateway API CRDs. The plan is still made (the live state of those kinds counts as
empty) with a note naming the first step that would fail; ``gitray apply`` and ``gitray sync``
refuse such a workload whole, before any change.
"""

from __future__ import annotations

from collections.abc import Collection

from gitray.core.model import ObjectKey
from gitray.plans.plan import Plan, Step, WorkloadPlan
from gitray.plans.rayservice.gateway import GATEWAY_API_VERSION

__all__ = ["OPTIONAL_APIS", "absent_api_notes", "blocked_workloads", "needed_apis",
           "step_api_version"]

# apiVersions a plan may need that an API server does not serve by default: what they are and
# how to get them.
OPTIONAL_APIS = {
    GATEWAY_API_VERSION: ("the Gateway API CRDs",
                          "install the Gateway API CRDs (standard channel) and a Gateway "
                          "controller, or use upgradeStrategy NewCluster"),
}


def step_api_version(step: Step) -> str | None:
    """The apiVersion of the object ``step`` writes or deletes, when it names one (apply-object
    and shift-traffic carry a manifest, delete-object an apiVersion)."""
    manifest = step.params.get("manifest")
    if isinstance(manifest, dict) and isinstance(manifest.get("apiVersion"), str):
        return str(manifest["apiVersion"])
    api = step.params.get("apiVersion")
    return api if isinstance(api, str) else None


def needed_apis(plan: Plan) -> frozenset[str]:
    """The optional apiVersions (``OPTIONAL_APIS``) some step of ``plan`` needs."""
    return frozenset(api for w in plan.workloads for s in w.steps
                     if (api := step_api_version(s)) in OPTIONAL_APIS)


def _first_failing(w: WorkloadPlan, absent: Collection[str]) -> tuple[int, Step, str] | None:
    for i, step in enumerate(w.steps, 1):
        api = step_api_version(step)
        if api is not None and api in absent:
            return i, step, api
    return None


def _absent_reason(w: WorkloadPlan, absent: Collection[str], consequence: str) -> str | None:
    found = _first_failing(w, absent)
    if found is None:
        return None
    i, step, api = found
    what, fix = OPTIONAL_APIS.get(api, (f"the kinds of {api}", f"install the CRDs of {api}"))
    return (f"{what} ({api}) are not installed: applying this plan will fail at step "
            f"{i}/{len(w.steps)} ({step.type.value} {step.target}){consequence}: {fix}")


def absent_api_notes(plan: Plan, absent: Collection[str]) -> list[str]:
    """Plan notes, one per workload that needs an apiVersion in ``absent``."""
    notes = []
    for w in plan.workloads:
        reason = _absent_reason(w, absent, ", so gitray apply and gitray sync refuse it "
                                           "before any change")
        if reason:
            notes.append(f"{w.key}: {reason}")
    return notes


def blocked_workloads(plan: Plan, absent: Collection[str]) -> dict[ObjectKey, list[str]]:
    """Each workload of ``plan`` that must not be started, with why: its steps need an
    apiVersion in ``absent``."""
    return {w.key: [missing] for w in plan.workloads
            if (missing := _absent_reason(w, absent, ""))}
