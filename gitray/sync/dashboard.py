"""Reaching a RayCluster's dashboard (Ray Serve REST API) and its pods' Serve proxies. I/O.

A :class:`Resolver` turns a cluster into a base URL, in one of three modes:

- ``service``: in-cluster DNS ``http://<cluster>-head-svc.<ns>.svc:<port named dashboard>``;
- ``pod-ip``:  the head pod's IP and its container port named ``dashboard``;
- ``proxy``:   the API server's service proxy, for use from outside the cluster.

Ports are looked up by name, never hard-coded. Token-auth clusters get
``x-ray-authorization: Bearer <token>``; the token never appears in errors or logs.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx

from gitray.errors import TerminalError, TransientError
from gitray.sync.kube import Kube

__all__ = ["DashboardMode", "Resolver", "ServeClient", "head_pod", "named_port"]

_DIRECT_TIMEOUT = httpx.Timeout(15.0, connect=3.0)
_PROXY_TIMEOUT = httpx.Timeout(20.0)
# The PUT returns once Serve's controller has the config; a busy head can take a while.
_DEPLOY_TIMEOUT = httpx.Timeout(60.0, connect=3.0)
_HEALTHZ_TIMEOUT = httpx.Timeout(5.0, connect=2.0)
_BODY_LIMIT = 4000


class DashboardMode(StrEnum):
    SERVICE = "service"
    POD_IP = "pod-ip"
    PROXY = "proxy"


def named_port(pod: Mapping[str, Any], name: str, default: int) -> int:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == name and port.get("container_port", port.get("containerPort")):
                return int(port.get("container_port") or port.get("containerPort"))
    return default


def head_pod(kube: Kube, namespace: str, cluster: str) -> dict[str, Any] | None:
    pods, _ = kube.list("v1", "Pod", namespace=namespace,
                        label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head")
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and (p.get("status") or {}).get("podIP")
               and not (p.get("metadata") or {}).get("deletionTimestamp")]
    return running[0] if running else None


def _pod_ip(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    return str(status.get("podIP") or status.get("pod_ip") or "")


@dataclass(frozen=True)
class Resolver:
    kube: Kube
    mode: DashboardMode = DashboardMode.POD_IP
    token: str | None = None
    cluster_domain: str = "cluster.local"

    def serve_client(self, namespace: str, cluster: str) -> ServeClient:
        return ServeClient(self.dashboard_url(namespace, cluster), self._headers(),
                           self._auth(), _PROXY_TIMEOUT if self.mode is DashboardMode.PROXY
                           else _DIRECT_TIMEOUT)

    def _headers(self) -> dict[str, str]:
        return {"x-ray-authorization": f"Bearer {self.token}"} if self.token else {}

    def _auth(self) -> httpx.Client | None:
        if self.mode is not DashboardMode.PROXY:
            return None
        cfg = self.kube.api_client.configuration
        headers = {}
        if cfg.api_key.get("authorization"):
            headers["authorization"] = cfg.api_key["authorization"]
        # One SSL context with the CA *and* the client certificate: httpx 0.28 ignores
        # `cert=` when `verify` is a path, so the API server saw system:anonymous (403).
        ctx = (ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert
               else ssl.create_default_context())
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        return httpx.Client(verify=ctx, headers=headers, timeout=_PROXY_TIMEOUT)

    def dashboard_url(self, namespace: str, cluster: str) -> str:
        if self.mode is DashboardMode.POD_IP:
            pod = head_pod(self.kube, namespace, cluster)
            if pod is None:
                raise TransientError(f"cluster {cluster} has no running head pod yet")
            return f"http://{_pod_ip(pod)}:{named_port(pod, 'dashboard', 8265)}"
        svc_name = f"{cluster}-head-svc"
        svc = self.kube.get_or_none("v1", "Service", namespace, svc_name)
        port = 8265
        for p in ((svc or {}).get("spec") or {}).get("ports") or []:
            if p.get("name") == "dashboard":
                port = int(p["port"])
        if self.mode is DashboardMode.SERVICE:
            return f"http://{svc_name}.{namespace}.svc.{self.cluster_domain}:{port}"
        host = self.kube.api_client.configuration.host.rstrip("/")
        return f"{host}/api/v1/namespaces/{namespace}/services/{svc_name}:dashboard/proxy"

    def proxy_healthy(self, pod: Mapping[str, Any]) -> bool:
        """Whether the Serve proxy on this pod answers ``/-/healthz`` (Serve gating)."""
        port = named_port(pod, "serve", 8000)
        meta = pod.get("metadata") or {}
        if self.mode is DashboardMode.PROXY:
            host = self.kube.api_client.configuration.host.rstrip("/")
            url = (f"{host}/api/v1/namespaces/{meta.get('namespace')}/pods/"
                   f"{meta.get('name')}:{port}/proxy/-/healthz")
        else:
            if not _pod_ip(pod):
                return False
            url = f"http://{_pod_ip(pod)}:{port}/-/healthz"
        client = self._auth() or httpx.Client(timeout=_HEALTHZ_TIMEOUT)
        try:
            with client:
                return client.get(url).status_code == 200
        except httpx.HTTPError:
            return False


class ServeClient:
    """The Ray Serve REST API of one cluster's dashboard."""

    def __init__(self, base_url: str, headers: Mapping[str, str], client: httpx.Client | None,
                 timeout: httpx.Timeout) -> None:
        self.base_url = base_url
        self._client = client or httpx.Client(timeout=timeout)
        self._headers = dict(headers)

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = self.base_url + path
        try:
            return self._client.request(method, url, headers=self._headers, **kwargs)
        except httpx.HTTPError as e:
            raise TransientError(f"Ray dashboard at {self.base_url} unreachable: "
                                 f"{type(e).__name__}") from None

    def deploy(self, serve_config: Mapping[str, Any]) -> None:
        """PUT the declarative Serve config. 400 is terminal (Serve's validation message)."""
        r = self._request("PUT", "/api/serve/applications/", json=dict(serve_config),
                          timeout=_DEPLOY_TIMEOUT)
        if r.is_success:
            return
        body = r.text[:_BODY_LIMIT].strip()
        if r.status_code in {400, 422}:
            raise TerminalError(f"Ray Serve rejected the config (HTTP {r.status_code}): {body}")
        raise TransientError(f"Ray Serve deploy failed (HTTP {r.status_code}): {body[:300]}")

    def applications(self) -> dict[str, Any]:
        r = self._request("GET", "/api/serve/applications/",
                          params={"api_type": "declarative"})
        if not r.is_success:
            raise TransientError(f"Ray Serve status unavailable (HTTP {r.status_code})")
        try:
            data = r.json()
        except ValueError:
            raise TransientError("Ray Serve returned a status that is not JSON") from None
        return data if isinstance(data, dict) else {}

    def deployed_config(self) -> dict[str, Any]:
        """The applications' deployed configs, by name (for checks and ``gitray status``)."""
        apps = self.applications().get("applications") or {}
        return {name: (app or {}).get("deployed_app_config") or {}
                for name, app in apps.items()}

