"""Commit statuses (SPEC §5): one context per workload plus an overall one, posted best effort.

Does I/O: HTTP to GitHub, Gitea/Forgejo and GitLab (httpx), ``git`` for git notes.

::

    StatusPublisher.publish(status)      trim → dedup (memory, then the host) → post → remember
        │                                transient failure → queued, retried by flush()
        ▼
    Provider.post(status) -> bool        GitHubProvider | GiteaProvider | GitLabProvider
                                         | GitNotesProvider | NullProvider

Errors a provider raises: ``TransientError`` (5xx, 429, timeouts, network: retried) or
``StatusRejected`` (the host refused the request: logged, dropped). Neither reaches a sync:
``publish`` and ``flush`` never raise. Tokens appear only in the one header built by
``auth_headers``; every message this module logs or raises goes through ``redact`` first.

GitLab has no "error" state; ours maps to ``canceled`` (gitray reached no verdict on the
commit, like a cancelled job), so ``failed`` always means the change itself failed. Ours
``pending`` maps to ``running`` while a step runs (a description made by ``step_description``)
and to ``pending`` before that. GitLab refuses a transition into the state a status already
has (400 "Cannot transition status"), so it is read before every write and such a post is
skipped: GitLab keeps the first description of a ``running`` status.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from gitray.core.config import StatusProvider, StatusSettings
from gitray.core.errors import ConfigError, GitrayError, TransientError
from gitray.core.model import ObjectKey
from gitray.core.timefmt import utc_timestamp

__all__ = [
    "NOTES_REF",
    "CommitStatus",
    "GitHubProvider",
    "GitLabProvider",
    "GitNotesProvider",
    "GiteaProvider",
    "HostApi",
    "NullProvider",
    "Provider",
    "PublishCounts",
    "State",
    "StatusPublisher",
    "StatusRejected",
    "auth_headers",
    "context_for",
    "gitlab_state",
    "make_publisher",
    "redact",
    "step_description",
    "token_from",
    "trim",
]

log = logging.getLogger("gitray.statuses")

HTTP_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
GIT_TIMEOUT_S = 60.0
NOTES_REF = "refs/notes/gitray"
ELLIPSIS = "…"
REDACTED = "***"


class State(StrEnum):
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    ERROR = "error"


@dataclass(frozen=True)
class CommitStatus:
    sha: str
    context: str
    state: State
    description: str
    target_url: str = ""


class StatusRejected(GitrayError):
    """The Git host refused a status or comment for good (bad token, unknown commit, limits)."""


def context_for(prefix: str, key: ObjectKey | None) -> str:
    """``<prefix>/<namespace>/<Kind>/<name>`` for a workload, ``<prefix>`` for the commit."""
    prefix = prefix.strip("/") or "gitray"
    return prefix if key is None else f"{prefix}/{key.namespace}/{key.kind}/{key.name}"


_STEP = re.compile(r"^step [0-9]+/[0-9]+\b")


def step_description(k: int, n: int, what: str) -> str:
    """The pending description while step ``k`` of ``n`` runs (GitLab shows it as running)."""
    return f"step {k}/{n}: {what}"


def trim(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis when longer."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + ELLIPSIS


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret (and its URL-encoded form) replaced by ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            text = text.replace(form, REDACTED)
    return text


def token_from(env_var: str, file: str | None) -> str | None:
    """The token in ``file`` (when given) or else in ``$env_var``; stripped; None when empty."""
    if file:
        try:
            value = Path(file).read_text()
        except OSError as err:
            raise ConfigError(f"cannot read the token file {file}: {err.strerror}") from None
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


# -- HTTP ------------------------------------------------------------------------------------


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
        except httpx.TimeoutException:
            raise TransientError(self._scrub(f"{what}: {self.kind} timed out")) from None
        except httpx.HTTPError as err:
            raise TransientError(self._scrub(f"{what}: {self.kind} unreachable: {err}")) from None
        if response.is_success:
            return response
        reason = f"{what}: {self.kind} answered HTTP {response.status_code}: {_message(response)}"
        if response.status_code in (408, 429) or response.status_code >= 500:
            raise TransientError(self._scrub(reason))
        raise StatusRejected(self._scrub(reason))

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
        return redact(" ".join(text.split()), self.secrets)

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


def _newer(item: dict[str, Any], than: dict[str, Any] | None) -> bool:
    """Whether a listed status is newer than another (ids grow; list order varies by host)."""
    return than is None or int(item.get("id") or 0) > int(than.get("id") or 0)


# -- providers ------------------------------------------------------------------------------


class Provider(Protocol):
    name: str
    description_limit: int
    secrets: tuple[str, ...]
    reads_before_write: bool  # post() itself skips what the host already shows

    def post(self, status: CommitStatus) -> bool:
        """Send ``status``; False when the host already shows it (nothing was sent)."""

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        """The newest (state, description) for a context, None when there is none."""


class NullProvider:
    """``provider: none``: statuses are not published."""

    name = "none"
    description_limit = 1024
    reads_before_write = True
    secrets: tuple[str, ...] = ()

    def post(self, status: CommitStatus) -> bool:
        return False

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        return None


class GitHubProvider:
    """``POST /repos/{owner}/{repo}/statuses/{sha}``; description ≤ 140, context ≤ 255."""

    name = "github"
    description_limit = 140
    reads_before_write = False
    context_limit = 255
    _kind = StatusProvider.GITHUB
    _prefix = ""

    def __init__(self, base_url: str, repository: str, token: str | None) -> None:
        self.api = HostApi(self._kind, base_url, token)
        self.secrets = self.api.secrets
        self.repo = "/".join(quote(part, safe="") for part in repository.strip("/").split("/"))

    def post(self, status: CommitStatus) -> bool:
        body = {"state": str(status.state), "context": status.context[: self.context_limit],
                "description": status.description}
        if status.target_url:
            body["target_url"] = status.target_url
        self.api.request("POST", f"{self._prefix}/repos/{self.repo}/statuses/{status.sha}",
                         json_body=body, what=f"status {status.context} on {status.sha[:12]}")
        return True

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        what = f"reading status {context} on {sha[:12]}"
        newest: dict[str, Any] | None = None
        # The highest id is the status the host shows; list order differs between hosts.
        for item in self.api.pages(f"{self._prefix}/repos/{self.repo}/commits/{sha}/statuses",
                                   what=what, per_page_param=self._per_page):
            if item.get("context") == context and _newer(item, newest):
                newest = item
        if newest is None:
            return None
        # GitHub names the field "state", Gitea "status".
        shown = newest.get("state", newest.get("status"))
        state = {s.value: s for s in State}.get(str(shown))
        return None if state is None else (state, str(newest.get("description") or ""))

    _per_page = "per_page"


class GiteaProvider(GitHubProvider):
    """Gitea/Forgejo: the GitHub shape under ``/api/v1`` (plus a ``warning`` state we never use)."""

    name = "gitea"
    description_limit = 1024
    _kind = StatusProvider.GITEA
    _prefix = "/api/v1"
    _per_page = "limit"

    def __init__(self, base_url: str, repository: str, token: str | None) -> None:
        super().__init__(base_url.rstrip("/").removesuffix("/api/v1"), repository, token)


_GITLAB_FROM_OURS = {State.SUCCESS: "success", State.FAILURE: "failed", State.ERROR: "canceled"}
_OURS_FROM_GITLAB = {"pending": State.PENDING, "running": State.PENDING,
                     "success": State.SUCCESS, "failed": State.FAILURE,
                     "canceled": State.ERROR}
# Transitions GitLab refuses while a status is still active (its state machine).
_GITLAB_REFUSED = {("pending", "pending"), ("running", "running"), ("running", "pending")}


def gitlab_state(status: CommitStatus) -> str:
    if status.state is State.PENDING:
        return "running" if _STEP.match(status.description) else "pending"
    return _GITLAB_FROM_OURS[status.state]


class GitLabProvider:
    """``POST /projects/:id/statuses/:sha``; description ≤ 255; read before every write."""

    name = "gitlab"
    description_limit = 255
    reads_before_write = True

    def __init__(self, base_url: str, project: str, token: str | None) -> None:
        self.api = HostApi(StatusProvider.GITLAB, base_url, token)
        self.secrets = self.api.secrets
        self.project = quote(project.strip("/"), safe="")

    def _current(self, sha: str, name: str) -> tuple[str, str] | None:
        newest: dict[str, Any] | None = None
        for item in self.api.pages(f"/projects/{self.project}/repository/commits/{sha}/statuses",
                                   params={"name": name}, what=f"reading status {name}"):
            if item.get("name") == name and _newer(item, newest):
                newest = item
        if newest is None:
            return None
        return str(newest.get("status")), str(newest.get("description") or "")

    def post(self, status: CommitStatus) -> bool:
        target = gitlab_state(status)
        current = self._current(status.sha, status.context)
        if current is not None:
            if current == (target, status.description):
                return False
            if (current[0], target) in _GITLAB_REFUSED:
                log.debug("gitlab keeps %s %s on %s: it cannot go from %s to %s", status.context,
                          current[0], status.sha[:12], current[0], target)
                return False
        body = {"state": target, "name": status.context, "description": status.description}
        if status.target_url:
            body["target_url"] = status.target_url
        self.api.request("POST", f"/projects/{self.project}/statuses/{status.sha}",
                         json_body=body, what=f"status {status.context} on {status.sha[:12]}")
        return True

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        current = self._current(sha, context)
        if current is None or current[0] not in _OURS_FROM_GITLAB:
            return None
        return _OURS_FROM_GITLAB[current[0]], current[1]


_GIT_IDENTITY = {"GIT_AUTHOR_NAME": "gitray", "GIT_AUTHOR_EMAIL": "gitray@localhost",
                 "GIT_COMMITTER_NAME": "gitray", "GIT_COMMITTER_EMAIL": "gitray@localhost",
                 "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}
_HELPER = ('!f() { test "$1" = get || exit 0; echo "username=$GITRAY_NOTES_USERNAME"; '
           'echo "password=$GITRAY_NOTES_PASSWORD"; }; f')
_REMOTE_NOTES = "refs/notes/gitray-remote"
_STALE_LOCK_AFTER = 3  # consecutive "lock file exists" refusals before calling it stale


class GitNotesProvider:
    """Status records as JSON lines in ``refs/notes/gitray`` (one note per commit, the newest
    record per context), pushed to ``remote``. A rejected push is resolved by fetching the
    remote notes, merging them (``cat_sort_uniq``: every line of both sides kept) and pushing
    again; readers take the newest record per context, so nothing is lost in a race."""

    name = "git-notes"
    description_limit = 1024
    reads_before_write = True
    push_attempts = 10

    def __init__(self, repo_dir: Path, remote: str = "origin") -> None:
        self.repo_dir = repo_dir
        parts = urlsplit(remote)
        self._env = {**os.environ, **_GIT_IDENTITY}
        self._helper: list[str] = []
        self.secrets: tuple[str, ...] = ()
        if parts.scheme in ("http", "https") and "@" in parts.netloc:
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            self.secrets = tuple(s for s in (password, parts.password or "") if s)
            remote = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
            self._env |= {"GITRAY_NOTES_USERNAME": user, "GITRAY_NOTES_PASSWORD": password}
            self._helper = ["-c", "credential.helper=", "-c", f"credential.helper={_HELPER}"]
        self.remote = remote
        self._lock = threading.Lock()

    def _git(self, *args: str, stdin: str | None = None, check: bool = True,
             ) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(["git", *self._helper, *args], cwd=self.repo_dir,
                                  env=self._env, input=stdin, capture_output=True, text=True,
                                  timeout=GIT_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise TransientError(f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f}s") from None
        except OSError as err:
            raise StatusRejected(f"cannot run git in {self.repo_dir}: {err.strerror}") from None
        if check and proc.returncode != 0:
            lines = (proc.stderr.strip() or proc.stdout.strip() or "failed").splitlines()
            errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
            reason = redact(" ".join((errors or lines)[0].split()), self.secrets)
            err_type = TransientError if args[0] in ("push", "fetch") else StatusRejected
            raise err_type(f"git {args[0]} ({self.name}): {reason}")
        return proc

    def records(self, sha: str) -> dict[str, dict[str, str]]:
        """The newest record per context in the local note of ``sha``."""
        proc = self._git("notes", f"--ref={NOTES_REF}", "show", sha, check=False)
        newest: dict[str, dict[str, str]] = {}
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or "context" not in record:
                continue
            known = newest.get(record["context"])
            if known is None or str(record.get("at", "")) >= str(known.get("at", "")):
                newest[record["context"]] = record
        return newest

    def post(self, status: CommitStatus) -> bool:
        with self._lock:
            records = self.records(status.sha)
            known = records.get(status.context)
            if known and (known.get("state"), known.get("description")) == (
                    status.state, status.description):
                self._push()  # an earlier push may have failed
                return False
            records[status.context] = {
                "context": status.context, "state": str(status.state),
                "description": status.description, "target_url": status.target_url,
                "at": utc_timestamp(digits=6),
            }
            text = "".join(json.dumps(records[c], sort_keys=True) + "\n" for c in sorted(records))
            self._git("notes", f"--ref={NOTES_REF}", "add", "-f", "-F", "-", status.sha,
                      stdin=text)
            self._push()
            return True

    def _push(self) -> None:
        locked = 0
        for attempt in range(self.push_attempts):
            proc = self._git("push", "--quiet", self.remote, f"{NOTES_REF}:{NOTES_REF}",
                             check=False)
            if proc.returncode == 0:
                return
            lock = re.search(r"Unable to create '([^']*\.lock)': File exists", proc.stderr)
            locked = locked + 1 if lock else 0
            if lock and locked >= _STALE_LOCK_AFTER:
                # A concurrent push holds the lock for milliseconds; one that outlives a few
                # attempts was left by a push that crashed. Merging again cannot help.
                raise TransientError(
                    f"git push ({self.name}): the remote's {NOTES_REF} is locked "
                    f"({redact(lock.group(1), self.secrets)} exists; left by a crashed push? "
                    "remove it on the Git server)")
            if lock:
                time.sleep(random.uniform(0.05, 0.2 * locked))
                continue
            if not re.search(r"rejected|non-fast-forward|fetch first|cannot lock ref",
                             proc.stderr):
                self._git("push", "--quiet", self.remote, f"{NOTES_REF}:{NOTES_REF}")
                return
            log.debug("notes push rejected (attempt %d): %s", attempt + 1,
                      redact(" | ".join(proc.stderr.strip().splitlines()), self.secrets))
            # Writers racing for the ref: back off a little, jittered, then merge theirs.
            time.sleep(random.uniform(0.0, 0.05 * (attempt + 1)))
            self._merge_remote()
        raise TransientError(f"git push ({self.name}): still rejected after "
                             f"{self.push_attempts} merges with the remote notes")

    def _merge_remote(self) -> None:
        self._git("fetch", "--quiet", self.remote, f"+{NOTES_REF}:{_REMOTE_NOTES}")
        have_local = self._git("rev-parse", "--verify", "--quiet", NOTES_REF,
                               check=False).returncode == 0
        if have_local:
            self._git("notes", f"--ref={NOTES_REF}", "merge", "--quiet", "-s", "cat_sort_uniq",
                      _REMOTE_NOTES)
        else:
            self._git("update-ref", NOTES_REF, _REMOTE_NOTES)

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        record = self.records(sha).get(context)
        if record is None or record.get("state") not in set(State):
            return None
        return State(record["state"]), str(record.get("description", ""))


# -- publisher ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishCounts:
    """What a publisher did, for metrics. ``failed`` counts statuses given up on."""

    posted: int = 0
    deduplicated: int = 0
    retried: int = 0
    failed: int = 0


@dataclass
class _Queued:
    status: CommitStatus
    attempts: int
    due: float


class StatusPublisher:
    """Best-effort, de-duplicated status posting. ``publish`` and ``flush`` never raise.

    A transient failure queues the status (only the newest per (sha, context)) for ``flush``,
    which retries it after ``backoff_s[attempt]`` seconds, at most ``max_attempts`` times.
    Thread-safe: calls are serialised (each is bounded by the client timeouts).
    """

    remembered = 4096  # (sha, context) pairs kept for de-duplication

    def __init__(self, provider: Provider, *, clock: Callable[[], float] = time.monotonic,
                 secrets: Sequence[str] = (), max_attempts: int = 4,
                 backoff_s: Sequence[float] = (2.0, 10.0, 30.0)) -> None:
        self.provider = provider
        self._clock = clock
        self._secrets = tuple(s for s in (*secrets, *provider.secrets) if s)
        self._max_attempts = max_attempts
        self._backoff = tuple(backoff_s) or (0.0,)
        self._last: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()
        self._queue: dict[tuple[str, str], _Queued] = {}
        self._counts = PublishCounts()
        self._lock = threading.RLock()

    @property
    def enabled(self) -> bool:
        return not isinstance(self.provider, NullProvider)

    def counts(self) -> PublishCounts:
        return self._counts

    def pending(self) -> int:
        """Statuses waiting for a retry."""
        return len(self._queue)

    def publish(self, status: CommitStatus) -> bool:
        """Post ``status`` unless the host already shows it; True when it was sent now."""
        if not self.enabled:
            return False
        status = self._clean(status)
        key = (status.sha, status.context)
        with self._lock:
            self._queue.pop(key, None)  # a newer status supersedes one waiting for a retry
            return self._attempt(status, attempts=0)

    def flush(self, *, wait: bool = False) -> int:
        """Retry queued statuses that are due (all of them, sleeping, when ``wait``).
        Returns how many still wait."""
        with self._lock:
            while self._queue:
                now = self._clock()
                due = [q for q in self._queue.values() if q.due <= now]
                if not due:
                    if not wait:
                        break
                    time.sleep(max(0.0, min(q.due for q in self._queue.values()) - now))
                    continue
                for queued in due:
                    del self._queue[(queued.status.sha, queued.status.context)]
                    self._count(retried=1)
                    self._attempt(queued.status, attempts=queued.attempts)
            return len(self._queue)

    def _clean(self, status: CommitStatus) -> CommitStatus:
        limit = self.provider.description_limit
        description = trim(redact(status.description, self._secrets), limit)
        target_url = redact(status.target_url, self._secrets)
        return CommitStatus(status.sha, status.context, State(status.state), description,
                            target_url)

    def _attempt(self, status: CommitStatus, *, attempts: int) -> bool:
        key = (status.sha, status.context)
        wanted = (str(status.state), status.description)
        try:
            # Read what the host shows when nothing is remembered (a restart) and before a
            # retry (a timed-out post may still have landed).
            if (key not in self._last or attempts) and not self.provider.reads_before_write:
                shown = self.provider.latest(status.sha, status.context)
                if shown is not None:
                    self._remember(key, (str(shown[0]), shown[1]))
            if self._last.get(key) == wanted:
                self._count(deduplicated=1)
                log.debug("status %s on %s unchanged (%s); not posted", status.context,
                          status.sha[:12], status.state)
                return False
            posted = self.provider.post(status)
        except TransientError as err:
            attempts += 1
            if attempts >= self._max_attempts:
                self._count(failed=1)
                self._log(logging.WARNING, f"status {status.context} on {status.sha[:12]} "
                          f"dropped after {attempts} attempts: {err}")
                return False
            delay = self._backoff[min(attempts - 1, len(self._backoff) - 1)]
            self._queue[key] = _Queued(status, attempts, self._clock() + delay)
            self._log(logging.INFO, f"status {status.context} on {status.sha[:12]} will be "
                      f"retried in {delay:g}s: {err}")
            return False
        except GitrayError as err:
            self._count(failed=1)
            self._log(logging.WARNING, f"status {status.context} on {status.sha[:12]} "
                      f"not posted: {err}")
            return False
        except Exception as err:  # best effort: nothing from a provider may fail a sync
            self._count(failed=1)
            self._log(logging.ERROR, f"status {status.context} on {status.sha[:12]} "
                      f"not posted: {type(err).__name__}: {err}")
            return False
        self._remember(key, wanted)
        if posted:
            self._count(posted=1)
            log.debug("status %s on %s: %s", status.context, status.sha[:12], status.state)
        else:
            self._count(deduplicated=1)
        return posted

    def _remember(self, key: tuple[str, str], value: tuple[str, str]) -> None:
        self._last[key] = value
        self._last.move_to_end(key)
        while len(self._last) > self.remembered:
            self._last.popitem(last=False)

    def _count(self, *, posted: int = 0, deduplicated: int = 0, retried: int = 0,
               failed: int = 0) -> None:
        c = self._counts
        self._counts = PublishCounts(c.posted + posted, c.deduplicated + deduplicated,
                                     c.retried + retried, c.failed + failed)

    def _log(self, level: int, message: str) -> None:
        log.log(level, "%s", redact(" ".join(message.split()), self._secrets))


_DEFAULT_URLS = {StatusProvider.GITHUB: "https://api.github.com",
                 StatusProvider.GITLAB: "https://gitlab.com/api/v4"}


def make_publisher(settings: StatusSettings, *, token: str | None, repo_dir: Path | None,
                   remote: str = "origin") -> StatusPublisher:
    """The publisher ``settings`` describe. Raises ConfigError when a needed value is missing."""
    kind = settings.provider
    provider: Provider
    if kind is StatusProvider.NONE:
        provider = NullProvider()
    elif kind is StatusProvider.GIT_NOTES:
        if repo_dir is None:
            raise ConfigError("status provider git-notes needs the local clone of the repository")
        provider = GitNotesProvider(repo_dir, remote)
    else:
        url = settings.url or _DEFAULT_URLS.get(kind, "")
        if not url or not settings.repository:
            raise ConfigError(f"status provider {kind} needs status.url and status.repository")
        if urlsplit(url).scheme not in ("http", "https"):
            shown = redact(url, [token or ""])
            raise ConfigError(f"status.url must be an http(s) URL, not {shown!r}")
        if kind is StatusProvider.GITHUB:
            provider = GitHubProvider(url, settings.repository, token)
        elif kind is StatusProvider.GITEA:
            provider = GiteaProvider(url, settings.repository, token)
        else:
            provider = GitLabProvider(url, settings.repository, token)
    return StatusPublisher(provider, secrets=(token,) if token else ())
