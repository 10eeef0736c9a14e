"""The steps of an incremental upgrade, from their inputs: holds, analyses, capacity, routes.

``gitray.engine.incremental.traffic`` is run here only where everything it reads is a plain
input: time (a clock whose ``sleep`` advances it), the run's promote/abort signals (a script of
what ``Steering.check`` answers) and, for an analysis, the two metrics expositions and the
webhook's answer (handed in by a stand-in for the HTTP probe, no Kubernetes API and no Ray
involved).
The writes themselves — PUT to a dashboard, server-side apply of the HTTPRoute, the signals'
ConfigMaps — have not run against a real API server or a real Gateway yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from gitray.core.errors import Aborted, AnalysisFailed, TerminalError
from gitray.core.waits import Clock, Deadline
from gitray.engine.incremental.traffic import Traffic, capacity_config, route_accepted
from gitray.engine.incremental.upgradecontrol import Control
from gitray.plans.plan import Step
from gitray.plans.rayservice.gateway import route_refs
from gitray.plans.steptypes import StepType
from tests.unit.engine.test_gateway_metrics import exposition


class Time:
    """Monotonic time that only ``sleep`` moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> Clock:
        return Clock(monotonic=lambda: self.now, sleep=self.sleep,
                     now=lambda: datetime(2026, 12, 2, tzinfo=UTC))


class Script:
    """What the run's signals say: ``answer`` from ``at`` seconds on, nothing before."""

    def __init__(self, time: Time, answer: Control = Control.NONE, at: float = 0.0) -> None:
        self.time, self.answer, self.at = time, answer, at
        self.asked = 0

    def check(self, step: Step) -> tuple[Control, str]:
        self.asked += 1
        if self.time.now >= self.at and self.answer is not Control.NONE:
            return self.answer, "requested 2026-12-02T10:00:00Z by ana"
        return Control.NONE, ""


class Probe:
    """Hands in the metrics expositions (one per scrape) and the webhook's answer."""

    def __init__(self, texts: list[str], status: int | None = 204) -> None:
        self.texts, self.status = texts, status
        self.posted: list[Mapping[str, Any]] = []

    def metrics(self, url: str) -> str:
        return self.texts.pop(0)

    def webhook(self, url: str, payload: Mapping[str, Any], timeout_s: float
                ) -> tuple[int | None, str]:
        self.posted.append(payload)
        return self.status, "" if self.status else "ConnectTimeout"


def traffic(time: Time, probe: Probe | None = None) -> Traffic:
    nothing = cast(Any, None)
    return Traffic(nothing, nothing, time.clock(), cast(Any, probe))


def hold(kind: StepType, **params: Any) -> Step:
    return Step("9-" + kind.value, kind, "fruit-14f9f",
                {"cluster": "fruit-14f9f", "percent": 50,
                 "promote": "gitray promote ray-serve/fruit", **params})


def run(time: Time, step: Step, script: Script | None, seconds: float | None,
        probe: Probe | None = None, spent: float = 0.0) -> str:
    deadline = None if seconds is None else Deadline(seconds, time.clock(), spent)
    return traffic(time, probe).run("ray-serve", step, lambda _line: None, deadline, script)


# ---- holds ----------------------------------------------------------------------------------


def test_a_wait_interval_holds_its_seconds_looking_for_an_abort_every_2_s() -> None:
    time = Time()
    script = Script(time)
    message = run(time, hold(StepType.WAIT_INTERVAL, seconds=60), script, 60)
    assert message == "held 50 % on fruit-14f9f for 60 s"
    assert time.now == 60 and max(time.slept) == 2.0 and script.asked == 31


def test_a_resumed_hold_waits_only_what_is_left_and_one_already_over_ends_at_once() -> None:
    time = Time()
    run(time, hold(StepType.WAIT_INTERVAL, seconds=60), Script(time), 60, spent=45)
    assert time.now == 15
    later = Time()
    run(later, hold(StepType.PAUSE, seconds=300), Script(later), 300, spent=400)
    assert later.now == 0


def test_an_abort_ends_a_hold_at_its_next_look() -> None:
    time = Time()
    with pytest.raises(Aborted, match=r"aborted by gitray abort \(requested .* by ana\)"):
        run(time, hold(StepType.WAIT_INTERVAL, seconds=60), Script(time, Control.ABORT, 7), 60)
    assert time.now == 8


def test_a_pause_until_promoted_waits_for_the_promote() -> None:
    time = Time()
    message = run(time, hold(StepType.PAUSE, untilPromoted=True),
                  Script(time, Control.PROMOTE, 3600), None)
    assert message == "promoted at 50 % (requested 2026-12-02T10:00:00Z by ana)"
    assert time.now == 3600


def test_a_timed_pause_ends_early_when_promoted() -> None:
    time = Time()
    run(time, hold(StepType.PAUSE, seconds=300), Script(time, Control.PROMOTE, 30), 300)
    assert time.now == 30


def test_a_pause_until_promoted_cannot_run_without_signals() -> None:
    with pytest.raises(TerminalError, match="needs run records"):
        run(Time(), hold(StepType.PAUSE, untilPromoted=True), None, None)


# ---- analysis -------------------------------------------------------------------------------

CHECKS = [{"name": "success-rate", "type": "success-rate", "min": 99, "minRequests": 20},
          {"name": "latency", "type": "latency", "percentile": 95, "maxMs": 1500,
           "minRequests": 20},
          {"name": "gate", "type": "webhook", "url": "https://ci.example.com/gate",
           "timeoutSeconds": 10}]


def analysis(**params: Any) -> Step:
    base: dict[str, Any] = {
        "cluster": "fruit-14f9f", "previous": "fruit-fd628", "percent": 25, "step": 1,
        "steps": 4, "windowSeconds": 60, "checks": CHECKS, "failureLimit": 2,
        "onFailure": {"trafficTo": "fruit-fd628", "restoreCapacity": 100,
                      "keepFailedCluster": False},
        "backend": {"namespace": "ray-serve", "service": "fruit-14f9f-serve-svc",
                    "port": 8000},
        "metrics": {"url": "http://traefik-metrics.traefik.svc:9100/metrics",
                    "provider": "traefik", "requests": "traefik_service_requests_total",
                    "durations": "traefik_service_request_duration_seconds"}}
    return Step("07-run-analysis", StepType.RUN_ANALYSIS, "fruit-14f9f", {**base, **params})


BEFORE = exposition(100, 1, 800, (90, 98, 100, 101, 101))


def test_an_analysis_measures_its_window_and_passes() -> None:
    time = Time()
    probe = Probe([BEFORE, exposition(224, 2, 950, (190, 220, 224, 225, 226))])
    message = run(time, analysis(), Script(time), None, probe)
    assert message == ("analysis of fruit-14f9f at 25 % over 60 s passed: success-rate "
                       "99.2 % >= 99 % (124 of 125 requests); latency p95 270 ms <= 1500 ms "
                       "(125 requests); gate HTTP 204")
    assert time.now == 60
    assert probe.posted[0]["results"][0] == {"name": "success-rate", "verdict": "passed",
                                             "value": "99.2 %"}


def test_an_analysis_fails_naming_the_check_and_its_value() -> None:
    time = Time()
    probe = Probe([BEFORE, exposition(220, 6, 950, (160, 210, 220, 225, 226))])
    with pytest.raises(AnalysisFailed) as caught:
        run(time, analysis(), Script(time), None, probe)
    assert str(caught.value).startswith("success-rate 96.0 % < 99 % (120 of 125 requests) on "
                                        "fruit-14f9f at 25 % over 60 s")
    assert caught.value.check == "success-rate"


def test_metrics_that_cannot_be_read_fail_the_metrics_checks() -> None:
    time = Time()
    probe = Probe([BEFORE, "<html>not found</html>", 'x{a="1"} 1',
                   'traefik_service_requests_total{code="200" 1'])
    with pytest.raises(AnalysisFailed,
                       match=r"^success-rate no metrics \(line 1: malformed labels\)"):
        run(time, analysis(), Script(time), None, probe)
    assert time.now == 60 + 2 * 2.0  # the window, then two pauses between three tries


def test_an_endpoint_without_the_gateway_metrics_does_not_pass_as_no_traffic() -> None:
    time = Time()
    probe = Probe(["<html>not found</html>"] * 3 + [BEFORE])
    with pytest.raises(AnalysisFailed, match=r"^success-rate no metrics \(no "
                                             r"traefik_service_requests_total samples at http"):
        run(time, analysis(), Script(time), None, probe)


def test_an_abort_during_the_window_ends_the_analysis() -> None:
    time = Time()
    with pytest.raises(Aborted):
        run(time, analysis(), Script(time, Control.ABORT, 10), None, Probe([BEFORE]))


def test_a_webhook_without_an_answer_fails_the_analysis() -> None:
    time = Time()
    probe = Probe([], status=None)
    with pytest.raises(AnalysisFailed, match=r"^gate no answer \(ConnectTimeout\)"):
        run(time, analysis(checks=CHECKS[2:]), Script(time), None, probe)


# ---- capacity and routes --------------------------------------------------------------------

APPS = {"greeter": {"status": "RUNNING", "deployed_app_config": {
    "name": "greeter", "import_path": "app:greeter"}}}
SENT = {"applications": [{"name": "greeter", "import_path": "app:greeter"}]}


@pytest.mark.parametrize(("case", "details", "sent", "expected"), [
    ("the new cluster: its config at the capacity", {"applications": APPS,
                                                     "target_capacity": 50}, SENT,
     {**SENT, "target_capacity": 100}),
    ("the new cluster already so", {"applications": APPS, "target_capacity": 100}, SENT, None),
    ("the old cluster: what it runs", {"applications": APPS, "target_capacity": 100}, None,
     {"applications": [{"name": "greeter", "import_path": "app:greeter"}],
      "target_capacity": 50}),
])
def test_what_setting_a_capacity_sends(case: str, details: dict[str, Any],
                                       sent: dict[str, Any] | None,
                                       expected: dict[str, Any] | None) -> None:
    percent = 50 if sent is None else 100
    assert capacity_config(details, percent, sent) == expected, case


def test_a_cluster_running_nothing_has_no_capacity_to_change() -> None:
    with pytest.raises(TerminalError, match="runs no application"):
        capacity_config({"applications": {}}, 50, None)
    assert capacity_config({"applications": {}, "target_capacity": 50}, 50, None) is None


def route(*conditions: tuple[str, str, int]) -> dict[str, Any]:
    return {"metadata": {"name": "fruit-httproute"},
            "spec": {"rules": [{"backendRefs": [{"name": "b-serve-svc", "weight": 25},
                                                {"name": "a-serve-svc", "weight": 75}]}]},
            "status": {"parents": [{"controllerName": "traefik.io/gateway-controller",
                                    "conditions": [{"type": t, "status": s,
                                                    "observedGeneration": g,
                                                    "reason": "BackendNotFound",
                                                    "message": "service not found"}
                                                   for t, s, g in conditions]}]}}


def test_route_weights_compare_whatever_their_order() -> None:
    assert route_refs(route()) == [("a-serve-svc", 75), ("b-serve-svc", 25)]


def test_a_route_is_accepted_for_its_generation_only() -> None:
    assert route_accepted(route(("Accepted", "True", 4), ("ResolvedRefs", "True", 4)), 4)
    assert not route_accepted(route(("Accepted", "True", 3), ("ResolvedRefs", "True", 3)), 4)
    assert not route_accepted(route(), 4)
    with pytest.raises(TerminalError, match=r"ResolvedRefs False \(BackendNotFound: service "
                                            r"not found\)"):
        route_accepted(route(("Accepted", "True", 4), ("ResolvedRefs", "False", 4)), 4)
