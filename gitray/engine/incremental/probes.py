"""What an analysis reads over HTTP: the gateway's Prometheus metrics and webhook gates. I/O.

The metrics URL is usually a Service in the cluster (``http://traefik-metrics.traefik.svc:9100
/metrics``). gitray in the cluster dials it; from outside (``--dashboard proxy``, as ``gitray
apply`` from a laptop or CI runs), a URL naming a Service by its cluster DNS name
(``<service>.<namespace>.svc[.<domain>]``) is fetched through the API server's service proxy
with the Kubernetes client's own credentials, as the Ray dashboards are (needs ``get`` on
``services/proxy`` in that namespace). Webhooks are dialled directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from gitray.core.config import DashboardMode
from gitray.core.errors import TransientError
from gitray.ray.dashboard import Resolver

__all__ = ["MAX_METRICS_BYTES", "HttpProbe", "service_proxy_path"]

MAX_METRICS_BYTES = 16 * 1024 * 1024
_METRICS_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


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
