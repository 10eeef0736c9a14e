"""Desired workloads x live state -> Plan. Pure, no I/O; ``now`` is passed in.

Ordering rule (one rule, documented): workloads run by wave (lower first); within a wave,
supporting objects before Ray workloads, then RayClusters, RayServices, RayJobs, RayCronJobs; then
namespace and name. Removed workloads are pruned after everything that is applied in their
wave, Ray workloads before the supporting objects they may use.

A workload Git asks for something the live state makes impossible (a cluster change under
``upgradeStrategy.type: None``) fails the whole plan with a ``ValidationError``, as an invalid
revision does: nothing is applied.

Safety rules: a revision with no workloads never prunes (unless ``allowEmpty``); objects in a
namespace outside ``allowedNamespaces`` are never touched; ``prune: false`` keeps removed
workloads and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gitray.core.config import Config
from gitray.core.errors import ValidationError
from gitray.core.model import Diagnostic, Kind, LiveState, ObjectKey, Workload
from gitray.plans.plan import Action, BasisObject, Plan, WorkloadPlan
from gitray.plans.raycluster import plan_object, plan_raycluster
from gitray.plans.rayjob import plan_rayjob
from gitray.plans.rayservice import plan_rayservice

__all__ = ["compute_plan", "order_key"]

_KIND_ORDER = {Kind.RAY_CLUSTER.value: 1, Kind.RAY_SERVICE.value: 2, Kind.RAY_JOB.value: 3,
               Kind.RAY_CRON_JOB.value: 4}


def order_key(plan: WorkloadPlan) -> tuple[int, int, int, str, str]:
    removing = plan.action is Action.DELETE
    kind_rank = _KIND_ORDER.get(plan.key.kind, 0)
    if removing:  # prune Ray workloads before the supporting objects they use
        kind_rank = 5 - kind_rank if kind_rank else 5
    return (plan.wave, int(removing), kind_rank, plan.key.namespace, plan.key.name)


def compute_plan(
    desired: Sequence[Workload],
    live: LiveState,
    config: Config,
    *,
    revision: str,
    against: str,
    now: datetime,
    exact: bool = False,
    label: str = "",
) -> Plan:
    """The plan that brings ``live`` to ``desired``.

    ``exact`` says ``live`` was synthesised from a Git revision (``--against REV``/``empty``),
    so full field diffs are shown; against a real cluster only the fields Git sets compare.
    """
    by_key = {w.key: w for w in desired}
    notes: list[str] = []
    keys = set(by_key)
    removed = sorted(live.owners() - keys)
    if removed and not desired and not config.allow_empty:
        notes.append(
            f"this revision has no workloads: nothing is pruned ({len(removed)} live workload(s)"
            " kept). Set allowEmpty: true to let an empty revision delete everything."
        )
        removed = []
    elif removed and not config.prune:
        notes.append(f"prune is off: {len(removed)} workload(s) removed from Git are kept: "
                     + ", ".join(str(k) for k in removed))
        removed = []
    for key in list(removed):
        if not config.allows(key.namespace):
            notes.append(f"{key} is outside allowedNamespaces: left alone")
            removed.remove(key)

    plans: list[WorkloadPlan] = []
    refused: list[Diagnostic] = []
    for key in sorted(keys | set(removed)):
        try:
            plans.append(_plan_one(key, by_key.get(key), live, config, now, exact))
        except ValidationError as e:  # refused against live state (upgradeStrategy None)
            refused.extend(e.diagnostics)
    if refused:  # all-or-nothing, like an invalid revision: every problem at once
        raise ValidationError(sorted(refused))
    plans.sort(key=order_key)
    basis = tuple(sorted(
        BasisObject(o.kind, o.namespace, o.name, o.resource_version)
        for o in live.objects if o.resource_version
    ))
    return Plan(revision=revision, against=against, basis=basis, workloads=tuple(plans),
                notes=tuple(notes), label=label)


def _plan_one(key: ObjectKey, workload: Workload | None, live: LiveState, config: Config,
              now: datetime, exact: bool) -> WorkloadPlan:
    owned = live.owned_by(key)
    if key.kind == Kind.RAY_SERVICE:
        return plan_rayservice(key, workload, owned, config, now, exact)
    if key.kind == Kind.RAY_CLUSTER:
        return plan_raycluster(key, workload, owned, config, exact)
    if key.kind == Kind.RAY_JOB:
        return plan_rayjob(key, workload, owned, config)
    # a RayCronJob is a definition KubeRay schedules: applied, updated and pruned as written
    return plan_object(key, workload, owned, config, exact)
