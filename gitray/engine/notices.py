"""The notifications a pass gives rise to, from its step events and outcomes: values in,
values out (the executor's events and outcomes, ``Notice`` values).

``step_notices`` hears the executor's step events (a RayService building a new cluster, traffic
moved, an analysis that failed with its measured value); ``outcome_notices`` the end of each
workload's run (converged, drift healed, failed with its reason, e.g. Ray's error for a RayJob,
rolled back); ``refused_notice`` a revision refused by validation; ``health_notices`` a
workload's health turning bad or good again. Delivery: ``gitray.hosts.notify``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gitray.core.model import Kind, ObjectKey
from gitray.core.notices import EventKind, Notice
from gitray.engine.executor import Outcome, StepEvent, WorkloadOutcome
from gitray.plans.steptypes import StepType

__all__ = ["cluster_capacity", "health_notices", "healthy", "outcome_notices",
           "refused_notice", "step_notices"]

_BAD_HEALTH = re.compile(r"\b(UNHEALTHY|DEPLOY_FAILED|FAILED|Failed|head not ready|failed)\b")


def _who(key: ObjectKey) -> str:
    return f"{key.kind} {key.namespace}/{key.name}"


def _cpu(value: object) -> float:
    text = str(value or "").strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text or 0)
    except ValueError:
        return 0.0


def _pod_cpu(group: Mapping[str, Any]) -> float:
    spec = ((group.get("template") or {}).get("spec") or {})
    total = 0.0
    for container in spec.get("containers") or []:
        resources = (container or {}).get("resources") or {}
        total += _cpu((resources.get("requests") or {}).get("cpu")
                      or (resources.get("limits") or {}).get("cpu"))
    return total


def cluster_capacity(manifest: Mapping[str, Any]) -> str:
    """What a new cluster takes, from its RayCluster manifest: ``1 head + 2 worker pods,
    3 CPU`` (CPU from the containers' requests, else limits; left out when none is set)."""
    spec = manifest.get("spec") or {}
    head = spec.get("headGroupSpec") or {}
    workers, cpu = 0, _pod_cpu(head)
    for group in spec.get("workerGroupSpecs") or []:
        if not isinstance(group, Mapping):
            continue
        replicas = group.get("replicas", group.get("minReplicas", 0))
        count = replicas if isinstance(replicas, int) else 0
        workers += count
        cpu += count * _pod_cpu(group)
    text = f"1 head + {workers} worker pod{'s' if workers != 1 else ''}"
    if cpu:
        text += f", {cpu:g} CPU"
    return text


def step_notices(event: StepEvent, revision: str) -> list[Notice]:
    """What a step event is worth telling: a RayService's new cluster (with the capacity it
    takes), a traffic step, a failed analysis (with what it measured)."""
    step, key = event.step, event.key
    if event.phase == "start" and step.type is StepType.CREATE_CLUSTER \
            and key.kind == Kind.RAY_SERVICE.value:
        manifest = step.params.get("manifest")
        fields = [("cluster", step.target)]
        if isinstance(manifest, Mapping):
            fields.append(("extra capacity", cluster_capacity(manifest)))
        return [Notice(EventKind.UPGRADE_STARTED, revision,
                       f"{_who(key)}: upgrade started, building cluster {step.target}"
                       + (f" ({fields[1][1]})" if len(fields) > 1 else ""), key,
                       tuple(fields))]
    if event.phase == "done" and step.type is StepType.SHIFT_TRAFFIC:
        percent, new, old = step.params.get("percent"), step.params.get("cluster"), \
            step.params.get("from")
        if not isinstance(percent, int):
            return []
        share = f"{percent} % to {new}" if new != old else f"100 % to {old}"
        return [Notice(EventKind.TRAFFIC_STEP, revision, f"{_who(key)}: traffic {share}", key,
                       (("percent", str(percent if new != old else 100)),
                        ("cluster", str(new)), ("from", str(old))))]
    analysis_failed = (event.phase == "progress" and event.detail.startswith("analysis failed")) \
        or event.phase == "failed"
    if step.type is StepType.RUN_ANALYSIS and analysis_failed:
        return [Notice(EventKind.ANALYSIS_FAILED, revision,
                       f"{_who(key)}: analysis failed: {event.detail}", key,
                       (("step", f"{event.index}/{event.total}"), ("measured", event.detail)))]
    return []


def outcome_notices(revision: str, trigger: str,
                    outcomes: Iterable[WorkloadOutcome]) -> list[Notice]:
    """The end of each workload's run in a pass: converged (or, on a drift pass, drift healed;
    nothing for a pass that only deleted an old cluster on schedule, ``deletions``), failed
    with its reason, rolled back. A run resumed from its record under a drift pass comes with
    the trigger ``resume`` (``gitray.daemon.dispatch.run_trigger``): converged."""
    out: list[Notice] = []
    for o in outcomes:
        if o.outcome is Outcome.SUCCEEDED and o.steps_total:
            if trigger == "deletions":
                continue  # an old cluster deleted on schedule: housekeeping, no news
            if trigger == "drift":
                out.append(Notice(EventKind.DRIFT_HEALED, revision,
                                  f"{_who(o.key)}: drift healed ({o.steps_total} step(s))",
                                  o.key, (("steps", str(o.steps_total)),)))
            else:
                out.append(Notice(EventKind.CONVERGED, revision,
                                  f"{_who(o.key)}: converged at {revision[:7]}", o.key,
                                  (("steps", str(o.steps_total)),)))
        elif o.outcome is Outcome.FAILED:
            out.append(Notice(EventKind.RUN_FAILED, revision,
                              f"{_who(o.key)}: failed at {revision[:7]}: {o.reason}", o.key,
                              (("reason", o.reason),)))
            rolled = [m for m in o.messages if m.startswith(("rolled back", "rollback"))]
            if rolled:
                out.append(Notice(EventKind.ROLLED_BACK, revision,
                                  f"{_who(o.key)}: {rolled[-1]}", o.key,
                                  (("rollback", rolled[-1]),)))
    return out


def refused_notice(revision: str, message: str) -> Notice:
    return Notice(EventKind.CHANGE_REFUSED, revision,
                  f"{revision[:7]} not applied: {message}", None, (("reason", message),))


def healthy(line: str) -> bool | None:
    """Whether a health line (``gitray.plans.health``) says healthy; None when nothing is
    live (``-``) or it could not be read (``unknown (...)``)."""
    if not line or line == "-" or line.startswith("unknown"):
        return None  # nothing live, or not read (gitray.engine.health): no verdict
    return _BAD_HEALTH.search(line) is None


def health_notices(revision: str, before: Mapping[ObjectKey, bool],
                   lines: Mapping[ObjectKey, str]) -> list[Notice]:
    """Health that turned bad or good again since ``before`` (a workload first seen healthy
    is no news; first seen unhealthy is)."""
    out: list[Notice] = []
    for key, line in sorted(lines.items(), key=lambda kv: str(kv[0])):
        now = healthy(line)
        if now is None or before.get(key, True) == now:
            continue
        kind = EventKind.HEALTH_RECOVERED if now else EventKind.HEALTH_DEGRADED
        word = "healthy again" if now else "unhealthy"
        out.append(Notice(kind, revision, f"{_who(key)}: {word}: {line}", key,
                          (("health", line),)))
    return out
