"""A Git host's REST API (GitHub, Gitea/Forgejo, GitLab): one httpx client, errors classified
and redacted, pagination, the token as a header, and each host's URL defaults. Does I/O.

Errors: ``TransientError`` (5xx, 408, 429, timeouts, network: worth retrying) or
``StatusRejected`` (the host refused the request). Tokens appear only in the one header
built by ``auth_headers``; every message raised goes through ``redact_secrets`` first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from gitray.core.config import StatusProvider
from gitray.core.credentials import redact_secrets
from gitray.core.errors import ConfigError, StatusRejected, TransientError
from gitray.hosts.status import CommitStatus

__all__ = ["DEFAULT_URLS", "HTTP_TIMEOUT", "HostApi", "api_base_url", "auth_headers",
           "repo_path", "token_from"]

HTTP_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# API base URLs when status.url is empty (Gitea/Forgejo have no public default)
DEFAULT_URLS = {StatusProvider.GITHUB: "https://api.github.com",
                StatusProvider.GITLAB: "https://gitlab.com/api/v4"}


def api_base_url(kind: StatusProvider, url: str) -> str:
    """The REST API root for ``status.url`` (or the host's default): Gitea/Forgejo's API lives
    under ``/api/v1``, whether or not the configured URL says so. "" when there is none."""
    base = (url or DEFAULT_URLS.get(kind, "")).rstrip("/")
    if kind is StatusProvider.GITEA and base:
        base = base.removesuffix("/api/v1") + "/api/v1"
    return base


def repo_path(repository: str) -> str:
    """``owner/name`` with each part URL-encoded, for GitHub/Gitea paths."""
    return "/".join(quote(part, safe="") for part in repository.strip("/").split("/"))


def token_from(env_var: str, file: str | None) -> str | None:
    """The token in ``file`` (when given) or else in ``$env_var``; stripped; None when empty."""
    if file:
        try:
            value = Path(file).read_text()
        except OSError as err:
            raise ConfigError(f"cannot read the token file {file}: {err.strerror}") from err
    else:
        value = os.environ.get(env_var, "")
    return value.strip() or None


def auth_headers(provider: StatusProvider, token: str | None) -> dict[str, str]:
    """The one place a token becomes a header."""
    if not token:
        return {}
    if provider is StatusProvider.GITLAB:
        return {"PRIVATE-TOKEN": token}
    if provider is StatusProvider.GITEA:
        return {"Authorization": f"token {token}"}
    return {"Authorization": f"Bearer {token}"}



class HostApi:
    """A Git host's REST API: one httpx client, errors classified and redacted."""

    def __init__(self, kind: StatusProvider, base_url: str, token: str | None) -> None:
        self.kind = kind
        self.secrets: tuple[str, ...] = (token,) if token else ()
        headers = {"Accept": "application/json", "User-Agent": "gitray",
                   **auth_headers(kind, token)}
        if kind is StatusProvider.GITHUB:
            headers["Accept"] = "application/vnd.github+json"
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                    timeout=HTTP_TIMEOUT, follow_redirects=False)

    def request(self, method: str, path: str, *, what: str, json_body: Any = None,
                params: Mapping[str, str | int] | None = None) -> httpx.Response:
        try:
            response = self._client.request(method, path, json=json_body, params=params)
        except httpx.TimeoutException as e:
            raise TransientError(self._scrub(f"{what}: {self.kind} timed out")) from e
        except httpx.HTTPError as err:
            raise TransientError(self._scrub(f"{what}: {self.kind} unreachable: {err}")) from err
        if response.is_success:
            return response
        reason = f"{what}: {self.kind} answered HTTP {response.status_code}: {_message(response)}"
        if response.status_code in (408, 429) or response.status_code >= 500:
            raise TransientError(self._scrub(reason))
        raise StatusRejected(self._scrub(reason))

    def post_status(self, path: str, status: CommitStatus, **fields: str) -> None:
        """POST a commit status: the host's own ``fields`` (state, context or name), then the
        description and, when set, the target URL."""
        body = {**fields, "description": status.description}
        if status.target_url:
            body["target_url"] = status.target_url
        self.request("POST", path, json_body=body,
                     what=f"status {status.context} on {status.sha[:12]}")

    def pages(self, path: str, *, what: str, params: Mapping[str, str | int] | None = None,
              per_page_param: str = "per_page", per_page: int = 100,
              max_pages: int = 50) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list: Link rel=next, X-Next-Page, or page numbers."""
        seen: set[Any] = set()
        query: dict[str, str | int] = {**(params or {}), per_page_param: per_page, "page": 1}
        for page in range(1, max_pages + 1):
            query["page"] = page
            response = self.request("GET", path, what=what, params=query)
            try:
                items = response.json()
            except ValueError:
                items = None
            if not isinstance(items, list):
                raise StatusRejected(self._scrub(f"{what}: {self.kind} did not return a list"))
            fresh = [i for i in items if isinstance(i, dict) and i.get("id") not in seen]
            seen.update(i.get("id") for i in fresh)
            yield from fresh
            has_next = ("next" in response.links or bool(response.headers.get("x-next-page")))
            if not fresh or not (has_next or len(items) >= per_page):
                return

    def _scrub(self, text: str) -> str:
        return redact_secrets(" ".join(text.split()), self.secrets)

    def close(self) -> None:
        self._client.close()


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict):
        parts = [str(body.get(k)) for k in ("message", "error", "errors") if body.get(k)]
        return "; ".join(parts)[:300] or response.reason_phrase
    return str(body)[:200]
