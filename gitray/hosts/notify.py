"""Notifications to people: receivers' payloads (pure) and their delivery (I/O, httpx).

Receivers come from ``gitray.yaml`` (``notifications.receivers``): a generic JSON webhook,
a Slack-compatible or a Teams-compatible incoming webhook, each with the events it gets. Their
URL and an optional bearer token come from the daemon's environment (``GITRAY_NOTIFY_*``) or a
file in its notifications directory (``GITRAY_NOTIFY_DIR``, default ``/etc/gitray/notify``),
never from Git; so a revision can choose which of the operator's receivers hear what, but
cannot send a secret anywhere.

Delivery never blocks the caller: ``Notifier.notify`` puts the notice on the receiver's bounded
queue (a full queue drops it, counted) and returns. Each receiver has its own queue and
background thread, so a receiver that is down or hangs (a post waits up to ``TIMEOUT``) holds
back only its own notices; a failed post is retried with growing pauses before that receiver's
later notices (each receiver hears its events in order) and given up after ``ATTEMPTS``.
The same notice for the same receiver is sent once (de-duplication). Logs and counters name
the receiver, never its URL or token.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gitray.core.config import NotificationSettings, Receiver, ReceiverType
from gitray.core.credentials import redact_secrets
from gitray.core.notices import EventKind, Notice
from gitray.core.waits import Backoff

__all__ = ["DEFAULT_DIR", "Notifier", "Target", "payload", "resolve", "routes"]

log = logging.getLogger("gitray.notify")

DEFAULT_DIR = "/etc/gitray/notify"
QUEUE_MAX = 1000  # notices waiting per receiver; more are dropped
DEDUP_MAX = 4096  # (receiver, notice) pairs remembered as sent
ATTEMPTS = 5
FIRST_PAUSE_S, PAUSE_CAP_S = 2.0, 60.0
TIMEOUT = httpx.Timeout(5.0, connect=2.0)

_BAD = {EventKind.ANALYSIS_FAILED, EventKind.ROLLED_BACK, EventKind.RUN_FAILED,
        EventKind.HEALTH_DEGRADED, EventKind.CHANGE_REFUSED}
_GOOD = {EventKind.CONVERGED, EventKind.HEALTH_RECOVERED}
_COLOUR = {"bad": "#d93f0b", "good": "#2da44e", "info": "#0969da"}


def _tone(notice: Notice) -> str:
    return "bad" if notice.event in _BAD else "good" if notice.event in _GOOD else "info"


def payload(kind: ReceiverType, notice: Notice) -> dict[str, object]:
    """The JSON body a receiver of ``kind`` gets for ``notice``."""
    title = f"gitray: {notice.event.value}"
    colour = _COLOUR[_tone(notice)]
    if kind is ReceiverType.SLACK:
        return {"text": f"*{title}*: {notice.summary}",
                "attachments": [{"color": colour, "fallback": notice.summary,
                                 "fields": [{"title": k, "value": v, "short": len(v) < 40}
                                            for k, v in notice.fields]}]}
    if kind is ReceiverType.TEAMS:
        return {"@type": "MessageCard", "@context": "https://schema.org/extensions",
                "summary": notice.summary, "themeColor": colour.lstrip("#"), "title": title,
                "sections": [{"activityTitle": notice.summary,
                              "facts": [{"name": k, "value": v} for k, v in notice.fields]}]}
    return notice.as_dict()


def routes(receivers: Sequence[Receiver], notice: Notice) -> list[Receiver]:
    """The receivers that get ``notice`` (those naming its event, or no events at all)."""
    return [r for r in receivers if not r.events or notice.event.value in r.events]


@dataclass(frozen=True)
class Target:
    """A receiver with its URL and token read (never shown: ``repr`` hides them)."""

    name: str
    kind: ReceiverType
    url: str
    token: str = ""

    def __repr__(self) -> str:
        return f"Target({self.name!r}, {self.kind.value})"


def _read(env: str, file: str, environ: Mapping[str, str], directory: Path) -> str:
    if env:
        value = environ.get(env, "")
        if not value:
            raise ValueError(f"environment variable {env} is not set")
        return value.strip()
    try:
        return (directory / file).read_text().strip()
    except OSError as e:
        raise ValueError(f"cannot read {file} in {directory}: {e.strerror}") from None


def resolve(receiver: Receiver, environ: Mapping[str, str], directory: Path) -> Target:
    """The receiver's URL and token from the environment or the notifications directory;
    ``ValueError`` (naming the variable or file, never a value) when one is missing."""
    url = receiver.url or _read(receiver.url_env, receiver.url_file, environ, directory)
    if not url.startswith(("http://", "https://")):
        raise ValueError("its URL is not http(s)")
    token = ""
    if receiver.token_env or receiver.token_file:
        token = _read(receiver.token_env, receiver.token_file, environ, directory)
    return Target(receiver.name, receiver.type, url, token)


@dataclass
class _Delivery:
    due: float
    target: Target
    notice: Notice
    attempt: int = 1
    backoff: Backoff | None = None


@dataclass
class _Lane:
    """One receiver's deliveries, in order (its own thread posts them)."""

    queue: deque[_Delivery] = field(default_factory=deque)
    busy: bool = False


Counter = Callable[[str, str], None]  # (receiver, result) -> None


class Notifier:
    """Sends notices to the receivers of the current settings, in the background."""

    def __init__(self, count: Counter | None = None, environ: Mapping[str, str] | None = None,
                 directory: Path | None = None, client: httpx.Client | None = None) -> None:
        self._count = count or (lambda _receiver, _result: None)
        self._environ = os.environ if environ is None else environ
        self._dir = directory or Path(os.environ.get("GITRAY_NOTIFY_DIR", DEFAULT_DIR))
        self._client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=False)
        self._receivers: tuple[Receiver, ...] = ()
        self._targets: dict[str, Target] = {}
        self._cond = threading.Condition()
        self._lanes: dict[str, _Lane] = {}
        self._sent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._stopped = False

    def configure(self, settings: NotificationSettings) -> None:
        """Use these receivers from now on (kept while they do not change)."""
        if settings.receivers == self._receivers:
            return
        targets: dict[str, Target] = {}
        for receiver in settings.receivers:
            try:
                targets[receiver.name] = resolve(receiver, self._environ, self._dir)
            except ValueError as e:
                log.error("notifications to %s off: %s", receiver.name, e)
        with self._cond:
            self._receivers, self._targets = settings.receivers, targets
        if targets:
            log.info("notifications: %s", ", ".join(sorted(targets)))

    def notify(self, notice: Notice) -> None:
        """Queue ``notice`` for its receivers; returns at once."""
        receivers = routes(self._receivers, notice)
        if not receivers:
            return
        with self._cond:
            for receiver in receivers:
                target = self._targets.get(receiver.name)
                if target is None:
                    continue
                sent_key = (receiver.name, notice.key)
                if sent_key in self._sent:
                    self._count(receiver.name, "deduplicated")
                    continue
                lane = self._lane(receiver.name)
                if len(lane.queue) >= QUEUE_MAX:
                    self._count(receiver.name, "dropped")
                    log.warning("notification to %s dropped: %d waiting", receiver.name,
                                len(lane.queue))
                    continue
                self._remember(sent_key)
                lane.queue.append(_Delivery(time.monotonic(), target, notice))
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every queue to be empty (a CLI before it exits)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(lane.queue or lane.busy for lane in self._lanes.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _remember(self, key: tuple[str, str]) -> None:
        self._sent[key] = None
        while len(self._sent) > DEDUP_MAX:
            self._sent.popitem(last=False)

    def _lane(self, name: str) -> _Lane:
        """The receiver's lane, its thread started (``self._cond`` held)."""
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = _Lane()
            threading.Thread(target=self._run, args=(lane,), name=f"gitray-notify-{name}",
                             daemon=True).start()
        return lane

    def _run(self, lane: _Lane) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not lane.queue
                                             or lane.queue[0].due > time.monotonic()):
                    self._cond.wait(lane.queue[0].due - time.monotonic() if lane.queue
                                    else None)
                if self._stopped:
                    return
                delivery = lane.queue.popleft()
                lane.busy = True
            again = None
            try:
                again = self._deliver(delivery)
            finally:
                with self._cond:
                    if again is not None:
                        lane.queue.appendleft(again)  # retried before the later notices
                    lane.busy = False
                    self._cond.notify_all()

    def _deliver(self, d: _Delivery) -> _Delivery | None:
        """Post ``d``; the retry to make when it failed and attempts are left."""
        target = d.target
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        try:
            response = self._client.post(target.url, json=payload(target.kind, d.notice),
                                         headers=headers)
            problem = "" if response.is_success else f"HTTP {response.status_code}"
        except httpx.HTTPError as e:
            problem = redact_secrets(f"{type(e).__name__}: {e}", [target.url, target.token])
        if not problem:
            self._count(target.name, "sent")
            return None
        if d.attempt >= ATTEMPTS:
            self._count(target.name, "failed")
            log.error("notification %s to %s failed after %d attempts: %s",
                      d.notice.event.value, target.name, d.attempt, problem)
            return None
        backoff = d.backoff or Backoff(FIRST_PAUSE_S, cap=PAUSE_CAP_S, jitter=0.2)
        pause = backoff.next()
        self._count(target.name, "retried")
        log.info("notification %s to %s: %s; retrying in %.0f s", d.notice.event.value,
                 target.name, problem, pause)
        return _Delivery(time.monotonic() + pause, target, d.notice, d.attempt + 1, backoff)
