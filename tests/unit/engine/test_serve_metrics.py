"""All the traffic a cluster's Serve answered, from Ray's own counters, and the blue-green gate
after the switch that judges it besides its own probe.

The expositions are written by hand in the Prometheus text format as a Ray pod's metrics port
exports Serve's metrics (names and labels read from Ray 2.60's
``serve/_private/request_ingress_metrics.py`` and its Serve dashboard panels; default tags such
as ``SessionName`` included). The gate's analysis (``gitray.engine.incremental.traffic``) runs
with a stand-in for its HTTP probe that hands in the probe's answers and the pods' expositions:
no Kubernetes API, no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gitray.core.errors import AnalysisFailed, TransientError
from gitray.engine.incremental.gatewaymetrics import parse_text
from gitray.engine.incremental.servemetrics import NAMES, merge, served
from gitray.plans.plan import Step
from gitray.plans.steptypes import StepType
from tests.unit.engine.test_traffic_steps import Script, Time, traffic

B = "fruit-14f9f"
BUCKETS_MS = ("100", "500", "1000", "+Inf")


def pod_exposition(ok: int, failed: int, health: int = 0, unmatched: int = 0,
                   buckets: tuple[int, ...] = ()) -> str:
    """One pod's Serve counters: ``ok`` 200s and ``failed`` 500s of /hello, ``health``
    KubeRay probes of /-/healthz, ``unmatched`` 404s no application matched; ``buckets`` the
    cumulative latency counts of /hello for le 100, 500, 1000 ms and +Inf."""
    tags = 'Component="core_worker",SessionName="session_2026"'
    req = "ray_serve_num_http_requests_total"
    lines = ["# TYPE ray_serve_num_http_requests_total counter",
             f'{req}{{{tags},application="hello",method="GET",route="/hello",'
             f'status_code="200"}} {ok}',
             f'{req}{{{tags},application="hello",method="GET",route="/hello",'
             f'status_code="500"}} {failed}',
             f'{req}{{{tags},application="",method="GET",route="/-/healthz",'
             f'status_code="200"}} {health}',
             f'{req}{{{tags},application="",method="GET",route="",status_code="404"}} '
             f"{unmatched}",
             "# TYPE ray_serve_http_request_latency_ms histogram"]
    for le, count in zip(BUCKETS_MS, buckets or (0,) * len(BUCKETS_MS), strict=True):
        lines.append(f'ray_serve_http_request_latency_ms_bucket{{{tags},application="hello",'
                     f'method="GET",route="/hello",status_code="200",le="{le}"}} {count}')
    lines.append('ray_node_cpu_utilization{ip="198.18.0.2"} 12.5')
    return "\n".join(lines) + "\n"


def scrape(**pods: str) -> dict[Any, float]:
    return merge({pod: parse_text(text, NAMES) for pod, text in pods.items()})


# ---- counting -------------------------------------------------------------------------------


def test_the_traffic_is_what_serve_answered_on_all_pods_between_two_scrapes() -> None:
    before = scrape(head=pod_exposition(20, 0, health=50), worker=pod_exposition(5, 0))
    after = scrape(head=pod_exposition(60, 3, health=90, unmatched=4),
                   worker=pod_exposition(25, 1))
    counted = served(before, after)
    assert (counted.requests, counted.server_errors) == (64.0, 4.0)  # 43 + 21; 3 + 1
    assert counted.success_rate == pytest.approx(93.75)


def test_kuberays_probes_and_unmatched_paths_are_not_traffic() -> None:
    counted = served(scrape(head=pod_exposition(10, 0)),
                     scrape(head=pod_exposition(10, 0, health=500, unmatched=30)))
    assert counted.requests == 0 and counted.success_rate is None


def test_a_pod_that_came_or_restarted_counts_its_whole_counters() -> None:
    before = scrape(head=pod_exposition(100, 10))
    after = scrape(head=pod_exposition(4, 1), worker=pod_exposition(6, 0))  # head restarted
    counted = served(before, after)
    assert (counted.requests, counted.server_errors) == (11.0, 1.0)


def test_latency_bounds_in_ms_become_seconds() -> None:
    counted = served(scrape(head=pod_exposition(0, 0, buckets=(0, 0, 0, 0))),
                     scrape(head=pod_exposition(10, 0, buckets=(4, 9, 10, 10))))
    assert counted.buckets == ((0.1, 4.0), (0.5, 9.0), (1.0, 10.0), (float("inf"), 10.0))


def test_the_same_series_on_two_pods_stay_apart() -> None:
    both = scrape(a=pod_exposition(1, 0), b=pod_exposition(1, 0))
    assert len(both) == 2 * len(scrape(a=pod_exposition(1, 0)))


# ---- the gate after the switch ----------------------------------------------------------------


class GateProbe:
    """The gate's probe answers ``codes`` (in turn) and each pod's metrics ``expositions``
    (one mapping per read; an exception is raised)."""

    def __init__(self, codes: list[int | None], expositions: list[Any]) -> None:
        self.codes, self.expositions = codes, expositions
        self.metrics_reads: list[str] = []

    def serve_get(self, namespace: str, service: str, port: int, path: str) -> int | None:
        return self.codes.pop(0)

    def serve_metrics(self, namespace: str, cluster: str) -> Mapping[str, str]:
        self.metrics_reads.append(cluster)
        answer = self.expositions.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


def gate(which: str) -> Step:
    return Step("12-run-analysis", StepType.RUN_ANALYSIS, B, {
        "cluster": B, "previous": "fruit-fd628", "percent": 100 if which == "after" else 0,
        "gate": f"{which}-switch", "windowSeconds": 30,
        "checks": [{"name": "success-rate", "type": "success-rate", "min": 99,
                    "minRequests": 10}],
        "failureLimit": 1,
        "backend": {"namespace": "ray", "service": f"{B}-serve-svc", "port": 8000},
        "onFailure": {"trafficTo": "fruit-fd628", "keepFailedCluster": False,
                      "switchBack": which == "after"},
        "probe": {"path": "/hello", "requests": 20, "port": 8000}})


def analyse(step: Step, probe: GateProbe) -> str:
    time = Time()
    return traffic(time, probe).run("ray", step, lambda _line: None, None, Script(time))


def test_real_traffic_failing_after_the_switch_fails_the_gate_though_its_probe_passed() -> None:
    probe = GateProbe([200] * 20, [{"head": pod_exposition(20, 0)},
                                   {"head": pod_exposition(95, 5)}])
    with pytest.raises(AnalysisFailed) as caught:
        analyse(gate("after"), probe)
    assert str(caught.value) == (
        f"success-rate 93.8 % < 99 % (75 of 80 requests) at Serve, all traffic on {B} after "
        "the switch over 30 s")
    assert caught.value.check == "success-rate" and caught.value.value == "93.8 %"
    assert probe.metrics_reads == [B, B]


def test_a_passing_gate_says_what_both_measures_counted() -> None:
    probe = GateProbe([200] * 20, [{"head": pod_exposition(20, 0)},
                                   {"head": pod_exposition(100, 0)}])
    assert analyse(gate("after"), probe) == (
        f"analysis of {B} after the switch over 30 s passed: success-rate 100.0 % >= 99 % "
        "(80 of 80 requests) at Serve, all traffic; success-rate 100.0 % >= 99 % (20 of 20 "
        "requests)")


def test_a_failing_probe_fails_the_gate_whatever_serve_counted() -> None:
    probe = GateProbe([200, 500] * 10, [{"head": pod_exposition(0, 0)},
                                        {"head": pod_exposition(5, 0)}])
    with pytest.raises(AnalysisFailed, match=r"^success-rate 50\.0 % < 99 % \(10 of 20 "
                                             r"requests\) on "):
        analyse(gate("after"), probe)


def test_serve_counters_that_cannot_be_read_leave_the_probe_to_judge() -> None:
    probe = GateProbe([200] * 20, [TransientError("Ray metrics of pod h: HTTP 503"),
                                   {"head": pod_exposition(1, 0)}])
    assert analyse(gate("after"), probe) == (
        f"analysis of {B} after the switch over 30 s passed: success-rate no Serve metrics "
        "(Ray metrics of pod h: HTTP 503); success-rate 100.0 % >= 99 % (20 of 20 requests)")


def test_before_the_switch_only_the_probe_counts() -> None:
    probe = GateProbe([200] * 20, [])
    assert analyse(gate("before"), probe).endswith(": success-rate 100.0 % >= 99 % (20 of 20 "
                                                   "requests)")
    assert probe.metrics_reads == []


def test_a_gate_without_success_rate_or_latency_reads_no_serve_counters() -> None:
    step = gate("after")
    step = Step(step.id, step.type, step.target, {**step.params, "checks": []})
    probe = GateProbe([], [])
    assert analyse(step, probe) == f"analysis of {B} after the switch over 30 s passed: "
    assert probe.metrics_reads == []
