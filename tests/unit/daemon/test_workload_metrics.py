"""Per-workload metrics (gitray.daemon.metrics.WorkloadTable) as the daemon's step events,
outcomes and convergences feed them (gitray.daemon.signals), read back in Prometheus' text
format; and the notices those give rise to, handed to a notifier."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gitray.core.config import NotificationSettings
from gitray.core.model import ObjectKey
from gitray.core.notices import EventKind, Notice
from gitray.daemon import metrics as metrics_module
from gitray.daemon.metrics import Metrics
from gitray.daemon.signals import Signals
from gitray.engine.executor import Outcome, StepEvent, WorkloadOutcome
from gitray.hosts.notify import Notifier
from gitray.plans.plan import Step
from gitray.plans.steptypes import StepType
from tests.clock import ManualClock

SVC = ObjectKey("RayService", "ml", "fruit")
JOB = ObjectKey("RayJob", "ml", "train")
SHA = "0123456789abcdef0123456789abcdef01234567"


class Recording(Notifier):
    """A notifier that keeps what it is given (the delivery is tested in
    test_notifications against a real receiver)."""

    def __init__(self) -> None:
        super().__init__(environ={})
        self.notices: list[Notice] = []

    def configure(self, settings: NotificationSettings) -> None:
        pass

    def notify(self, notice: Notice) -> None:
        self.notices.append(notice)


def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def labels(key: ObjectKey, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"namespace": key.namespace, "kind": key.kind, "name": key.name,
                         **more}.items()))


def make() -> tuple[Metrics, Signals, Recording, ManualClock]:
    m, clock, notifier = Metrics(), ManualClock(), Recording()
    m.table.clock = clock
    return m, Signals(m, notifier=notifier, clock=clock), notifier, clock


def test_an_incremental_upgrade_in_the_metrics() -> None:
    m, signals, notifier, clock = make()
    seen: list[StepEvent] = []
    report = signals.reporter(SHA, seen.append)
    create = Step("c", StepType.CREATE_CLUSTER, "fruit-new", {"manifest": {"spec": {}}})
    shift = Step("t", StepType.SHIFT_TRAFFIC, "fruit-route",
                 {"percent": 25, "cluster": "fruit-new", "from": "fruit-old"})
    analysis = Step("a", StepType.RUN_ANALYSIS, "fruit-new", {"percent": 25})
    report(StepEvent(SVC, 1, 9, create, "start"))
    clock.now = 1010.0
    report(StepEvent(SVC, 1, 9, create, "done", "created"))
    report(StepEvent(SVC, 5, 9, shift, "start"))
    report(StepEvent(SVC, 5, 9, shift, "done", "25 %"))
    report(StepEvent(SVC, 6, 9, analysis, "start"))
    report(StepEvent(SVC, 6, 9, analysis, "progress", "analysis failed (1 of failureLimit 2): "
                                                       "success-rate 90 % < 99 %"))
    report(StepEvent(SVC, 6, 9, analysis, "done", "analysis passed"))
    assert len(seen) == 7  # the daemon's own reporter heard everything first
    got = samples(m)
    assert got[("gitray_workload_state", labels(SVC, state="progressing"))] == 1
    assert got[("gitray_workload_state", labels(SVC, state="in-sync"))] == 0
    assert got[("gitray_workload_step", labels(SVC))] == 6
    assert got[("gitray_workload_steps", labels(SVC))] == 9
    assert got[("gitray_workload_step_started_timestamp_seconds", labels(SVC))] == 1010
    assert got[("gitray_workload_traffic_percent", labels(SVC))] == 25
    assert got[("gitray_workload_pending_cluster_since_timestamp_seconds", labels(SVC))] == 1010
    assert got[("gitray_analyses_total", labels(SVC, result="passed"))] == 1
    assert got[("gitray_analyses_total", labels(SVC, result="failed"))] == 1
    assert [n.event for n in notifier.notices] == [
        EventKind.UPGRADE_STARTED, EventKind.TRAFFIC_STEP, EventKind.ANALYSIS_FAILED]

    clock.now = 1100.0
    signals.outcomes(SHA, "commit", [WorkloadOutcome(SVC, Outcome.SUCCEEDED, "", 9, 9)])
    clock.now = 1130.0
    got = samples(m)
    assert got[("gitray_workload_state", labels(SVC, state="in-sync"))] == 1
    assert got[("gitray_workload_step", labels(SVC))] == 0
    assert ("gitray_workload_traffic_percent", labels(SVC)) not in got
    assert ("gitray_workload_pending_cluster_since_timestamp_seconds", labels(SVC)) not in got
    assert got[("gitray_workload_last_converged_timestamp_seconds", labels(SVC))] == 1100
    assert got[("gitray_workload_seconds_since_converged", labels(SVC))] == 30
    assert notifier.notices[-1].event is EventKind.CONVERGED


def test_failures_drift_health_and_workloads_that_leave() -> None:
    m, signals, notifier, _ = make()
    signals.outcomes(SHA, "commit", [WorkloadOutcome(JOB, Outcome.FAILED, "RayJob FAILED", 1,
                                                     2)])
    assert samples(m)[("gitray_workload_state", labels(JOB, state="failed"))] == 1
    signals.outcomes(SHA, "drift", [WorkloadOutcome(SVC, Outcome.SUCCEEDED, "", 2, 2)])
    signals.outcomes(SHA, "drift", [WorkloadOutcome(SVC, Outcome.SUCCEEDED, "", 1, 1)])
    assert samples(m)[("gitray_drift_healed_total", labels(SVC))] == 2
    signals.converged(SHA, [SVC, JOB], {SVC: "greeter UNHEALTHY", JOB: "train-1: RUNNING"})
    got = samples(m)
    assert got[("gitray_workload_healthy", labels(SVC))] == 0
    assert got[("gitray_workload_healthy", labels(JOB))] == 1
    assert got[("gitray_workload_state", labels(JOB, state="in-sync"))] == 1
    # counters exist from the first convergence, at 0
    assert got[("gitray_drift_healed_total", labels(JOB))] == 0
    assert got[("gitray_analyses_total", labels(SVC, result="failed"))] == 0
    assert ("gitray_analyses_total", labels(JOB, result="failed")) not in got
    signals.converged(SHA, [SVC], {SVC: "greeter RUNNING"})  # the RayJob left Git
    got = samples(m)
    assert got[("gitray_workload_healthy", labels(SVC))] == 1
    assert not [k for k in got if dict(k[1]).get("name") == "train"]
    assert [n.event for n in notifier.notices] == [
        EventKind.RUN_FAILED, EventKind.DRIFT_HEALED, EventKind.DRIFT_HEALED,
        EventKind.HEALTH_DEGRADED, EventKind.HEALTH_RECOVERED]
    signals.refused(SHA, "invalid revision: x")
    assert notifier.notices[-1].event is EventKind.CHANGE_REFUSED


def test_label_sets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "MAX_WORKLOADS", 3)
    m = Metrics()
    for n in range(10):
        m.table.update(ObjectKey("RayJob", "ns", f"j{n}"), state="in-sync")
    assert len(m.table.views()) == 3
    assert len([k for k in samples(m) if k[0] == "gitray_workload_step"]) == 3


def test_a_broken_notifier_never_fails_a_step(caplog: pytest.LogCaptureFixture) -> None:
    m = Metrics()

    class Broken(Recording):
        def notify(self, notice: Notice) -> None:
            raise RuntimeError("boom")

    signals = Signals(m, notifier=Broken())
    step = Step("t", StepType.SHIFT_TRAFFIC, "r", {"percent": 5, "cluster": "n", "from": "o"})
    signals.reporter(SHA, lambda _e: None)(StepEvent(SVC, 1, 2, step, "done"))
    signals.outcomes(SHA, "commit", [WorkloadOutcome(SVC, Outcome.SUCCEEDED, "", 2, 2)])
    signals.converged(SHA, [SVC], {})
    signals.refused(SHA, "x")
    assert caplog.text.count("RuntimeError: boom") == 3  # logged; the pass went on


def test_health_watched_after_convergence_flips_the_status_and_notifies() -> None:
    from gitray.daemon.healthwatch import HealthWatch

    m, signals, notifier, clock = make()
    posted: list[tuple[str, ObjectKey | None, str, str]] = []
    watch = HealthWatch(signals, lambda *status: posted.append(status))
    clock.now = 1_763_997_600.0  # 2025-11-24 15:20 UTC
    signals.converged(SHA, [SVC, JOB], {SVC: "greeter RUNNING", JOB: "-"})
    assert watch.check(SHA, [SVC, JOB], lambda: {SVC: "greeter RUNNING", JOB: "-"}) == []
    clock.now += 120
    [change] = watch.check(SHA, [SVC, JOB], lambda: {SVC: "greeter UNHEALTHY", JOB: "-"})
    assert not change.healthy
    assert posted == [(SHA, SVC, "failure",
                       "in sync at 0123456: greeter UNHEALTHY since 15:22 UTC")]
    assert samples(m)[("gitray_workload_healthy", labels(SVC))] == 0
    clock.now += 60  # still unhealthy: nothing new; unreadable: no verdict
    assert watch.check(SHA, [SVC], lambda: {SVC: "greeter UNHEALTHY"}) == []
    assert watch.check(SHA, [SVC], lambda: {SVC: "unknown (connection failed)"}) == []
    watch.check(SHA, [SVC], lambda: {SVC: "greeter RUNNING"})
    assert posted[-1] == (SHA, SVC, "success", "in sync at 0123456: greeter RUNNING")
    assert samples(m)[("gitray_workload_healthy", labels(SVC))] == 1
    assert [n.event for n in notifier.notices] == [EventKind.HEALTH_DEGRADED,
                                                   EventKind.HEALTH_RECOVERED]


def test_a_drift_pass_that_deletes_an_old_cluster_on_schedule_is_no_drift() -> None:
    m, signals, notifier, _ = make()
    report = signals.reporter(SHA, lambda _e: None)
    route = Step("r", StepType.APPLY_OBJECT, "fruit-httproute", {})
    delete = Step("d", StepType.DELETE_CLUSTER, "fruit-old", {"cluster": "fruit-old"})
    report(StepEvent(SVC, 1, 2, route, "start"))
    report(StepEvent(SVC, 2, 2, delete, "start"))
    signals.outcomes(SHA, "drift", [WorkloadOutcome(SVC, Outcome.SUCCEEDED, "", 2, 2)])
    assert ("gitray_drift_healed_total", labels(SVC)) not in samples(m)
    assert notifier.notices == []  # housekeeping: no news
    # the same route change without a due deletion is drift healed
    report(StepEvent(SVC, 1, 1, route, "start"))
    signals.outcomes(SHA, "drift", [WorkloadOutcome(SVC, Outcome.SUCCEEDED, "", 1, 1)])
    assert samples(m)[("gitray_drift_healed_total", labels(SVC))] == 1
    assert [n.event for n in notifier.notices] == [EventKind.DRIFT_HEALED]
