"""What the daemon tells the world about a pass besides its logs: commit statuses on the Git
host (through the provider the revision's gitray.yaml names) and Kubernetes Events on the
objects a step changed. Best effort; I/O through ``gitray.hosts`` and ``gitray.k8s.events``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path

from gitray.core.errors import GitrayError, Interrupted
from gitray.core.model import ObjectKey
from gitray.core.snapshot import Snapshot
from gitray.daemon.metrics import Metrics
from gitray.daemon.settings import DaemonSettings
from gitray.engine.apply import desired_config
from gitray.engine.executor import StepEvent
from gitray.hosts.publisher import PublishCounts, StatusPublisher, make_publisher
from gitray.hosts.status import CommitStatus, State, context_for, step_description
from gitray.k8s.events import EventRecorder, EventTarget
from gitray.plans.plan import Step
from gitray.plans.steptypes import FROM_PARAMS, STEP_KINDS, StepType

__all__ = ["StatusBridge", "event_target", "step_reporter"]

log = logging.getLogger("gitray.sync")


class StatusBridge:
    """Posts the daemon's statuses through the provider the revision's settings name."""

    def __init__(self, settings: DaemonSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.publisher: StatusPublisher | None = None
        self.prefix = "gitray"
        self._chosen: tuple[object, ...] = ()
        self._seen = PublishCounts()
        self._counting = threading.Lock()  # posts come from the runs' workers too
        self._later: queue.SimpleQueue[tuple[str, ObjectKey | None, str, str]] = \
            queue.SimpleQueue()
        threading.Thread(target=self._posting, daemon=True, name="gitray-status-later").start()

    def configure(self, snapshot: Snapshot, cache: Path) -> None:
        """Pick the provider from gitray.yaml (+ overrides); keep it while they don't change.
        A revision whose settings are invalid keeps the previous provider."""
        try:
            config = desired_config(snapshot, self.settings.overrides)
        except GitrayError:
            return
        status = config.status
        chosen = (status.provider, status.url, status.repository, str(cache))
        self.prefix = status.context_prefix
        if chosen == self._chosen:
            return
        try:
            self.publisher = make_publisher(status, token=self.settings.status_token,
                                            repo_dir=cache, remote=self.settings.repo)
            self._chosen = chosen
            log.info("commit statuses: %s", status.provider.value)
        except GitrayError as e:
            log.error("commit statuses off: %s", e)

    def post(self, sha: str, key: ObjectKey | None, state: str, description: str) -> None:
        if self.publisher is None:
            return
        self.publisher.publish(CommitStatus(sha, context_for(self.prefix, key), State(state),
                                            description))
        self._count()

    def post_later(self, sha: str, key: ObjectKey | None, state: str, description: str
                   ) -> None:
        """:meth:`post` on a thread of its own, in order, returning at once: for a caller that
        must not wait for the Git host (a shard keeper's round renews its Leases: a post held
        behind other posts or a slow push let a Lease lapse while its holder still drove it)."""
        self._later.put((sha, key, state, description))

    def _posting(self) -> None:
        while True:
            sha, key, state, description = self._later.get()
            try:
                self.post(sha, key, state, description)
            except Exception:  # (best effort, like every status; the thread must go on)
                log.exception("commit status %s on %s not posted", state, sha[:7])

    def flush(self) -> None:
        if self.publisher is not None:
            self.publisher.flush()
            self._count()

    def _count(self) -> None:
        assert self.publisher is not None
        with self._counting:
            now = self.publisher.counts()
            for result in ("posted", "deduplicated", "retried", "failed"):
                delta = getattr(now, result) - getattr(self._seen, result)
                if delta > 0:
                    self.metrics.status_posts.labels(result).inc(delta)
            self._seen = now


def event_target(step: Step) -> EventTarget | None:
    """The object a step changed, for its Kubernetes Event (None: no Event)."""
    target = STEP_KINDS[step.type].target
    api, kind = target or ("", "")
    if target == FROM_PARAMS:
        manifest = step.params.get("manifest") or {}
        api = str(manifest.get("apiVersion") or step.params.get("apiVersion") or "v1")
        kind = str(manifest.get("kind") or step.params.get("kind") or "")
    if not kind:
        return None
    reason = "".join(part.capitalize() for part in step.type.value.split("-"))
    return EventTarget(api, kind, step.target, reason)


# the steps that hold traffic at a share (their params name it) without moving it
_AT_PERCENT = {t for t, k in STEP_KINDS.items() if "percent" in k.params.required()
               and not k.moves_traffic}


def status_what(step: Step) -> str:
    """What a pending commit status says a step does: its type and target, and for an
    incremental upgrade's steps the traffic share (``shift-traffic svc-httproute: 25 % →
    svc-14f9f``, ``run-analysis svc-14f9f at 25 %``)."""
    what = f"{step.type.value} {step.target}"
    if step.type is StepType.AWAIT_APPROVAL:  # a blue-green upgrade's approval gate
        return f"{what}: held until `{step.params.get('approve')}`"
    if isinstance(gate := step.params.get("gate"), str):  # a blue-green gate's analysis
        return f"{what} {gate.replace('-', ' the ')}"
    percent = step.params.get("percent")
    if not isinstance(percent, int):
        return what
    if step.type is StepType.SHIFT_TRAFFIC:
        new, old = step.params.get("cluster"), step.params.get("from")
        return f"{what}: {f'{percent} % → {new}' if new != old else f'100 % → {old}'}"
    if step.type in _AT_PERCENT:
        return f"{what} at {percent} %"
    return what


def step_reporter(sha: str, post_status: Callable[[str, ObjectKey | None, str, str], None],
                  metrics: Metrics, events: EventRecorder,
                  stopping: threading.Event) -> Callable[[StepEvent], None]:
    """What the daemon does as steps run: statuses, logs, metrics, Events; and the point
    where a shutdown interrupts the pass (``Interrupted``)."""

    def report(event: StepEvent) -> None:
        if stopping.is_set():
            raise Interrupted("shutting down")
        step = event.step
        if event.phase == "start":
            what = status_what(step)
            if event.detail:  # a resumed step: "(resumed, 12 s of 30 s left)"
                what += f" ({event.detail})"
            post_status(sha, event.key, "pending", step_description(event.index, event.total,
                                                                    what))
            log.info("%s step %d/%d %s", event.key, event.index, event.total, what)
        elif event.phase in {"done", "failed"}:
            result = "ok" if event.phase == "done" else "failed"
            metrics.steps.labels(step.type.value, result).inc()
            log.log(logging.INFO if result == "ok" else logging.ERROR, "%s step %d/%d %s: %s",
                    event.key, event.index, event.total, step.type.value, event.detail)
            target = event_target(step)
            if result == "ok" and STEP_KINDS[step.type].mutates and target is not None:
                events.record(event.key, target, event.detail)
        elif event.phase == "superseded":
            log.info("%s step %d/%d %s stopped: %s", event.key, event.index, event.total,
                     step.type.value, event.detail)
        elif event.phase == "progress":
            log.debug("%s step %d/%d: %s", event.key, event.index, event.total, event.detail)
    return report
