"""What an analysis reads over HTTP: the gateway's Prometheus metrics and webhook gates. I/O.

The metrics URL is usually a Service in the cluster (``http://traefik-metrics.traefik.svc:9100
/metrics``). gitray in the cluster dials it; from outside (``--dashboard proxy``, as ``gitray
apply`` from a laptop or CI runs), a URL naming a Service by its cluster DNS name
(``<service>.<namespace>.svc[.<domain>]``) is fetched through the API server's service proxy
with the Kubernetes client's own credentials, as the Ray dashboards are (needs ``get`` on
``services/proxy`` in that namespace). Webhooks are dialled directly.

A blue-green gate's probe (``serve_get``) sends GET requests to the new cluster's own serve
Service the same way (through the service proxy, or to its cluster DNS name in the cluster);
:func:`probe_traffic` turns the answers into the :class:`Traffic` the success-rate and latency
checks judge (no answer counts as a server error). After the switch the gate also reads Ray's
metrics of every pod of the new cluster (``serve_metrics``: through the API server's pod proxy,
``get`` on ``pods/proxy``, or straight to the pod IP in the cluster) to count all the traffic its
Serve answered (``gitray.engine.incremental.servemetrics``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from gitray.core.config import DashboardMode
from gitray.core.errors import TransientError
from gitray.engine.incremental.gatewaymetrics import Traffic
from gitray.engine.incremental.servemetrics import METRICS_PORT
from gitray.ray.dashboard import Resolver, named_port

__all__ = ["MAX_METRICS_BYTES", "HttpProbe", "probe_traffic", "service_proxy_path"]

MAX_METRICS_BYTES = 16 * 1024 * 1024
_METRICS_TIMEOUT = httpx.Timeout(10.0, connect=3.0)
_PROBE_TIMEOUT_S = 10.0


def probe_traffic(codes: list[int | None], durations: list[float]) -> Traffic:
    """What a probe's requests measured: their count, the server errors (5xx, or no answer)
    and their durations as a cumulative histogram (one bound per request)."""
    errors = sum(1 for c in codes if c is None or c >= 500)
    ordered = sorted(durations)
    buckets = tuple((d, float(i + 1)) for i, d in enumerate(ordered))
    if buckets:
        buckets += ((float("inf"), float(len(ordered))),)
    return Traffic(float(len(codes)), float(errors), buckets)


def service_proxy_path(url: str) -> str | None:
    """The API server's service-proxy path of ``url`` when it names a Service by its cluster
    DNS name (``http://<svc>.<ns>.svc[.<domain>][:port]/path``); else None."""
    try:
        u = httpx.URL(url)
    except httpx.InvalidURL:
        return None
    parts = u.host.split(".")
    if len(parts) < 3 or parts[2] != "svc" or not parts[0] or not parts[1]:
        return None
    port = u.port or (443 if u.scheme == "https" else 80)
    scheme = "https:" if u.scheme == "https" else ""
    query = f"?{u.query.decode()}" if u.query else ""
    return (f"/api/v1/namespaces/{parts[1]}/services/{scheme}{parts[0]}:{port}/proxy"
            f"{u.path}{query}")


class HttpProbe:
    """Metrics and webhooks; in-cluster metrics through the API server when the dashboards
    are reached that way (``resolver.mode`` proxy)."""

    def __init__(self, resolver: Resolver) -> None:
        self._resolver = resolver

    def metrics(self, url: str) -> str:
        """The exposition text at ``url``; ``TransientError`` when it cannot be read."""
        proxy = self._resolver.mode is DashboardMode.PROXY
        path = service_proxy_path(url) if proxy else None
        if path is not None:
            r = self._resolver.kube.request("GET", path, timeout_s=_METRICS_TIMEOUT.read or 10.0)
            status, text = r.status, r.text
        else:
            try:
                with httpx.Client(timeout=_METRICS_TIMEOUT) as client:
                    response = client.get(url, headers={"Accept": "text/plain"})
            except httpx.HTTPError as e:
                raise TransientError(f"gateway metrics at {url} unreachable: "
                                     f"{type(e).__name__}") from e
            status, text = response.status_code, response.text
        if not 200 <= status < 300:
            raise TransientError(f"gateway metrics at {url}: HTTP {status}")
        if len(text) > MAX_METRICS_BYTES:
            raise TransientError(f"gateway metrics at {url} are larger than "
                                 f"{MAX_METRICS_BYTES // (1024 * 1024)} MiB")
        return text

    def webhook(self, url: str, payload: Mapping[str, Any], timeout_s: float
                ) -> tuple[int | None, str]:
        """POST ``payload`` to ``url``: (HTTP status, "") or (None, why there was none)."""
        try:
            with httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))) \
                    as client:
                return client.post(url, json=dict(payload)).status_code, ""
        except httpx.HTTPError as e:
            return None, type(e).__name__

    def serve_metrics(self, namespace: str, cluster: str) -> dict[str, str]:
        """The metrics exposition of every running Ray pod of ``cluster`` (pod name -> text),
        from its metrics port; ``TransientError`` naming the pod that could not be read."""
        pods, _ = self._resolver.kube.list("v1", "Pod", namespace=namespace,
                                           label_selector=f"ray.io/cluster={cluster}")
        out: dict[str, str] = {}
        for pod in pods:
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            if status.get("phase") != "Running" or meta.get("deletionTimestamp"):
                continue
            name, port = str(meta.get("name")), named_port(pod, "metrics", METRICS_PORT)
            if self._resolver.mode is DashboardMode.PROXY:
                r = self._resolver.kube.request(
                    "GET", f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics",
                    timeout_s=_METRICS_TIMEOUT.read or 10.0)
                code, text = r.status, r.text
            else:
                try:
                    with httpx.Client(timeout=_METRICS_TIMEOUT) as client:
                        response = client.get(f"http://{status.get('podIP')}:{port}/metrics")
                except httpx.HTTPError as e:
                    raise TransientError(f"Ray metrics of pod {name} unreachable: "
                                         f"{type(e).__name__}") from e
                code, text = response.status_code, response.text
            if not 200 <= code < 300 or len(text) > MAX_METRICS_BYTES:
                raise TransientError(f"Ray metrics of pod {name}: HTTP {code}"
                                     + (" (too large)" if len(text) > MAX_METRICS_BYTES else ""))
            out[name] = text
        if not out:
            raise TransientError(f"no running Ray pod of {cluster} to read metrics from")
        return out

    def serve_get(self, namespace: str, service: str, port: int, path: str) -> int | None:
        """GET ``path`` from a serve Service: its HTTP status, None without an answer."""
        if self._resolver.mode is DashboardMode.PROXY:
            try:
                r = self._resolver.kube.request(
                    "GET", f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy"
                    f"{path}", timeout_s=_PROBE_TIMEOUT_S)
            except TransientError:
                return None
            return r.status
        try:
            with httpx.Client(timeout=_PROBE_TIMEOUT_S) as client:
                return client.get(f"http://{service}.{namespace}.svc:{port}{path}").status_code
        except httpx.HTTPError:
            return None
