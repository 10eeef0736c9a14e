"""Ray Serve's own request counters on one cluster: all the HTTP traffic its Serve answered,
whoever sent it. Pure, no I/O.

A blue-green gate after the switch judges the new cluster on the requests its own probe sent
*and* on everything the serve Service brought it (real traffic). The latter comes from Ray's
metrics, which every Ray pod exports in the Prometheus text format on its metrics port (KubeRay:
the container port named ``metrics``, 8080; path ``/metrics``):

- ``ray_serve_num_http_requests_total`` — a counter per ``route``, ``method``, ``application``
  and ``status_code``, counted by the Serve proxy that answered;
- ``ray_serve_http_request_latency_ms_bucket`` — a cumulative histogram, bounds (``le``) in ms.

Each pod's proxy counts what it answered, so the cluster's traffic is the sum over its pods:
:func:`merge` tells their series apart by a ``pod`` label before :func:`served` takes the
difference of two scrapes. As Ray's own Serve dashboard does, the proxy's own routes
(``/-/healthz``, ``/-/routes``: KubeRay's probes) and requests no application matched (404s,
``application=""``) are not counted as traffic. Ray hands its metrics to the exporter every few
seconds (``metrics_report_interval_ms``, 10 s by default), so both scrapes lag the requests by
up to that: the window counted is the analysis window, shifted by that lag.
"""

from __future__ import annotations

from collections.abc import Mapping

from gitray.engine.incremental.gatewaymetrics import Samples, Series, Traffic, counted

__all__ = ["LATENCY_BUCKETS", "METRICS_PORT", "NAMES", "REQUESTS", "merge", "served"]

REQUESTS = "ray_serve_num_http_requests_total"
LATENCY_BUCKETS = "ray_serve_http_request_latency_ms_bucket"
NAMES = (REQUESTS, LATENCY_BUCKETS)
METRICS_PORT = 8080  # KubeRay's default metrics port of every Ray container


def merge(scrapes: Mapping[str, Samples]) -> dict[Series, float]:
    """The samples of every pod's scrape (pod name -> samples) as one set, each series
    labelled with its ``pod``."""
    out: dict[Series, float] = {}
    for pod, samples in scrapes.items():
        for series, value in samples.items():
            labels = tuple(sorted((*(p for p in series.labels if p[0] != "pod"), ("pod", pod))))
            out[Series(series.name, labels)] = value
    return out


def _traffic(series: Series) -> bool:
    return bool(series.label("application")) and not series.label("route").startswith("/-/")


def served(before: Samples, after: Samples) -> Traffic:
    """What the cluster's Serve answered between two merged scrapes (``before``, ``after``):
    its requests, the 5xx among them and their durations."""
    return counted(before, after, _traffic, REQUESTS, LATENCY_BUCKETS, code_label="status_code",
                   le_seconds=0.001)
