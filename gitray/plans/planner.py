"""Desired workloads x live state -> Plan. Pure, no I/O; ``now`` is passed in.

Ordering rule (one rule, documented): workloads run by wave (lower first); within a wave,
supporting objects before Ray workloads, then RayClusters, RayServices, RayJobs, RayCronJobs; then
namespace and name. Removed workloads are pruned after everything that is applied in their
wave, Ray workloads before the supporting objects they may use.

A workload Git asks for something the live state makes impossible (a cluster change under
``upgradeStrategy.type: None``) fails the whole plan with a ``ValidationError``, as an invalid
revision does: nothing is applied.

A workload whose steps need an apiVersion the API server does not serve (an incremental
upgrade's Gateway and HTTPRoute without the Gateway API CRDs) is still planned, with a note
naming the first step that would fail (``gitray.plans.prerequisites``).

Safety rules: a revision with no workloads never prunes (unless ``allowEmpty``); objects in a
namespace outside ``allowedNamespaces`` are never touched; ``prune: false`` keeps removed
workloads and says so; so does ``gitray.io/prune: disabled`` on any live object of a removed
workload (set in Git before it left, or by hand): the workload is the unit, all of it is kept.

Planning in batches (:class:`Planner`): a workload's plan depends only on its own desired
manifest and the live objects it owns, and everything a workload owns lives in its namespace.
So the live state may be given one namespace (or a few) at a time and freed after each:
memory is bounded by the largest batch, and the plan is the same as planning everything at once
(:func:`compute_plan` is the one-batch case).

Planning a part (``owns``): a replica of a sharded ``gitray sync`` plans only the workloads of
its shards. The revision is still judged whole (an empty revision, the inputs a workload's pods
read from other workloads), but only the owned workloads and the live objects they own are
planned: their plans are the ones planning everything would give them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from gitray.core.config import Config
from gitray.core.errors import ValidationError
from gitray.core.livestore import batch_namespace
from gitray.core.model import (
    ANN_PRUNE,
    PRUNE_DISABLED,
    Diagnostic,
    Kind,
    LiveObject,
    LiveState,
    ObjectKey,
    Workload,
)
from gitray.plans.freeze import frozen_workloads, with_freeze_notes
from gitray.plans.inputs import explain_inputs, with_inputs
from gitray.plans.origin import with_origin
from gitray.plans.plan import Action, BasisObject, Plan, WorkloadPlan
from gitray.plans.prerequisites import absent_api_notes
from gitray.plans.raycluster import plan_object, plan_raycluster
from gitray.plans.rayjob import plan_rayjob
from gitray.plans.rayservice.planner import plan_rayservice
from gitray.plans.resources import workload_resources
from gitray.plans.sensitive import redact_plan, rules_for

__all__ = ["Planner", "compute_plan", "order_key", "prune_disabled"]

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
    absent_apis: frozenset[str] = frozenset(),
    remembered: Mapping[ObjectKey, Mapping[str, str]] | None = None,
    owns: Callable[[ObjectKey], bool] | None = None,
) -> Plan:
    """The plan that brings ``live`` to ``desired``.

    ``exact`` says ``live`` was synthesised from a Git revision (``--against REV``/``empty``),
    so full field diffs are shown; against a real cluster only the fields Git sets compare.
    ``absent_apis``: apiVersions the API server does not serve (their live objects count as
    none; a workload whose steps need them gets a note). ``remembered``: per RayJob, the runs
    gitray started (name -> outcome, from the run records): a remembered run that is gone
    stays done. Absent for previews that read no run records (``--against empty|REV``).
    ``owns``: plan only the workloads it says yes to (a shard's part; all when None).
    """
    planner = Planner(desired, config, now=now, exact=exact, absent_apis=absent_apis,
                      remembered=remembered or {}, owns=owns)
    namespaces = {w.key.namespace for w in desired}
    namespaces |= {batch_namespace(o.owner, o.namespace) for o in live.objects}
    planner.add(namespaces, live)
    return planner.finish(revision=revision, against=against, label=label)


class Planner:
    """Plans ``desired`` against live state given in batches of namespaces.

    :meth:`add` plans every workload of its namespaces (those in Git and those only the live
    state still has) and keeps only the resulting plans and the basis; :meth:`finish` plans
    the namespaces no batch covered (against nothing live) and assembles the plan. ``owns``:
    only the workloads it says yes to are planned (in Git or only live; all when None).
    """

    def __init__(self, desired: Sequence[Workload], config: Config, *, now: datetime,
                 exact: bool = False, absent_apis: frozenset[str] = frozenset(),
                 remembered: Mapping[ObjectKey, Mapping[str, str]] | None = None,
                 owns: Callable[[ObjectKey], bool] | None = None) -> None:
        self._config, self._now, self._exact = config, now, exact
        self._remembered = remembered or {}
        self._absent_apis = absent_apis
        self._owns = owns or (lambda _key: True)
        self._by_ns: dict[str, dict[ObjectKey, Workload]] = {}
        for w in with_inputs(desired):  # what the pods use is part of the spec (of every
            if self._owns(w.key):  # workload: a mounted ConfigMap may be another's part)
                self._by_ns.setdefault(w.key.namespace, {})[w.key] = w
        # an empty revision prunes nothing unless allowed; prune: false never prunes
        self._empty = not desired
        self._prune = (not self._empty or config.allow_empty) and config.prune
        self._done: set[str] = set()
        self._plans: list[WorkloadPlan] = []
        self._refused: list[Diagnostic] = []
        self._removed: list[ObjectKey] = []  # live workloads Git no longer has (for notes)
        self._kept: list[tuple[ObjectKey, LiveObject]] = []  # gitray.io/prune: disabled
        self._basis: list[BasisObject] = []

    def add(self, namespaces: Collection[str], live: LiveState) -> None:
        """Plan the workloads of ``namespaces`` against ``live``, which must hold every live
        object they own (objects of other namespaces count only for the basis)."""
        batch = set(namespaces)
        if batch & self._done:
            raise ValueError(f"namespaces planned twice: {sorted(batch & self._done)}")
        self._done |= batch
        self._basis += (BasisObject(o.kind, o.namespace, o.name, o.resource_version)
                        for o in live.objects if o.resource_version)
        desired: dict[ObjectKey, Workload] = {}
        for ns in batch:
            desired.update(self._by_ns.get(ns, {}))
        removed = sorted(k for k in live.owners()
                         if k.namespace in batch and k not in desired and self._owns(k))
        self._removed += removed
        pruned = []
        for k in removed:
            if not (self._prune and self._config.allows(k.namespace)):
                continue
            opted_out = prune_disabled(live.owned_by(k))
            if opted_out is not None:
                self._kept.append((k, opted_out))
            else:
                pruned.append(k)
        for key in sorted([*desired, *pruned]):
            try:
                self._plans.append(_plan_one(key, desired.get(key), live, self._config,
                                             self._now, self._exact,
                                             self._remembered.get(key, {})))
            except ValidationError as e:  # refused against live state (upgradeStrategy None)
                self._refused.extend(e.diagnostics)

    def finish(self, *, revision: str, against: str, label: str = "") -> Plan:
        rest = set(self._by_ns) - self._done
        if rest:
            self.add(rest, LiveState())
        if self._refused:  # all-or-nothing, like an invalid revision: every problem at once
            raise ValidationError(sorted(self._refused))
        plans = sorted(self._plans, key=lambda p: p.key)
        plans.sort(key=order_key)
        plan = Plan(revision=revision, against=against, basis=tuple(sorted(self._basis)),
                    workloads=tuple(plans), label=label)
        # e.g. no Gateway API CRDs: still a plan (CI plans against such clusters), with a note
        notes = self._notes() + absent_api_notes(plan, self._absent_apis)
        # held now by a freeze window: said on the workload (sync and apply hold it)
        held = frozen_workloads(plan, self._config.freeze_windows, self._now)
        return replace(with_freeze_notes(plan, held), notes=tuple(notes))

    def _notes(self) -> list[str]:
        removed = sorted(self._removed)
        if not removed:
            return []
        if self._empty and not self._config.allow_empty:
            return [f"this revision has no workloads: nothing is pruned ({len(removed)} live "
                    "workload(s) kept). Set allowEmpty: true to let an empty revision delete "
                    "everything."]
        if not self._config.prune:
            return [f"prune is off: {len(removed)} workload(s) removed from Git are kept: "
                    + ", ".join(str(k) for k in removed)]
        kept = [f"{key} was removed from Git but is kept: {ANN_PRUNE}: {PRUNE_DISABLED} on "
                f"{obj.kind} {obj.name}"
                for key, obj in sorted(self._kept, key=lambda t: t[0])]
        return kept + [f"{key} is outside allowedNamespaces: left alone"
                       for key in removed if not self._config.allows(key.namespace)]


def prune_disabled(owned: Collection[LiveObject]) -> LiveObject | None:
    """The first of a workload's live objects that opts out of pruning, if any."""
    return next((o for o in sorted(owned, key=lambda o: (o.kind, o.name))
                 if o.annotations.get(ANN_PRUNE) == PRUNE_DISABLED), None)


def _plan_one(key: ObjectKey, workload: Workload | None, live: LiveState, config: Config,
              now: datetime, exact: bool, remembered: Mapping[str, str]) -> WorkloadPlan:
    # no sensitive value (Secret data, sensitiveFields) leaves the planner
    wp = explain_inputs(_plan_kind(key, workload, live, config, now, exact, remembered))
    wp = replace(wp, resources=workload_resources(key.name, wp.steps, live.owned_by(key)))
    # a rendered workload: what it was rendered from, and which values line a change reads
    return with_origin(redact_plan(wp, rules_for(key.kind, config.sensitive_fields)), workload)


def _plan_kind(key: ObjectKey, workload: Workload | None, live: LiveState, config: Config,
               now: datetime, exact: bool, remembered: Mapping[str, str]) -> WorkloadPlan:
    owned = live.owned_by(key)
    if key.kind == Kind.RAY_SERVICE:
        return plan_rayservice(key, workload, owned, config, now, exact)
    if key.kind == Kind.RAY_CLUSTER:
        return plan_raycluster(key, workload, owned, config, exact)
    if key.kind == Kind.RAY_JOB:
        return plan_rayjob(key, workload, owned, config, remembered)
    # a RayCronJob is a definition KubeRay schedules: applied, updated and pruned as written
    return plan_object(key, workload, owned, config, exact)
