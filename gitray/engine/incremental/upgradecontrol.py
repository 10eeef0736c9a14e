"""Steering an incremental RayService upgrade in flight: promote, abort, roll back. Pure, no I/O.

**Signals.** ``gitray promote <namespace>/<name>`` and ``gitray abort <namespace>/<name>`` do
not act themselves (the executor holding the Lease does); they leave a :class:`Signal` for the
run in flight, in a ConfigMap next to its run record (``gitray.engine.incremental.signals``). A
signal names the run it is for (workload, revision, desired hash), so one left over from an
earlier run is ignored. :func:`request` decides, from the run record and any signal already
there, what the command writes — or why it refuses (no run, no upgrade in flight, not
incremental, too late, nothing to promote). :func:`control` is the executor's side: what a
signal means for the step it is running.

- *promote* ends the next ``pause`` of the upgrade (the one running now, or the first one
  ahead of the cursor) as soon as the executor is in it;
- *approve* (``gitray approve <namespace>/RayService/<name>``) ends a blue-green upgrade's
  ``await-approval`` gate (``gitray.plans.rayservice.bluegreen``), the one running now or the
  next one ahead; it is the same fenced, compare-and-swapped signal;
- *abort* rolls the upgrade back at the next check: at every step boundary of the upgrade and
  every ~2 s while it holds a weight (wait-interval, run-analysis, pause). Once every Service
  was switched to the new cluster an upgrade can no longer be aborted: revert the commit
  (an instant rollback) instead.

**Rollback** (:func:`rollback_of`): after any failure once traffic moved — ``failureLimit``
failed analyses, an abort, a step that failed for good — all traffic goes back to the old
cluster (its serve Service the only backend of the route), the old cluster's Serve
``target_capacity`` back to 100 %, and the new cluster and its serve Service are deleted
(kept, marked failed, with ``keepFailedClusters``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitray.core.errors import AnalysisFailed, TerminalError, UserError
from gitray.core.model import ObjectKey
from gitray.engine.record import Record, RunState
from gitray.plans.plan import Step, WorkloadPlan
from gitray.plans.rayservice.gateway import cluster_serve_service_name
from gitray.plans.steptypes import StepType

__all__ = [
    "SIGNAL_FORMAT_VERSION",
    "Control",
    "Request",
    "Rollback",
    "Signal",
    "SignalAction",
    "check_failure_limit",
    "consumes",
    "control",
    "failure_limit",
    "promotion_index",
    "request",
    "rollback_of",
    "signal_from_json",
    "signal_to_json",
]

SIGNAL_FORMAT_VERSION = 1


class SignalAction(StrEnum):
    PROMOTE = "promote"
    ABORT = "abort"
    APPROVE = "approve"  # ends a blue-green upgrade's await-approval gate


@dataclass(frozen=True)
class Signal:
    """A request to the executor about one run (persisted, JSON-safe)."""

    action: SignalAction
    key: ObjectKey
    revision: str  # of the run it is for
    desired_hash: str  # of the run it is for
    step: str = ""  # promote: id of the pause it ends
    requested_at: str = ""
    requested_by: str = ""
    consumed_at: str = ""  # when the executor acted on it ("" while pending)
    resource_version: str = field(default="", compare=False)  # storage metadata (CAS)

    @property
    def pending(self) -> bool:
        return not self.consumed_at

    def is_for(self, key: ObjectKey, revision: str, desired_hash: str) -> bool:
        return (self.key, self.revision, self.desired_hash) == (key, revision, desired_hash)


def signal_to_json(signal: Signal) -> dict[str, Any]:
    return {"formatVersion": SIGNAL_FORMAT_VERSION, "action": signal.action.value,
            "workload": {"kind": signal.key.kind, "namespace": signal.key.namespace,
                         "name": signal.key.name},
            "revision": signal.revision, "desiredHash": signal.desired_hash,
            "step": signal.step, "requestedAt": signal.requested_at,
            "requestedBy": signal.requested_by, "consumedAt": signal.consumed_at}


def signal_from_json(data: Mapping[str, Any], resource_version: str = "") -> Signal:
    """Inverse of :func:`signal_to_json`; ``ValueError``/``KeyError``/``TypeError`` on a bad
    document."""
    if data.get("formatVersion") != SIGNAL_FORMAT_VERSION:
        raise ValueError(f"unsupported formatVersion {data.get('formatVersion')!r}")
    w = data["workload"]
    return Signal(SignalAction(data["action"]), ObjectKey(w["kind"], w["namespace"], w["name"]),
                  str(data["revision"]), str(data["desiredHash"]), str(data.get("step", "")),
                  str(data.get("requestedAt", "")), str(data.get("requestedBy", "")),
                  str(data.get("consumedAt", "")), resource_version)


# ---- where an upgrade stands -----------------------------------------------------------------


def _moves_traffic(step: Step) -> bool:
    p = step.params
    return (step.type is StepType.SHIFT_TRAFFIC and p.get("cluster") != p.get("from")
            and isinstance(p.get("percent"), int) and int(p.get("percent") or 0) > 0)


def promotion_index(plan: WorkloadPlan) -> int | None:
    """Index of the first step after the last traffic move that switches a Service (from
    there on the upgrade is promoted), ``len(steps)`` when none does; None when the plan moves
    no traffic (not an incremental upgrade)."""
    moves = [i for i, s in enumerate(plan.steps) if _moves_traffic(s)]
    if not moves:
        return None
    return next((i for i in range(moves[-1] + 1, len(plan.steps))
                 if plan.steps[i].type is StepType.SWITCH_SERVICE), len(plan.steps))


@dataclass(frozen=True)
class Request:
    """What ``gitray promote``/``abort`` writes (None: nothing to write) and says."""

    signal: Signal | None
    message: str


def _at(run: Record) -> str:
    steps = run.plan.steps
    if run.cursor >= len(steps):
        return f"step {len(steps)}/{len(steps)}"
    return f"step {run.cursor + 1}/{len(steps)} {steps[run.cursor].type.value}"


def request(run: Record, action: SignalAction, existing: Signal | None, now: str,
            by: str = "") -> Request:
    """What ``gitray <action>`` does about ``run``; ``UserError`` when it cannot."""
    key = run.key
    if run.state is not RunState.RUNNING:
        why = f": {run.reason}" if run.reason else ""
        raise UserError(f"no upgrade of {key} is in flight: its last run {run.state.value} at "
                        f"revision {run.revision[:12]}{why}")
    if action is SignalAction.APPROVE:
        return _approve(run, existing, now, by)
    promotion = promotion_index(run.plan)
    if promotion is None:
        raise UserError(f"the run of {key} in flight ({_at(run)}) is not an incremental "
                        f"upgrade: there is no traffic step to {action.value}")
    if run.cursor >= promotion:
        raise UserError(f"too late to {action.value} {key}: all traffic moved to the new "
                        f"cluster and the upgrade is at {_at(run)}; revert the commit to roll "
                        "back (an instant rollback)")
    mine = existing if existing is not None and existing.pending and existing.is_for(
        key, run.revision, run.desired_hash) else None
    base = Signal(action, key, run.revision, run.desired_hash, requested_at=now,
                  requested_by=by,
                  resource_version=existing.resource_version if existing else "")
    if action is SignalAction.ABORT:
        if mine is not None and mine.action is SignalAction.ABORT:
            return Request(None, f"an abort of {key} is already pending (requested "
                                 f"{mine.requested_at}); the executor rolls it back at its "
                                 "next check")
        return Request(base, f"abort of {key} requested at {_at(run)}: the executor rolls the "
                             "upgrade back (all traffic to the old cluster) at its next check")
    pause = next((i for i in range(run.cursor, promotion)
                  if run.plan.steps[i].type is StepType.PAUSE), None)
    if pause is None:
        raise UserError(f"nothing to promote: the upgrade of {key} has no pause ahead "
                        f"(it is at {_at(run)})")
    step = run.plan.steps[pause]
    if mine is not None and mine.action is SignalAction.ABORT:
        raise UserError(f"an abort of {key} is pending (requested {mine.requested_at}); it "
                        "is not promoted")
    where = (f"the pause at {step.params.get('percent')} % (step {pause + 1}/"
             f"{len(run.plan.steps)})")
    if mine is not None and mine.step == step.id:
        return Request(None, f"{where} of {key} is already promoted")
    when = "now" if pause == run.cursor else "as soon as the upgrade reaches it"
    return Request(Signal(SignalAction.PROMOTE, key, run.revision, run.desired_hash, step.id,
                          now, by, resource_version=base.resource_version),
                   f"promoted {key}: {where} ends {when}")


def _approve(run: Record, existing: Signal | None, now: str, by: str) -> Request:
    """``gitray approve``: end the await-approval gate the run is at, or the next one."""
    key, steps = run.key, run.plan.steps
    gate = next((i for i in range(run.cursor, len(steps))
                 if steps[i].type is StepType.AWAIT_APPROVAL), None)
    if gate is None:
        raise UserError(f"nothing to approve: the run of {key} in flight has no approval gate "
                        f"ahead (it is at {_at(run)}); set approve: true in its "
                        "gitray.io/analysis annotation to hold a blue-green upgrade")
    step = steps[gate]
    where = (f"the switch to {step.params.get('cluster')} (step {gate + 1}/{len(steps)})")
    if existing is not None and existing.pending and existing.action is SignalAction.APPROVE \
            and existing.is_for(key, run.revision, run.desired_hash) \
            and existing.step == step.id:
        return Request(None, f"{where} of {key} is already approved (requested "
                             f"{existing.requested_at})")
    when = "now" if gate == run.cursor else "as soon as the upgrade reaches it"
    return Request(Signal(SignalAction.APPROVE, key, run.revision, run.desired_hash, step.id,
                          now, by, resource_version=existing.resource_version
                          if existing else ""),
                   f"approved {key}: {where} goes ahead {when}")


# ---- the executor's side --------------------------------------------------------------------


class Control(StrEnum):
    NONE = "none"  # no signal for this step: go on
    PROMOTE = "promote"  # end this pause now
    APPROVE = "approve"  # end this approval gate now
    ABORT = "abort"  # roll the upgrade back
    STALE = "stale"  # a signal of another run (or for nothing in flight): mark it consumed


def control(signal: Signal | None, key: ObjectKey, revision: str, desired_hash: str,
            step: Step) -> Control:
    """What ``signal`` means for ``step`` of the run (key, revision, desired hash)."""
    if signal is None or not signal.pending:
        return Control.NONE
    if not signal.is_for(key, revision, desired_hash):
        return Control.STALE
    if signal.action is SignalAction.ABORT:
        return Control.ABORT
    if signal.action is SignalAction.APPROVE:
        return Control.APPROVE if step.type is StepType.AWAIT_APPROVAL \
            and signal.step == step.id else Control.NONE
    if step.type is StepType.PAUSE and signal.step == step.id:
        return Control.PROMOTE
    return Control.NONE  # a promote for a pause further ahead: kept until it is reached


def consumes(what: Control, *, at_boundary: bool) -> bool:
    """Whether reading a signal that means ``what`` marks it consumed. The step a promote or
    an approval names consumes it (and ends); the look for an abort at a step boundary, before
    that step starts (or is resumed: a parked pause is resumed at its step on every re-check),
    must leave it for the step. An abort is consumed once it was acted on (rolled back); a
    signal of another run is consumed by any look."""
    if what is Control.STALE:
        return True
    return not at_boundary and what in {Control.PROMOTE, Control.APPROVE}


# ---- failed analyses ------------------------------------------------------------------------


def failure_limit(step: Step) -> int:
    limit = step.params.get("failureLimit")
    return limit if isinstance(limit, int) and limit > 0 else 1


def check_failure_limit(step: Step, failures: list[str],
                        last: AnalysisFailed | None = None) -> None:
    """Fail ``step`` (a run-analysis) once the run counted ``failureLimit`` failed analyses
    (``failures``, over the whole upgrade; ``last`` the one just counted) — also when it is
    resumed after the limit was reached (its message then is the last failure stored)."""
    if step.type is not StepType.RUN_ANALYSIS or len(failures) < failure_limit(step):
        return
    count = f"failed analyses {len(failures)}/{failure_limit(step)} (failureLimit)"
    if last is not None:
        raise AnalysisFailed(f"{last}; {count}", last.check, last.value) from last
    raise TerminalError(f"{failures[-1].split(': ', 1)[-1]}; {count}")


# ---- rollback -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollback:
    old: str  # the cluster that takes all traffic again
    new: str  # the cluster the upgrade was moving to
    keep: bool  # keep the new cluster (marked failed) instead of deleting it
    steps: tuple[Step, ...]


def _keep(plan: WorkloadPlan, default: bool) -> bool:
    for s in plan.steps:
        on_failure = s.params.get("onFailure") if s.type is StepType.RUN_ANALYSIS else None
        if isinstance(on_failure, Mapping) and "keepFailedCluster" in on_failure:
            return bool(on_failure["keepFailedCluster"])
    return default


def rollback_of(plan: WorkloadPlan, failed_at: int, keep_default: bool) -> Rollback | None:
    """The rollback of ``plan`` failed (or aborted) at step index ``failed_at``; None when no
    traffic had moved to the new cluster yet (nothing to take back) or every Service was
    already switched to it (promoted: a revert rolls back then)."""
    done = plan.steps[:failed_at + 1]
    moves = [i for i, s in enumerate(done) if _moves_traffic(s)]
    if not moves:
        return None
    last = done[moves[-1]]
    if any(s.type is StepType.SWITCH_SERVICE for s in done[moves[-1] + 1:]):
        return None
    old, new = str(last.params["from"]), str(last.params["cluster"])
    keep = _keep(plan, keep_default)
    manifest = copy.deepcopy(dict(last.params["manifest"]))
    backend = cluster_serve_service_name(old)
    refs: list[dict[str, Any]] = []
    for rule in manifest["spec"]["rules"]:
        rule["backendRefs"] = [{**ref, "weight": 100} for ref in rule["backendRefs"]
                               if ref.get("name") == backend]
        refs = rule["backendRefs"]
    route = str(last.params["route"])
    steps = [
        Step("rollback-traffic", StepType.SHIFT_TRAFFIC, route,
             {"route": route, "manifest": manifest, "cluster": old, "from": old, "percent": 0,
              "backends": refs}, f"roll back: all traffic to {old}"),
        Step("rollback-capacity", StepType.SET_SERVE_CAPACITY, old,
             {"cluster": old, "targetCapacity": 100},
             f"roll back: {old} serves everything again at full Serve capacity"),
    ]
    if not keep:
        service = cluster_serve_service_name(new)
        steps += [Step("rollback-service", StepType.DELETE_SERVICE, service,
                       {"service": service}, f"roll back: {new} goes, so does its Service"),
                  Step("rollback-cluster", StepType.DELETE_CLUSTER, new, {"cluster": new},
                       f"roll back: delete {new}")]
    return Rollback(old, new, keep, tuple(steps))
