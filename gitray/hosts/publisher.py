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
``auth_headers`` (``gitray.hosts.api``); every message this module logs goes through
``redact_secrets`` first. One module per provider: ``github`` (and Gitea), ``gitlab``,
``notes``; their common interface is ``gitray.hosts.status.Provider``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gitray.core.config import StatusProvider, StatusSettings
from gitray.core.credentials import redact_secrets
from gitray.core.errors import ConfigError, GitrayError, TransientError
from gitray.hosts.api import api_base_url
from gitray.hosts.github import GiteaProvider, GitHubProvider
from gitray.hosts.gitlab import GitLabProvider
from gitray.hosts.notes import GitNotesProvider
from gitray.hosts.status import CommitStatus, NullProvider, Provider, State, trim

__all__ = ["PublishCounts", "StatusPublisher", "make_publisher"]

log = logging.getLogger("gitray.statuses")


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
        description = trim(redact_secrets(status.description, self._secrets), limit)
        target_url = redact_secrets(status.target_url, self._secrets)
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
        log.log(level, "%s", redact_secrets(" ".join(message.split()), self._secrets))


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
        url = api_base_url(kind, settings.url)
        if not url or not settings.repository:
            raise ConfigError(f"status provider {kind} needs status.url and status.repository")
        if urlsplit(url).scheme not in ("http", "https"):
            shown = redact_secrets(url, [token or ""])
            raise ConfigError(f"status.url must be an http(s) URL, not {shown!r}")
        if kind is StatusProvider.GITHUB:
            provider = GitHubProvider(url, settings.repository, token)
        elif kind is StatusProvider.GITEA:
            provider = GiteaProvider(url, settings.repository, token)
        else:
            provider = GitLabProvider(url, settings.repository, token)
    return StatusPublisher(provider, secrets=(token,) if token else ())
