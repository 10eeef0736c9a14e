"""Is a saved plan still valid? Pure, no I/O.

``gitray apply plan.json`` applies exactly what was reviewed, or refuses. A plan is stale when
the Git revision moved, when any live object it was computed against changed (resourceVersion)
or vanished, when a managed object appeared that it did not see, or when planning again now
gives different steps (Terraform's "inconsistent final plan" check).
"""

from __future__ import annotations

from gitray.plans.plan import Plan

__all__ = ["stale_reasons"]

_SHOWN = 5


def _short(revision: str) -> str:
    return revision[:21] if revision.startswith("worktree:") else revision[:12]


def _steps(plan: Plan) -> dict[str, list[tuple[str, str]]]:
    return {str(w.key): [(s.type.value, s.target) for s in w.steps] for w in plan.workloads}


def stale_reasons(saved: Plan, revision: str, replanned: Plan) -> list[str]:
    """Why ``saved`` may not be applied now (empty when it may): ``replanned`` is the plan
    computed now, its basis the live objects as they are now."""
    reasons: list[str] = []
    if saved.revision != revision:
        reasons.append(f"the plan is for revision {_short(saved.revision)}, the repository is "
                       f"now at {_short(revision)}")
    seen = {(b.kind, b.namespace, b.name): b.resource_version for b in saved.basis}
    now = {(b.kind, b.namespace, b.name): b.resource_version for b in replanned.basis}
    changed = [k for k, rv in seen.items() if k in now and now[k] != rv]
    gone = [k for k in seen if k not in now]
    new = [k for k in now if k not in seen]
    for label, keys in (("changed", changed), ("disappeared", gone), ("appeared", new)):
        if keys:
            names = ", ".join(f"{k} {ns}/{n}" for k, ns, n in sorted(keys)[:_SHOWN])
            more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
            reasons.append(f"{len(keys)} live object(s) {label} since planning: {names}{more}")
    if not reasons and _steps(saved) != _steps(replanned):
        reasons.append("planning again now gives different steps")
    return reasons

