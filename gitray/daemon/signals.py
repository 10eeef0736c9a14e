"""What a pass tells people besides statuses and logs: notifications (``gitray.hosts.notify``)
and the per-workload metrics (``gitray.daemon.metrics.WorkloadTable``). Fed by the daemon at
a few points of a pass: each step event, the outcomes, a refused revision, a convergence with
the workloads' health. Never raises into a pass: a problem here is logged and the sync goes
on. The notices themselves are made by ``gitray.engine.notices`` (pure).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitray.core.errors import GitrayError
from gitray.core.model import ObjectKey
from gitray.core.notices import Notice
from gitray.core.snapshot import Snapshot
from gitray.daemon.metrics import MAX_WORKLOADS, Metrics
from gitray.daemon.state import DaemonState
from gitray.daemon.statuspage import Entry, PageData, render
from gitray.engine.apply import desired_config
from gitray.engine.executor import Outcome, StepEvent, WorkloadOutcome
from gitray.engine.notices import (
    health_notices,
    healthy,
    outcome_notices,
    refused_notice,
    step_notices,
)
from gitray.hosts.notify import Notifier
from gitray.plans.plan import Plan
from gitray.plans.render import Format
from gitray.plans.render import render as render_plan
from gitray.plans.steptypes import StepType

__all__ = ["HealthChange", "Signals"]

log = logging.getLogger("gitray.sync")

HISTORY = 60  # entries per workload on the status page
PLANS = 20  # the plans of the last commits, served by the status page
PLAN_CHARS = 1 << 20  # a plan longer than this is served cut, saying so
POINTS = 200  # traffic and analysis points per workload

_OUTCOME_STATE = {Outcome.SUCCEEDED: "in-sync", Outcome.FAILED: "failed",
                  Outcome.SUPERSEDED: "superseded"}


@dataclass(frozen=True)
class HealthChange:
    key: ObjectKey
    line: str
    healthy: bool
    since: float  # when it turned unhealthy (wall clock); for a recovery, now


class Signals:
    def __init__(self, metrics: Metrics, overrides: Mapping[str, object] | None = None,
                 repo: str = "", notifier: Notifier | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.metrics, self.overrides, self.repo = metrics, dict(overrides or {}), repo
        self.notifier = notifier or Notifier(
            count=lambda receiver, result: metrics.notifications.labels(receiver,
                                                                        result).inc())
        self.clock = clock
        self._unhealthy_since: dict[ObjectKey, float] = {}
        # for the status page: each workload's recent steps, traffic share and analyses
        self.history: dict[ObjectKey, deque[Entry]] = {}
        self._steps: dict[ObjectKey, set[StepType]] = {}  # step types of the current run
        self.traffic: dict[ObjectKey, deque[tuple[float, int]]] = {}
        self.analyses: dict[ObjectKey, deque[tuple[float, str]]] = {}
        self._plans: OrderedDict[str, Plan] = OrderedDict()  # commit -> its first plan

    def configure(self, snapshot: Snapshot) -> None:
        """The receivers the revision's gitray.yaml names (an invalid one keeps the last)."""
        try:
            config = desired_config(snapshot, self.overrides)
        except GitrayError:
            return
        self.notifier.configure(config.notifications)

    def send(self, notices: Iterable[Notice]) -> None:
        for notice in notices:
            self.notifier.notify(notice)

    def reporter(self, sha: str, inner: Callable[[StepEvent], None]
                 ) -> Callable[[StepEvent], None]:
        """``inner`` (which may interrupt the pass), then this module's part of the event."""

        def report(event: StepEvent) -> None:
            inner(event)
            try:
                self.step(sha, event)
            except Exception:  # never fail a step for a metric or a notification
                log.exception("notifications/metrics of a step event")
        return report

    def _note(self, key: ObjectKey, entry: Entry) -> None:
        if key in self.history or len(self.history) < MAX_WORKLOADS:
            self.history.setdefault(key, deque(maxlen=HISTORY)).append(entry)

    def _series(self, store: dict[ObjectKey, deque[tuple[float, Any]]], key: ObjectKey,
                point: tuple[float, Any]) -> None:
        if key in store or len(store) < MAX_WORKLOADS:
            store.setdefault(key, deque(maxlen=POINTS)).append(point)

    def step(self, sha: str, event: StepEvent) -> None:
        table, key, step, now = self.metrics.table, event.key, event.step, self.clock()
        what = f"step {event.index}/{event.total} {step.type.value} {step.target}"
        if event.phase in {"start", "resume"}:
            if event.index == 1 or event.phase == "resume":
                self.traffic.pop(key, None)
                self.analyses.pop(key, None)  # a new run: a new chart
                self._steps[key] = set()
            self._steps.setdefault(key, set()).add(step.type)
            table.update(key, state="progressing", step=event.index, steps=event.total,
                         step_started=now, revision=sha)
            self._note(key, Entry(now, sha, what))
        elif event.phase in {"done", "failed", "superseded"}:
            self._note(key, Entry(now, sha, f"{what}: {event.phase}"
                                  + (f" ({event.detail})" if event.detail else ""),
                                  "bad" if event.phase == "failed" else "ok"))
        if event.phase == "done":
            if step.type is StepType.SHIFT_TRAFFIC and isinstance(step.params.get("percent"),
                                                                  int):
                new, old = step.params.get("cluster"), step.params.get("from")
                percent = int(str(step.params["percent"])) if new != old else 100
                table.update(key, traffic_percent=percent)
                self._series(self.traffic, key, (now, percent))
            elif step.type is StepType.CREATE_CLUSTER and key.kind == "RayService":
                table.update(key, pending_since=now)
            elif step.type is StepType.SWITCH_SERVICE:
                table.update(key, pending_since=None)
            elif step.type is StepType.RUN_ANALYSIS:
                self.metrics.analyses.labels(key.namespace, key.kind, key.name,
                                             "passed").inc()
                self._series(self.analyses, key, (now, "passed"))
        if step.type is StepType.RUN_ANALYSIS and (
                event.phase == "failed" or (event.phase == "progress"
                                            and event.detail.startswith("analysis failed"))):
            self.metrics.analyses.labels(key.namespace, key.kind, key.name, "failed").inc()
            self._series(self.analyses, key, (now, "failed"))
            if event.phase == "progress":
                self._note(key, Entry(now, sha, event.detail, "bad"))
        self.send(step_notices(event, sha))

    def outcomes(self, sha: str, trigger: str, outcomes: Iterable[WorkloadOutcome]) -> None:
        try:
            outcomes = list(outcomes)
            now = self.clock()
            by_trigger: dict[str, list[WorkloadOutcome]] = {}
            for o in outcomes:
                # a drift pass that deleted an old RayService cluster whose deadline passed
                # did housekeeping, not healing (a pass takes whatever is due)
                cleanup = trigger == "drift" and \
                    StepType.DELETE_CLUSTER in self._steps.pop(o.key, set())
                by_trigger.setdefault("deletions" if cleanup else trigger, []).append(o)
                state = _OUTCOME_STATE.get(o.outcome)
                if state is None:
                    continue
                changes: dict[str, object] = {"state": state, "step": 0,
                                              "steps": o.steps_total, "revision": sha}
                if o.steps_total:
                    self._note(o.key, Entry(now, sha, f"run {o.outcome.value}"
                                            + (f": {o.reason}" if o.reason else ""),
                                            "ok" if o.outcome is Outcome.SUCCEEDED else "bad"))
                if o.outcome is Outcome.SUCCEEDED:
                    changes.update(last_converged=now, traffic_percent=None, pending_since=None)
                    if trigger == "drift" and o.steps_total and not cleanup:
                        self.metrics.drift_healed.labels(o.key.namespace, o.key.kind,
                                                         o.key.name).inc()
                elif o.outcome is Outcome.FAILED:
                    changes.update(traffic_percent=None, pending_since=None)
                self.metrics.table.update(o.key, **changes)
            for why, group in by_trigger.items():
                self.send(outcome_notices(sha, why, group))
        except Exception:
            log.exception("notifications/metrics of a pass' outcomes")

    def refused(self, sha: str, message: str,
                post: Callable[[str, ObjectKey | None, str, str], None] | None = None,
                description: str = "") -> None:
        """A revision refused: its overall commit status (``post``, ``description``) and the
        change-refused notification."""
        if post is not None:
            post(sha, None, "failure", description or message)
        try:
            self.send([refused_notice(sha, message)])
        except Exception:
            log.exception("notification of a refused revision")

    def _zero_counters(self, key: ObjectKey) -> None:
        """Each workload's counters exist from its first convergence on, at 0 (so that
        ``increase()`` sees its first event, and queries find the series)."""
        labels = (key.namespace, key.kind, key.name)
        self.metrics.drift_healed.labels(*labels)
        if key.kind == "RayService":
            for result in ("passed", "failed"):
                self.metrics.analyses.labels(*labels, result)

    def converged(self, sha: str, keys: Iterable[ObjectKey],
                  health: Mapping[ObjectKey, str]) -> None:
        """Every workload in sync at ``sha``, with its health line (when read)."""
        try:
            keys = list(keys)
            table, now = self.metrics.table, self.clock()
            for key in keys:
                view = table.get(key)
                changes: dict[str, object] = {"state": "in-sync", "step": 0, "revision": sha}
                if view.state != "in-sync" or view.last_converged is None:
                    changes["last_converged"] = now
                table.update(key, **changes)
                self._zero_counters(key)
            for gone in table.keep(keys):
                self.metrics.forget([gone])
                for store in (self.history, self.traffic, self.analyses):
                    store.pop(gone, None)
            self.health(sha, keys, health)
        except Exception:
            log.exception("notifications/metrics of a convergence")

    def health(self, sha: str, keys: Iterable[ObjectKey], lines: Mapping[ObjectKey, str]
               ) -> list[HealthChange]:
        """Health read for ``keys``: the gauge follows it; a workload that turned unhealthy
        (or is first seen unhealthy) or healthy again is notified and returned."""
        table, now = self.metrics.table, self.clock()
        before = {k: v.healthy for k, v in table.views().items() if v.healthy is not None}
        read = {k: lines[k] for k in keys if k in lines and healthy(lines[k]) is not None}
        changes: list[HealthChange] = []
        for key, line in sorted(read.items(), key=lambda kv: str(kv[0])):
            ok = bool(healthy(line))
            table.update(key, healthy=ok)
            if before.get(key, True) == ok:
                continue
            if ok:
                self._unhealthy_since.pop(key, None)
            else:
                self._unhealthy_since[key] = now
            changes.append(HealthChange(key, line, ok, self._unhealthy_since.get(key, now)))
        self.send(health_notices(sha, before, read))
        return changes

    def planned(self, sha: str, plan: Plan) -> None:
        """Keep the plan of ``sha`` as its first pass made it (what the commit changes), for
        the status page; the last ``PLANS`` commits'. Rendered only when asked for (a pass
        does no work for it). Sensitive values are digests in plans, shown as
        ``(sensitive value)``."""
        if sha in self._plans:
            return
        self._plans[sha] = plan
        while len(self._plans) > PLANS:
            self._plans.popitem(last=False)

    def plan(self, sha: str) -> str | None:
        """The plan kept for ``sha`` as plain text, if any."""
        plan = self._plans.get(sha)
        if plan is None:
            return None
        text = render_plan(plan, Format.TEXT)
        if len(text) > PLAN_CHARS:
            text = text[:PLAN_CHARS] + f"\n... (cut at {PLAN_CHARS} characters)\n"
        return text

    def page(self, state: DaemonState, leader: bool) -> str:
        """The status page (gitray.daemon.statuspage); ``self.repo`` is redacted."""
        return render(PageData(
            self.clock(), self.repo, state.synced, state.fetched, leader,
            self.metrics.table.views(),
            {k: tuple(v) for k, v in list(self.history.items())},
            {k: tuple(v) for k, v in list(self.traffic.items())},
            {k: tuple(v) for k, v in list(self.analyses.items())},
            frozenset(self._plans)))
