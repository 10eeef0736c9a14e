"""What ``gitray sync`` holds back besides invalid and unappliable changes: workloads an open
freeze window covers (gitray.yaml ``freezeWindows``) and workloads ``gitray suspend`` holds;
and the controls that make a pass look again (``gitray resume``, ``gitray retry``). I/O (a LIST
of the controls, statuses through the daemon's poster).

A held workload's commit status is pending with the reason ("held: freeze window weekend (all
changes) until ...", "suspended by ... (gitray resume ... lets it run)"); the commit is not in
sync while anything is held. A run already under way (in flight or interrupted) goes on. When
the first window closes, a pass looks again (a due retry); a changed control (a suspend, resume
or retry) is noticed at the next poll while something is held or failed (one LIST a poll
then; none otherwise).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime

from gitray.core.config import Config
from gitray.core.errors import GitrayError
from gitray.core.model import ObjectKey
from gitray.daemon.state import StateBox
from gitray.engine.apply import freeze, suspended
from gitray.engine.controls import Control, ControlStore
from gitray.k8s.client import Kube
from gitray.plans.freeze import frozen_workloads
from gitray.plans.plan import Plan

__all__ = ["Holds"]

log = logging.getLogger("gitray.sync")

PostStatus = Callable[[str, ObjectKey | None, str, str], None]
_SPEAKS = frozenset({"commit", "retry", "run"})  # the passes that post a commit's statuses


class Holds:
    def __init__(self, kube: Kube, lease_namespace: str, post_status: PostStatus,
                 state: StateBox) -> None:
        self._store = ControlStore(kube, lease_namespace)
        self._post, self._state = post_status, state
        self._seen: dict[ObjectKey, str] | None = None  # resourceVersion by workload
        # whether a control can change what a pass does: something was held back or failed
        # (a resume or a retry needs a pass; a suspend waits for the next one)
        self._watch = False

    def controls(self) -> dict[ObjectKey, Control]:
        """Every control (one LIST); remembered, so that :meth:`changed` sees what is new."""
        controls = self._store.load_all()
        self._seen = {k: c.resource_version for k, c in controls.items()}
        return controls

    def changed(self) -> bool:
        """Whether a control was written since the last pass read them (a pass is due);
        read only while the last pass held something back or left a failure."""
        if not self._watch:
            return False
        try:
            now = {k: c.resource_version for k, c in self._store.load_all().items()}
        except GitrayError as e:
            log.info("controls not read: %s", e)
            return False
        return self._seen is not None and now != self._seen

    def hold(self, sha: str, trigger: str, plan: Plan, config: Config,
             controls: Mapping[ObjectKey, Control], under_way: Collection[ObjectKey],
             failed: Collection[ObjectKey]) -> tuple[Plan, list[ObjectKey]]:
        """``plan`` without what a freeze window or a suspension holds (runs under way go
        on), and the workloads held; their statuses say why, and a pass is due when the first
        window closes."""
        busy = {k: None for k in under_way}
        now = datetime.now(UTC)
        before = plan
        plan, frozen = freeze(plan, config, busy, now)
        plan, stopped = suspended(plan, controls, busy)
        held = [*frozen, *stopped]
        self._watch = bool(held or failed)
        for outcome in held:  # (said by the passes that speak; a drift pass repeats them)
            (log.info if trigger in _SPEAKS else log.debug)(
                "%s: %s not applied now: %s", sha[:7], outcome.key, outcome.reason)
            if trigger in _SPEAKS:
                self._post(sha, outcome.key, "pending", outcome.reason)
        if held and trigger in _SPEAKS:  # (a pass that starts runs too says "applying")
            self._post(sha, None, "pending", f"{len(held)} workload(s) held: {held[0].key}: "
                       f"{held[0].reason}")
        if frozen:  # look again when the first window closes (read again only then)
            windows = frozen_workloads(before, config.freeze_windows, now)
            first = min(windows[o.key].until for o in frozen)
            wait = max(1.0, (first - now).total_seconds())
            self._state.update(retry_at=time.monotonic() + wait)
        return plan, [o.key for o in held]
