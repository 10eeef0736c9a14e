"""The Kubernetes API as gitray uses it (with ``gitray.k8s.connection``, the only modules that
import the Kubernetes client). Does I/O (HTTPS to the API server).

:class:`Kube` is a thin, dict-in/dict-out wrapper over the dynamic client: get, list by label
selector, create, replace (compare-and-swap on resourceVersion), merge/json patch,
server-side apply and delete, plus watch. API errors are mapped onto gitray's error tree
(``gitray.core.errors``):

    NotFoundError(TerminalError)     404
    ConflictError(TransientError)    409 (resourceVersion CAS lost, or already exists)
    ForbiddenError(TerminalError)    403 (RBAC said no; includes the API server's message)
    InvalidError(TerminalError)      400/422 (the object is invalid)
    TransientError                   5xx, 429, timeouts, connection errors
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s_client
from kubernetes import dynamic, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from gitray.core.errors import (
    Interrupted,
    NotFoundError,
    TransientError,
)
from gitray.core.http import RawResponse
from gitray.k8s.connection import (
    DiscoveryTimeout,
    api_client_for,
    api_error,
    timeout_for_this_thread,
    why_unreachable,
)
from gitray.k8s.settings import KubeSettings

__all__ = [
    "FIELD_MANAGER",
    "LIST_PAGE",
    "Kube",
    "paged",
]

FIELD_MANAGER = "gitray"
_CLOSE_WATCHES_S = 2.0  # close_watches() keeps stopping watches still starting this long
LIST_PAGE = 1000  # items per LIST page: bounds one response, keeps requests per kind low
_T = TypeVar("_T")
_Items = list[dict[str, Any]]  # (inside Kube, ``list`` names the method)


def paged(fetch: Callable[[str | None], Mapping[str, Any]],
          what: str = "listing") -> Iterator[Mapping[str, Any]]:
    """Each page of a LIST: ``fetch(None)``, then ``fetch(token)`` with each page's continue
    token until a page has none. A token that does not move on is the API server's fault
    (it would loop forever): a TransientError."""
    token: str | None = None
    while True:
        data = fetch(token)
        yield data
        following = (data.get("metadata") or {}).get("continue") or None
        if following is None:
            return
        if following == token:
            raise TransientError(f"{what}: the API server returned the same continue token "
                                 "twice")
        token = str(following)


def _decoded(response: Any) -> dict[str, Any]:
    """The object of an API response, decoded straight from its JSON (the dynamic client's
    object wrappers, and turning them back into dicts, cost more CPU than the request: a
    KubeRay CRD is megabytes of schema)."""
    try:
        obj = json.loads(response.data)
    except (ValueError, TypeError) as e:
        raise TransientError(f"the API server answered with something that is not JSON "
                             f"({type(e).__name__})") from e
    if not isinstance(obj, dict):
        raise TransientError("the API server answered with JSON that is not an object")
    return obj


class Kube:
    """Dict-based access to the API server through the dynamic client."""

    def __init__(self, api_client: k8s_client.ApiClient, settings: KubeSettings) -> None:
        self.api_client = api_client
        self.settings = settings
        self._dynamic: dynamic.DynamicClient | None = None
        self._lock = threading.Lock()
        self.requests = 0  # API requests made (for logs, metrics and benchmarks)
        self._watches: set[watch.Watch] = set()  # open watches, guarded by _lock
        self._watches_closed = False
        self._local = threading.local()  # this thread's request timeout, when bounded
        self._discovery = DiscoveryTimeout.on(api_client)

    @classmethod
    def connect(cls, settings: KubeSettings | None = None) -> Kube:
        settings = settings or KubeSettings()
        api_client = api_client_for(settings)
        return cls(api_client, settings)

    # ---- plumbing ---------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], _T]) -> _T:
        self.requests += 1
        try:
            return fn()
        except ApiException as e:
            raise api_error(e, what) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise TransientError(f"{what}: API server unreachable ({why_unreachable(e)})") from e

    def _client(self) -> dynamic.DynamicClient:
        with self._lock:
            if self._dynamic is None:
                # (inside resource()'s discovery bound: discovery requests time out too)
                self._dynamic = self._call("discovering API resources",
                                           lambda: dynamic.DynamicClient(self.api_client))
            return self._dynamic

    def resource(self, api_version: str, kind: str) -> Any:
        try:
            with self._discovery.bounded(self.timeout):  # a kind not cached is discovered
                return self._call(f"looking up {kind}",
                                  lambda: self._client().resources.get(
                                      api_version=api_version, kind=kind))
        except ResourceNotFoundError as e:
            raise NotFoundError(f"the API server has no kind {kind} ({api_version})") from e

    @property
    def timeout(self) -> float:
        bounded: float | None = getattr(self._local, "timeout", None)
        return bounded if bounded is not None else self.settings.request_timeout_s

    def requests_within(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Requests this thread makes inside the block time out after ``seconds`` instead of
        the configured request timeout (a Lease renew gets what is left of its deadline)."""
        return timeout_for_this_thread(self._local, seconds)

    # ---- verbs ------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        res = self.resource(api_version, kind)
        return _decoded(self._call(f"reading {kind} {namespace}/{name}",
                                   lambda: res.get(name=name, namespace=namespace,
                                                   serialize=False,
                                                   _request_timeout=self.timeout)))

    def get_or_none(self, api_version: str, kind: str, namespace: str,
                    name: str) -> dict[str, Any] | None:
        try:
            return self.get(api_version, kind, namespace, name)
        except NotFoundError:
            return None

    def list(self, api_version: str, kind: str, *, namespace: str | None = None,
             label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        """Items (with apiVersion/kind filled in) and the list's resourceVersion: every page
        of :meth:`list_pages`, collected."""
        items: list[dict[str, Any]] = []
        version = ""
        for page in self.list_pages(api_version, kind, namespace=namespace,
                                    label_selector=label_selector):
            items += page[0]
            version = page[1]
        return items, version

    def list_pages(self, api_version: str, kind: str, *, namespace: str | None = None,
                   label_selector: str = "") -> Iterator[tuple[_Items, str]]:
        """A LIST, one page of at most ``LIST_PAGE`` items at a time: (items with
        apiVersion/kind filled in, the list's resourceVersion).

        The pages are one consistent snapshot (the API server's continue token pins its
        resourceVersion), each decoded straight from JSON: the dynamic client's object
        wrappers would hold a second copy. A caller that keeps only what it needs of each
        page holds one page at a time. An expired continue token (410) is a TransientError:
        the caller lists again.
        """
        res = self.resource(api_version, kind)
        what = f"listing {kind} {f'in {namespace}' if namespace else 'in all namespaces'}"

        def page(after: str | None) -> Any:
            return res.get(namespace=namespace, label_selector=label_selector, limit=LIST_PAGE,
                           _continue=after, serialize=False, _request_timeout=self.timeout)

        def fetch(after: str | None) -> Mapping[str, Any]:
            data: Mapping[str, Any] = json.loads(
                self._call(what, functools.partial(page, after)).data)
            return data

        for data in paged(fetch, what):
            items: _Items = data.get("items") or []
            for item in items:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
            yield items, str((data.get("metadata") or {}).get("resourceVersion", ""))

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._write("creating", "create", body)

    def replace(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT with the body's resourceVersion: fails with ConflictError if it changed."""
        return self._write("updating", "replace", body)

    def _write(self, doing: str, verb: str, body: Mapping[str, Any]) -> dict[str, Any]:
        res = self.resource(body["apiVersion"], body["kind"])
        meta = body["metadata"]
        send = getattr(res, verb)
        return _decoded(self._call(
            f"{doing} {body['kind']} {meta.get('namespace')}/{meta['name']}",
            lambda: send(body=dict(body), namespace=meta.get("namespace"),
                         field_manager=FIELD_MANAGER, serialize=False,
                         _request_timeout=self.timeout)))

    def apply(self, body: Mapping[str, Any], *, force: bool = True,
              dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply with field manager ``gitray`` (``dry_run``: dryRun=All, admission
        runs, nothing is stored)."""
        res = self.resource(body["apiVersion"], body["kind"])
        meta = body["metadata"]
        extra = {"dry_run": "All"} if dry_run else {}
        return _decoded(self._call(
            f"applying {body['kind']} {meta.get('namespace')}/{meta['name']}",
            lambda: res.server_side_apply(body=dict(body), name=meta["name"],
                                          namespace=meta.get("namespace"),
                                          field_manager=FIELD_MANAGER, force_conflicts=force,
                                          serialize=False, _request_timeout=self.timeout,
                                          **extra)))

    def patch(self, api_version: str, kind: str, namespace: str, name: str,
              patch: Any, *, json_patch: bool = False) -> dict[str, Any]:
        """A JSON merge patch (or an RFC 6902 JSON patch with ``json_patch``)."""
        res = self.resource(api_version, kind)
        content_type = ("application/json-patch+json" if json_patch
                        else "application/merge-patch+json")
        return _decoded(self._call(
            f"patching {kind} {namespace}/{name}",
            lambda: res.patch(body=patch, name=name, namespace=namespace,
                              content_type=content_type, field_manager=FIELD_MANAGER,
                              serialize=False, _request_timeout=self.timeout)))

    def delete(self, api_version: str, kind: str, namespace: str, name: str,
               *, resource_version: str | None = None) -> bool:
        """Delete (background propagation). False when it was already gone."""
        res = self.resource(api_version, kind)
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if resource_version:
            body["preconditions"] = {"resourceVersion": resource_version}
        try:
            self._call(f"deleting {kind} {namespace}/{name}",
                       lambda: res.delete(name=name, namespace=namespace, body=body,
                                          _request_timeout=self.timeout))
        except NotFoundError:
            return False
        return True

    def watch(self, api_version: str, kind: str, namespace: str, *, field_selector: str = "",
              label_selector: str = "", resource_version: str = "",
              timeout_s: int = 30) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) pairs until ``timeout_s`` passes (server-side timeout).

        Raises ``Interrupted`` once :meth:`close_watches` was called (also in the middle of a
        watch: that call unblocks it)."""
        res = self.resource(api_version, kind)
        w = watch.Watch()
        with self._lock:
            if self._watches_closed:
                raise Interrupted(f"watching {kind} in {namespace}: shutting down")
            self._watches.add(w)
        self.requests += 1
        kwargs: dict[str, Any] = {"namespace": namespace, "timeout": timeout_s}
        if field_selector:
            kwargs["field_selector"] = field_selector
        if label_selector:
            kwargs["label_selector"] = label_selector
        if resource_version:
            kwargs["resource_version"] = resource_version
        try:
            for event in res.watch(watcher=w, **kwargs):
                obj = event["object"]
                yield str(event["type"]), dict(obj.to_dict() if hasattr(obj, "to_dict") else obj)
        except ApiException as e:
            self._check_closed(kind, namespace)
            raise api_error(e, f"watching {kind} in {namespace}") from e
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            # a watch closed by close_watches() ends in a read error on its shut-down socket
            self._check_closed(kind, namespace)
            raise TransientError(f"watching {kind}: API server unreachable "
                                 f"({type(e).__name__})") from e
        finally:
            with self._lock:
                self._watches.discard(w)
            with contextlib.suppress(Exception):
                w.stop()
        self._check_closed(kind, namespace)

    def close_watches(self) -> None:
        """Shutting down: end every watch of this client now (their sockets are shut down,
        which unblocks a read in progress) and refuse new ones. Other requests still work."""
        with self._lock:
            self._watches_closed = True
        # A watch registered but not yet connected has no socket to shut down (and starting
        # its stream clears the stop flag): stop again until each one has ended, briefly.
        deadline = time.monotonic() + _CLOSE_WATCHES_S
        while True:
            with self._lock:
                open_watches = list(self._watches)
            for w in open_watches:
                with contextlib.suppress(Exception):
                    w.stop()
            if not open_watches or time.monotonic() >= deadline:
                return
            time.sleep(0.01)

    def _check_closed(self, kind: str, namespace: str) -> None:
        with self._lock:
            closed = self._watches_closed
        if closed:
            raise Interrupted(f"watching {kind} in {namespace}: shutting down")

    def request(self, method: str, path: str, *, body: Any = None,
                params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None,
                timeout_s: float = 20.0) -> RawResponse:
        """A raw request to a path of the API server (e.g. a service proxy URL), sent with the
        client's own authenticated transport: client certificates, bearer tokens, exec
        plugins and auth-provider tokens all work as they do for every other call. Any HTTP
        status is returned, not raised; only an unreachable API server raises."""
        self.requests += 1
        header_params = {"Accept": "application/json, */*", **(headers or {})}
        if body is not None:
            header_params["Content-Type"] = "application/json"
        try:
            call = self.api_client.param_serialize(
                method, path, query_params=list((params or {}).items()),
                header_params=header_params, body=body, auth_settings=["BearerToken"])
            r = self.api_client.call_api(*call, _request_timeout=timeout_s)
            status, data = int(r.status), r.read()
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            where = path.split("/proxy", maxsplit=1)[0]
            raise TransientError(f"{method} {where}: API server unreachable "
                                 f"({type(e).__name__})") from e
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
        return RawResponse.parse(status, text)

    def server_version(self) -> str:
        api = k8s_client.VersionApi(self.api_client)
        info = self._call("reading the server version", api.get_code)
        return str(info.git_version)

    def close(self) -> None:
        self.api_client.close()
