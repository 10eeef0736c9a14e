"""Connecting to the API server and what its failures mean: the kubeconfig or the pod's
service account, the namespace kubectl would use, the bound on discovery requests, and the
mapping of API errors onto gitray's error tree (see ``gitray.k8s.client``). With
``gitray.k8s.client``, the only modules that import the Kubernetes client.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gitray.core.errors import (
    ConfigError,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    TransientError,
)
from gitray.k8s.settings import KubeSettings

__all__ = [
    "DiscoveryTimeout",
    "api_client_for",
    "api_error",
    "default_namespace",
    "in_cluster",
    "timeout_for_this_thread",
    "why_unreachable",
]

_POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def in_cluster(settings: KubeSettings) -> bool:
    return not settings.kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def default_namespace(settings: KubeSettings | None = None) -> str:
    """The namespace kubectl would use: in a pod, the pod's own; otherwise the kubeconfig
    context's (``--context`` or the current one), and ``default`` when it names none.
    No connection is made."""
    settings = settings or KubeSettings()
    if in_cluster(settings):
        try:
            return _POD_NAMESPACE_FILE.read_text().strip() or "default"
        except OSError:
            return "default"
    try:
        contexts, current = k8s_config.list_kube_config_contexts(
            config_file=settings.kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config"))
    except (ConfigException, OSError, TypeError) as e:
        raise ConfigError(f"cannot load the Kubernetes configuration: {e}") from e
    chosen = current
    if settings.context:
        chosen = next((c for c in contexts or [] if c.get("name") == settings.context), None)
        if chosen is None:
            raise ConfigError(f"the kubeconfig has no context {settings.context!r}")
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def _message(e: ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
        text = str(body.get("message") or e.reason)
    except (ValueError, TypeError):
        text = str(e.reason)
    return text


@contextlib.contextmanager
def timeout_for_this_thread(local: threading.local, seconds: float) -> Iterator[None]:
    """``local.timeout`` is ``seconds`` inside the block, then what it was."""
    was = getattr(local, "timeout", None)
    local.timeout = seconds
    try:
        yield
    finally:
        local.timeout = was


class DiscoveryTimeout:
    """The dynamic client's discovery requests carry no timeout (an API server that accepts
    connections and never answers would hang gitray for ever): inside :meth:`bounded`, a
    request made by this thread without a timeout of its own gets one. Installed once per
    ApiClient, in front of its REST client's ``request``."""

    def __init__(self, request: Callable[..., Any]) -> None:
        self._request = request
        self._local = threading.local()

    @classmethod
    def on(cls, api_client: k8s_client.ApiClient) -> DiscoveryTimeout:
        rest = api_client.rest_client
        if not isinstance(rest.request, cls):
            rest.request = cls(rest.request)  # type: ignore[method-assign]
        installed: DiscoveryTimeout = rest.request
        return installed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        default = getattr(self._local, "timeout", None)
        if default is not None and kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = default
        return self._request(*args, **kwargs)

    def bounded(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        return timeout_for_this_thread(self._local, seconds)


def why_unreachable(e: BaseException) -> str:
    """What went wrong on the connection, in a few words (for 'API server unreachable (...)')."""
    cause = e.reason if isinstance(e, urllib3.exceptions.MaxRetryError) else e
    # NewConnectionError is a ConnectTimeoutError in urllib3: ask first
    if isinstance(cause, urllib3.exceptions.NewConnectionError | ConnectionError):
        errno = re.search(r"\[Errno -?\d+\] [^'\")\]]+", str(cause))
        return f"cannot connect: {errno.group(0)}" if errno else "cannot connect"
    if isinstance(cause, urllib3.exceptions.TimeoutError | TimeoutError):
        return "no answer within the request timeout"
    if isinstance(cause, urllib3.exceptions.SSLError):
        return "TLS handshake failed"
    if isinstance(cause, urllib3.exceptions.ProtocolError):
        return "the connection was dropped"
    return type(cause).__name__ if cause is not None else type(e).__name__


def api_error(e: ApiException, what: str) -> Exception:
    status = e.status or 0
    text = f"{what}: {_message(e)}"
    if status == 404:
        return NotFoundError(text)
    if status == 409:
        return ConflictError(text)
    if status in {401, 403}:
        return ForbiddenError(text)
    if status in {400, 422}:
        return InvalidError(text)
    return TransientError(f"{text} (HTTP {status})" if status else text)


def api_client_for(settings: KubeSettings) -> k8s_client.ApiClient:
    """An API client for ``settings``: the kubeconfig (file, context) or, in a pod without
    one, the pod's service account; no retries of its own (gitray retries, with backoff and
    logging); impersonating ``settings.impersonate`` when set. No request is made."""
    configuration = k8s_client.Configuration()
    try:
        if not in_cluster(settings):
            k8s_config.load_kube_config(config_file=settings.kubeconfig,
                                        context=settings.context,
                                        client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError, TypeError) as e:
        raise ConfigError(f"cannot load the Kubernetes configuration: {e}") from e
    configuration.retries = 0  # gitray retries itself, with backoff and logging
    api_client = k8s_client.ApiClient(configuration)
    if settings.impersonate:
        api_client.set_default_header("Impersonate-User", settings.impersonate)
    return api_client
