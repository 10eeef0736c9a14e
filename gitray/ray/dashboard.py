"""Reaching a RayCluster's dashboard (Ray Serve REST API) and its pods' Serve proxies. I/O.

A :class:`Resolver` turns a cluster into a base URL, in one of three modes:

- ``service``: in-cluster DNS ``http://<cluster>-head-svc.<ns>.svc:<port named dashboard>``;
- ``pod-ip``:  the head pod's IP and its container port named ``dashboard``;
- ``proxy``:   the API server's service proxy, for use from outside the cluster. Requests go
  through the Kubernetes client's own authenticated transport (:meth:`ClusterApi.request`), so every
  kind of kubeconfig credential works: client certificates, bearer tokens, exec plugins and
  auth-provider tokens.

Ports are looked up by name, never hard-coded. Token-auth clusters get
``x-ray-authorization: Bearer <token>``; the token never appears in errors or logs.

HTTP 401 and 403 are terminal at once, whoever answers them (the API server's RBAC for
``services/proxy``, or a dashboard with token authentication): waiting does not grant a
permission.
"""

from __future__ import annotations

import json as _json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from gitray.core.config import DashboardMode
from gitray.core.errors import TerminalError, TransientError
from gitray.core.http import RawResponse

__all__ = ["ClusterApi", "Resolver", "ServeClient", "head_pod", "named_port"]

_DIRECT_TIMEOUT = httpx.Timeout(15.0, connect=3.0)
_PROXY_TIMEOUT = httpx.Timeout(20.0)
# The PUT returns once Serve's controller has the config; a busy head can take a while.
_DEPLOY_TIMEOUT = httpx.Timeout(60.0, connect=3.0)
_HEALTHZ_TIMEOUT = httpx.Timeout(5.0, connect=2.0)
_DENIED = {401, 403}
_BODY_LIMIT = 4000


class ClusterApi(Protocol):
    """What reaching a dashboard needs from the Kubernetes API (``gitray.k8s.client.Kube``)."""

    def request(self, method: str, path: str, *, body: Any = None,
                params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None,
                timeout_s: float = 20.0) -> RawResponse: ...

    def list(self, api_version: str, kind: str, *, namespace: str | None = None,
             label_selector: str = "") -> tuple[list[dict[str, Any]], str]: ...

    def get_or_none(self, api_version: str, kind: str, namespace: str,
                    name: str) -> dict[str, Any] | None: ...


def named_port(pod: Mapping[str, Any], name: str, default: int) -> int:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == name and port.get("container_port", port.get("containerPort")):
                return int(port.get("container_port") or port.get("containerPort"))
    return default


def head_pod(kube: ClusterApi, namespace: str, cluster: str) -> dict[str, Any] | None:
    pods, _ = kube.list("v1", "Pod", namespace=namespace,
                        label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head")
    return _running_heads(pods).get(cluster)


def _running_heads(pods: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The first running head pod of each cluster (``ray.io/cluster``) among ``pods``."""
    heads: dict[str, dict[str, Any]] = {}
    for p in pods:
        status, meta = p.get("status") or {}, p.get("metadata") or {}
        if status.get("phase") == "Running" and status.get("podIP") \
                and not meta.get("deletionTimestamp"):
            heads.setdefault(str((meta.get("labels") or {}).get("ray.io/cluster") or ""), p)
    return heads


def _pod_url(cluster: str, pod: Mapping[str, Any] | None) -> str:
    if pod is None:
        raise TransientError(f"cluster {cluster} has no running head pod yet")
    return f"http://{_pod_ip(pod)}:{named_port(pod, 'dashboard', 8265)}"


def _pod_ip(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    return str(status.get("podIP") or status.get("pod_ip") or "")



class Transport(Protocol):
    """How a dashboard request travels: straight over HTTP, or through the API server."""

    def request(self, method: str, url: str, *, json: Any = None,
                params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None,
                timeout: httpx.Timeout) -> RawResponse: ...

    def close(self) -> None: ...


class _Direct:
    """Plain HTTP to a pod IP or an in-cluster DNS name."""

    def __init__(self) -> None:
        self._client = httpx.Client()

    def request(self, method: str, url: str, *, json: Any = None,
                params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None,
                timeout: httpx.Timeout) -> RawResponse:
        try:
            r = self._client.request(method, url, json=json, params=params, headers=headers,
                                     timeout=timeout)
        except httpx.HTTPError as e:
            raise TransientError(f"Ray dashboard at {_origin(url)} unreachable: "
                                 f"{type(e).__name__}") from e
        return RawResponse(r.status_code, r.text, api_server=False)

    def close(self) -> None:
        self._client.close()


class _ThroughApiServer:
    """The API server's proxy, with the Kubernetes client's own credentials and TLS."""

    def __init__(self, kube: ClusterApi) -> None:
        self._kube = kube

    def request(self, method: str, url: str, *, json: Any = None,
                params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None,
                timeout: httpx.Timeout) -> RawResponse:
        return self._kube.request(method, url, body=json, params=params, headers=headers,
                                  timeout_s=timeout.read or 20.0)

    def close(self) -> None:
        pass


def _origin(url: str) -> str:
    u = httpx.URL(url)
    return f"{u.scheme}://{u.netloc.decode()}"


def denied(response: RawResponse, where: str, mode: DashboardMode, namespace: str) -> str:
    """One line for a 401/403: which credential or permission is missing, and what to do."""
    if response.api_server:
        return (f"the API server refused gitray's request to {where} through its proxy "
                f"(HTTP {response.status}): {response.message()}. With --dashboard proxy, "
                f"gitray's Kubernetes user needs get and update on services/proxy and get on "
                f"pods/proxy in namespace {namespace}; or run gitray where pod IPs or cluster "
                f"DNS are reachable (--dashboard pod-ip or service)")
    return (f"the Ray dashboard of {where} refused the request (HTTP {response.status}): "
            f"{response.message()}. The cluster requires authentication: give gitray its "
            f"token with --ray-token-file (dashboard mode {mode.value})")


@dataclass(frozen=True)
class Resolver:
    kube: ClusterApi
    mode: DashboardMode = DashboardMode.POD_IP
    token: str | None = None
    cluster_domain: str = "cluster.local"

    def serve_client(self, namespace: str, cluster: str, *, url: str = "") -> ServeClient:
        """The Serve API of ``cluster``'s dashboard (at ``url`` when located already)."""
        return ServeClient(url or self.dashboard_url(namespace, cluster), self._headers(),
                           self._transport(),
                           _PROXY_TIMEOUT if self.mode is DashboardMode.PROXY
                           else _DIRECT_TIMEOUT,
                           where=f"cluster {namespace}/{cluster}",
                           mode=self.mode, namespace=namespace)

    def _headers(self) -> dict[str, str]:
        return {"x-ray-authorization": f"Bearer {self.token}"} if self.token else {}

    def _transport(self) -> Transport:
        if self.mode is DashboardMode.PROXY:
            return _ThroughApiServer(self.kube)
        return _Direct()

    def dashboard_url(self, namespace: str, cluster: str) -> str:
        """The dashboard's base URL: absolute for ``pod-ip`` and ``service``; for ``proxy``, a
        path on the API server."""
        if self.mode is DashboardMode.POD_IP:
            return _pod_url(cluster, head_pod(self.kube, namespace, cluster))
        svc = self.kube.get_or_none("v1", "Service", namespace, f"{cluster}-head-svc")
        return self._service_url(namespace, cluster, svc)

    def locator(self, namespace: str) -> Callable[[str], str]:
        """:meth:`dashboard_url` for any cluster of ``namespace``, from one LIST (its head pods
        with ``pod-ip``, its Services otherwise) instead of one read per cluster: for reading
        many clusters at one moment (health), not for steps that wait on one."""
        if self.mode is DashboardMode.POD_IP:
            pods, _ = self.kube.list("v1", "Pod", namespace=namespace,
                                     label_selector="ray.io/node-type=head")
            heads = _running_heads(pods)
            return lambda cluster: _pod_url(cluster, heads.get(cluster))
        items, _ = self.kube.list("v1", "Service", namespace=namespace)
        services = {str((s.get("metadata") or {}).get("name")): s for s in items}
        return lambda cluster: self._service_url(namespace, cluster,
                                                 services.get(f"{cluster}-head-svc"))

    def _service_url(self, namespace: str, cluster: str,
                     svc: Mapping[str, Any] | None) -> str:
        svc_name = f"{cluster}-head-svc"
        port = 8265
        for p in ((svc or {}).get("spec") or {}).get("ports") or []:
            if p.get("name") == "dashboard":
                port = int(p["port"])
        if self.mode is DashboardMode.SERVICE:
            return f"http://{svc_name}.{namespace}.svc.{self.cluster_domain}:{port}"
        return f"/api/v1/namespaces/{namespace}/services/{svc_name}:dashboard/proxy"

    def proxy_healthy(self, pod: Mapping[str, Any]) -> bool:
        """Whether the Serve proxy on this pod answers ``/-/healthz`` (Serve gating).

        Raises TerminalError when the request is refused (401/403): no pod would ever be
        found healthy."""
        port = named_port(pod, "serve", 8000)
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        if self.mode is DashboardMode.PROXY:
            url = f"/api/v1/namespaces/{namespace}/pods/{meta.get('name')}:{port}/proxy/-/healthz"
        elif _pod_ip(pod):
            url = f"http://{_pod_ip(pod)}:{port}/-/healthz"
        else:
            return False
        transport = self._transport()
        try:
            r = transport.request("GET", url, timeout=_HEALTHZ_TIMEOUT)
        except TransientError:
            return False
        finally:
            transport.close()
        if r.status in _DENIED:
            raise TerminalError(denied(r, f"the Serve proxy of pod {namespace}/"
                                          f"{meta.get('name')}", self.mode, namespace))
        return r.status == 200


class ServeClient:
    """The Ray Serve REST API of one cluster's dashboard."""

    def __init__(self, base_url: str, headers: Mapping[str, str], transport: Transport,
                 timeout: httpx.Timeout, *, where: str = "the cluster",
                 mode: DashboardMode = DashboardMode.POD_IP, namespace: str = "") -> None:
        self.base_url = base_url
        self._transport = transport
        self._timeout = timeout
        self._headers = dict(headers)
        self._where = where
        self._mode = mode
        self._namespace = namespace

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._transport.close()

    def _request(self, method: str, path: str, *, json: Any = None,
                 params: Mapping[str, str] | None = None,
                 timeout: httpx.Timeout | None = None) -> RawResponse:
        r = self._transport.request(method, self.base_url + path, json=json, params=params,
                                    timeout=timeout or self._timeout, headers=self._headers)
        if r.status in _DENIED:
            raise TerminalError(denied(r, self._where, self._mode, self._namespace))
        return r

    def deploy(self, serve_config: Mapping[str, Any]) -> None:
        """PUT the declarative Serve config. 400 is terminal (Serve's validation message)."""
        r = self._request("PUT", "/api/serve/applications/", json=dict(serve_config),
                          timeout=_DEPLOY_TIMEOUT)
        if r.ok:
            return
        body = r.text[:_BODY_LIMIT].strip()
        if r.status in {400, 422} and not r.api_server:
            raise TerminalError(f"Ray Serve rejected the config (HTTP {r.status}): {body}")
        raise TransientError(f"Ray Serve deploy failed (HTTP {r.status}): {r.message()[:300]}")

    def applications(self) -> dict[str, Any]:
        r = self._request("GET", "/api/serve/applications/",
                          params={"api_type": "declarative"})
        if not r.ok:
            raise TransientError(f"Ray Serve status unavailable (HTTP {r.status}): "
                                 f"{r.message()[:300]}")
        try:
            data = _json.loads(r.text)
        except ValueError as e:
            raise TransientError("Ray Serve returned a status that is not JSON") from e
        return data if isinstance(data, dict) else {}

    def deployed_config(self) -> dict[str, Any]:
        """The applications' deployed configs, by name (for checks and ``gitray status``)."""
        apps = self.applications().get("applications") or {}
        return {name: (app or {}).get("deployed_app_config") or {}
                for name, app in apps.items()}
