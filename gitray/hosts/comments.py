"""``gitray plan --comment``: one plan comment per (pull request, repository path), edited in
place. Does I/O (HTTP to GitHub, Gitea/Forgejo or GitLab through ``gitray.hosts.api.HostApi``).

The comment is found by a hidden marker ``<!-- gitray-plan:<repo path> -->`` on its first line,
so plans of different paths of one repository live side by side and a new push edits the
existing comment instead of adding one. Errors are ``StatusRejected`` (refused: token, PR,
permissions) or ``TransientError`` (5xx, timeouts), one line, tokens redacted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from gitray.core.config import StatusProvider, StatusSettings
from gitray.core.credentials import redact_secrets
from gitray.core.errors import ConfigError, TransientError
from gitray.hosts.api import HostApi, api_base_url, repo_path

__all__ = ["BODY_LIMITS", "RETRY_DELAYS_S", "marker_for", "upsert_plan_comment"]

# Longest comment body each host accepts (GitHub 65536 characters; GitLab notes 1,000,000).
BODY_LIMITS = {StatusProvider.GITHUB: 65536, StatusProvider.GITEA: 65536,
               StatusProvider.GITLAB: 1_000_000}
# Waits before the 2nd and 3rd attempt after a transient error (5xx, 429, timeout, network).
# Each attempt looks the comment up again by its marker, so a POST that reached the host but
# whose answer was lost is edited, not duplicated.
RETRY_DELAYS_S = (2.0, 6.0)
_TRUNCATED = "\n\n… (plan truncated: see `gitray plan` output for the rest)\n"


def marker_for(repo_path: str) -> str:
    """The hidden marker of the plan comment for ``repo_path`` (``--`` cannot end it early)."""
    path = repo_path.strip().strip("/") or "."
    return f"<!-- gitray-plan:{path.replace('--', '- -').replace('>', '%3E')} -->"


def upsert_plan_comment(settings: StatusSettings, token: str | None, pr: int, repo_path: str,
                        body_markdown: str,
                        on_retry: Callable[[str, float], None] | None = None) -> str:
    """Create or update the plan comment on ``pr``: "created", "updated" or "unchanged".

    A transient error is retried after each of ``RETRY_DELAYS_S`` (``on_retry(reason, delay)``
    is told first); the last one is raised. A refusal (``StatusRejected``) is not retried."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return _upsert_once(settings, token, pr, repo_path, body_markdown)
        except TransientError as err:
            if delay is None:
                raise
            if on_retry is not None:
                on_retry(str(err), delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _upsert_once(settings: StatusSettings, token: str | None, pr: int, repo_path: str,
                 body_markdown: str) -> str:
    kind = settings.provider
    if kind not in BODY_LIMITS:
        raise ConfigError(f"plan comments need status.provider github, gitea or gitlab, "
                          f"not {kind}")
    url = api_base_url(kind, settings.url)
    if not url or not settings.repository:
        raise ConfigError(f"plan comments on {kind} need status.url and status.repository")
    marker = marker_for(repo_path)
    # A plan may quote a value that happens to be the token: it never reaches the comment.
    body = _body(marker, redact_secrets(body_markdown, [token or ""]), BODY_LIMITS[kind])
    api = HostApi(kind, url, token)
    try:
        if kind is StatusProvider.GITLAB:
            return _upsert_gitlab(api, settings.repository, pr, marker, body)
        return _upsert_issue_comment(api, settings.repository, pr, marker, body)
    finally:
        api.close()


def _body(marker: str, markdown: str, limit: int) -> str:
    body = f"{marker}\n{markdown.rstrip()}\n"
    if len(body) > limit:
        body = body[: limit - len(_TRUNCATED)] + _TRUNCATED
    return body


def _find(items: list[dict[str, Any]], marker: str) -> dict[str, Any] | None:
    for item in items:  # oldest first: the one a previous run created
        text = item.get("body")
        if isinstance(text, str) and text.startswith(marker + "\n"):
            return item
    return None


def _upsert_issue_comment(api: HostApi, repository: str, pr: int, marker: str,
                          body: str) -> str:
    base = f"/repos/{repo_path(repository)}/issues"
    what = f"plan comment on #{pr}"
    existing = sorted(api.pages(f"{base}/{pr}/comments", what=what),
                      key=lambda c: int(c.get("id", 0)))
    found = _find(existing, marker)
    if found is None:
        api.request("POST", f"{base}/{pr}/comments", json_body={"body": body}, what=what)
        return "created"
    if found.get("body") == body:
        return "unchanged"
    api.request("PATCH", f"{base}/comments/{int(found['id'])}", json_body={"body": body},
                what=what)
    return "updated"


def _upsert_gitlab(api: HostApi, project: str, mr: int, marker: str, body: str) -> str:
    base = f"/projects/{quote(project.strip('/'), safe='')}/merge_requests/{mr}/notes"
    what = f"plan note on !{mr}"
    existing = sorted(api.pages(base, what=what, params={"sort": "asc", "order_by": "created_at"}),
                      key=lambda n: int(n.get("id", 0)))
    found = _find([n for n in existing if not n.get("system")], marker)
    if found is None:
        api.request("POST", base, json_body={"body": body}, what=what)
        return "created"
    if found.get("body") == body:
        return "unchanged"
    api.request("PUT", f"{base}/{int(found['id'])}", json_body={"body": body}, what=what)
    return "updated"

