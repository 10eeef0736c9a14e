"""A gateway's Prometheus metrics over an analysis window, and the checks judged from them.

The samples are written by hand in the Prometheus text format (0.0.4) as Traefik exposes its
per-service metrics (labels ``code``, ``method``, ``protocol``, ``service``; Gateway API backends
named ``<namespace>-<service>-<port>@kubernetesgateway``; Traefik's default duration buckets
0.1, 0.3, 1.2, 5). Not yet compared with a running Traefik.
"""

from __future__ import annotations

import math

import pytest

from gitray.core.errors import AnalysisFailed
from gitray.engine.incremental.checks import (
    Verdict,
    judge,
    latency,
    serve_health,
    success_rate,
    unmeasured,
    webhook,
)
from gitray.engine.incremental.gatewaymetrics import (
    Series,
    Traffic,
    parse_text,
    quantile,
    traefik_service,
    window,
)

REQ, DUR = "traefik_service_requests_total", "traefik_service_request_duration_seconds"
NEW = traefik_service("ray-serve", "fruit-14f9f-serve-svc", 8000)
OLD = traefik_service("ray-serve", "fruit-fd628-serve-svc", 8000)


def exposition(new_ok: int, new_5xx: int, old_ok: int, buckets: tuple[int, ...]) -> str:
    """Traefik's per-service counters and histogram: ``buckets`` are the new service's
    cumulative counts for le 0.1, 0.3, 1.2, 5 and +Inf."""
    svc = f'{NEW}@kubernetesgateway'
    lines = [
        "# HELP traefik_service_requests_total How many HTTP requests processed on a service,"
        " partitioned by status code, protocol, and method.",
        "# TYPE traefik_service_requests_total counter",
        f'{REQ}{{code="200",method="GET",protocol="http",service="{svc}"}} {new_ok}',
        f'{REQ}{{code="503",method="GET",protocol="http",service="{svc}"}} {new_5xx}',
        f'{REQ}{{code="200",method="GET",protocol="http",'
        f'service="{OLD}@kubernetesgateway"}} {old_ok}',
        f'{REQ}{{code="500",method="GET",protocol="http",'
        f'service="{OLD}@kubernetesgateway"}} 7',
        "# TYPE traefik_service_request_duration_seconds histogram",
    ]
    for le, count in zip(("0.1", "0.3", "1.2", "5", "+Inf"), buckets, strict=True):
        lines.append(f'{DUR}_bucket{{code="200",method="GET",protocol="http",'
                     f'service="{svc}",le="{le}"}} {count}')
    lines += [f'{DUR}_sum{{code="200",method="GET",protocol="http",service="{svc}"}} 12.5',
              f'{DUR}_count{{code="200",method="GET",protocol="http",service="{svc}"}} '
              f"{buckets[-1]}",
              "traefik_config_reloads_total 3",
              "traefik_open_connections{entrypoint=\"web\",protocol=\"TCP\"} 2 1764500000000"]
    return "\n".join(lines) + "\n"


# ---- the text format ------------------------------------------------------------------------


def test_samples_are_read_with_their_labels_and_comments_are_skipped() -> None:
    samples = parse_text(exposition(120, 3, 900, (100, 115, 119, 120, 120)))
    key = Series(REQ, (("code", "503"), ("method", "GET"), ("protocol", "http"),
                       ("service", f"{NEW}@kubernetesgateway")))
    assert samples[key] == 3
    assert samples[Series("traefik_config_reloads_total")] == 3
    assert samples[Series("traefik_open_connections",
                          (("entrypoint", "web"), ("protocol", "TCP")))] == 2  # timestamp


def test_only_the_metrics_asked_for_are_kept() -> None:
    samples = parse_text(exposition(1, 0, 1, (1, 1, 1, 1, 1)), (REQ,))
    assert {s.name for s in samples} == {REQ}


def test_label_values_may_hold_escapes_and_values_may_be_special() -> None:
    text = 'm{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb"} +Inf\nn NaN\no -Inf\n'
    samples = parse_text(text)
    assert samples[Series("m", (("nl", "a\nb"), ("path", "C:\\dir"),
                                ("quote", 'say "hi"')))] == math.inf
    assert math.isnan(samples[Series("n")]) and samples[Series("o")] == -math.inf


@pytest.mark.parametrize(("text", "line"), [
    ("ok 1\nbroken{a=\"x\"}\n", 2),
    ("a{b=c} 1\n", 1),
    ("a{b=\"unterminated} 1\n", 1),
    ("a 1\nb twelve\n", 2),
])
def test_a_malformed_line_is_named(text: str, line: int) -> None:
    with pytest.raises(ValueError, match=f"line {line}"):
        parse_text(text)


# ---- a window -------------------------------------------------------------------------------


def test_the_window_counts_what_the_new_backend_received_in_between() -> None:
    before = parse_text(exposition(100, 1, 800, (90, 98, 100, 101, 101)))
    after = parse_text(exposition(220, 6, 950, (160, 210, 220, 225, 226)))
    traffic = window(before, after, NEW, REQ, DUR)
    assert (traffic.requests, traffic.server_errors) == (125, 5)  # the old backend's left out
    assert traffic.buckets == ((0.1, 70), (0.3, 112), (1.2, 120), (5.0, 124),
                               (math.inf, 125))
    assert traffic.success_rate == pytest.approx(96.0)


def test_a_counter_that_went_down_was_reset_and_counts_whole() -> None:
    before = parse_text(exposition(5000, 40, 1, (4000, 4900, 5000, 5040, 5040)))
    after = parse_text(exposition(30, 2, 1, (20, 30, 32, 32, 32)))  # the gateway restarted
    traffic = window(before, after, NEW, REQ, DUR)
    assert (traffic.requests, traffic.server_errors) == (32, 2)


def test_a_series_that_appeared_during_the_window_counts_from_zero() -> None:
    traffic = window({}, parse_text(exposition(10, 1, 5, (9, 11, 11, 11, 11))), NEW, REQ, DUR)
    assert (traffic.requests, traffic.server_errors) == (11, 1)


def test_the_backend_is_matched_with_or_without_a_provider_suffix() -> None:
    plain = {Series(REQ, (("code", "200"), ("service", NEW))): 4.0}
    assert window({}, plain, NEW, REQ, DUR).requests == 4
    other = {Series(REQ, (("code", "200"), ("service", NEW + "-x@kubernetesgateway"))): 4.0}
    assert window({}, other, NEW, REQ, DUR).requests == 0


@pytest.mark.parametrize(("q", "expected"), [
    (0.5, 0.1 * 62.5 / 70),  # inside the first bucket, from 0
    (0.95, 0.3 + 0.9 * (118.75 - 112) / 8),  # inside (0.3, 1.2]
    (1.0, 5.0),  # the top of the highest bucket with requests
])
def test_a_quantile_is_interpolated_inside_its_bucket(q: float, expected: float) -> None:
    buckets = ((0.1, 70.0), (0.3, 112.0), (1.2, 120.0), (5.0, 125.0), (math.inf, 125.0))
    assert quantile(q, buckets) == pytest.approx(expected)


def test_a_quantile_beyond_the_last_bound_is_that_bound_and_nothing_has_none() -> None:
    assert quantile(0.99, ((0.1, 1.0), (5.0, 2.0), (math.inf, 10.0))) == 5.0
    assert quantile(0.5, ((0.1, 0.0), (math.inf, 0.0))) is None
    assert quantile(0.5, ()) is None


# ---- checks ---------------------------------------------------------------------------------

RATE = {"name": "success-rate", "type": "success-rate", "min": 99, "minRequests": 20}
P95 = {"name": "latency", "type": "latency", "percentile": 95, "maxMs": 300, "minRequests": 20}
BUCKETS = ((0.1, 70.0), (0.3, 112.0), (1.2, 120.0), (5.0, 124.0), (math.inf, 125.0))


@pytest.mark.parametrize(("traffic", "verdict", "text"), [
    (Traffic(125, 5), Verdict.FAILED, "success-rate 96.0 % < 99 % (120 of 125 requests)"),
    (Traffic(125, 1), Verdict.PASSED, "success-rate 99.2 % >= 99 % (124 of 125 requests)"),
    (Traffic(12, 6), Verdict.INCONCLUSIVE, "success-rate 12 requests (fewer than minRequests "
                                          "20)"),
    (Traffic(0, 0), Verdict.INCONCLUSIVE, "success-rate 0 requests (fewer than minRequests "
                                         "20)"),
])
def test_success_rate(traffic: Traffic, verdict: Verdict, text: str) -> None:
    result = success_rate(RATE, traffic)
    assert (result.verdict, result.describe()) == (verdict, text)


def test_latency_fails_above_its_limit_and_passes_below() -> None:
    slow = latency(P95, Traffic(125, 0, BUCKETS))
    assert (slow.verdict, slow.describe()) == (Verdict.FAILED,
                                               "latency p95 1059 ms > 300 ms (125 requests)")
    fast = latency({**P95, "percentile": 50}, Traffic(125, 0, BUCKETS))
    assert (fast.verdict, fast.value) == (Verdict.PASSED, "p50 89 ms")
    few = latency(P95, Traffic(5, 0, ((0.1, 5.0), (math.inf, 5.0))))
    assert few.verdict is Verdict.INCONCLUSIVE


@pytest.mark.parametrize(("reported", "verdict", "value"), [
    ({"applications": {"greeter": {"status": "RUNNING", "deployments": {
        "Greeter": {"status": "HEALTHY"}, "Ingress": {"status": "UPSCALING"}}}}},
     Verdict.PASSED, "1 application(s) RUNNING"),
    ({"applications": {"greeter": {"status": "RUNNING", "deployments": {
        "Greeter": {"status": "UNHEALTHY"}}}}},
     Verdict.FAILED, "deployment greeter/Greeter UNHEALTHY"),
    ({"applications": {"calc": {"status": "DEPLOYING"}, "greeter": {"status": "RUNNING"}}},
     Verdict.FAILED, "application calc DEPLOYING"),
    ({"applications": {}}, Verdict.FAILED, "no Serve applications"),
])
def test_serve_health(reported: dict[str, object], verdict: Verdict, value: str) -> None:
    result = serve_health("serve-health", reported)
    assert (result.verdict, result.value) == (verdict, value)


def test_a_webhook_passes_on_2xx_only_and_fails_without_an_answer() -> None:
    assert webhook("gate", 204).verdict is Verdict.PASSED
    assert webhook("gate", 409).describe() == "gate HTTP 409"
    assert webhook("gate", None, "ConnectTimeout").describe() == \
        "gate no answer (ConnectTimeout)"


def test_a_metrics_check_without_metrics_fails() -> None:
    assert unmeasured(RATE, "HTTP 503").describe() == "success-rate no metrics (HTTP 503)"


def test_an_analysis_fails_naming_the_first_failed_check_and_its_value() -> None:
    results = [serve_health("serve-health", {"applications": {"a": {"status": "RUNNING"}}}),
               success_rate(RATE, Traffic(125, 5)), webhook("gate", 500)]
    with pytest.raises(AnalysisFailed) as caught:
        judge(results, "fruit-14f9f at 25 % over 60 s")
    assert str(caught.value) == ("success-rate 96.0 % < 99 % (120 of 125 requests) on "
                                 "fruit-14f9f at 25 % over 60 s; gate HTTP 500")
    assert (caught.value.check, caught.value.value) == ("success-rate", "96.0 %")


def test_inconclusive_checks_do_not_fail_an_analysis() -> None:
    message = judge([success_rate(RATE, Traffic(3, 3))], "fruit-14f9f at 25 % over 60 s")
    assert message == ("analysis of fruit-14f9f at 25 % over 60 s passed: success-rate "
                       "3 requests (fewer than minRequests 20)")


def test_the_service_name_is_the_one_traefik_3_6_12_reports() -> None:
    """As a running Traefik v3.6.12 labelled a backend of a test's HTTPRoute (the analysis had
    counted 0 requests while the name lacked ``-http``)."""
    line = ('traefik_service_requests_total{code="200",method="GET",protocol="http",'
            'service="t-1ce0c62f-fruit-9e130-serve-svc-http-8000@kubernetesgateway"} 205\n')
    name = traefik_service("t-1ce0c62f", "fruit-9e130-serve-svc", 8000)
    assert name == "t-1ce0c62f-fruit-9e130-serve-svc-http-8000"
    traffic = window(parse_text(""), parse_text(line), name, REQ, DUR)
    assert traffic.requests == 205
