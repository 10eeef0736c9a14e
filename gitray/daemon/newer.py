"""While a pass of one commit waits on an upgrade: has the branch moved on to a commit that
wants another spec for that workload? I/O (git fetch, reading and validating the commit).

SPEC §3: a new commit mid-upgrade abandons the pending cluster, and a revert to the active
spec cancels the upgrade. A pass runs its plan to the end, so without this a revert pushed
while a new cluster starts would wait for that cluster, move traffic to it, and only the next
pass would move it back. The executor asks this check on each progress report of a
RayService's wait before any traffic moved (``Executor.superseded``); a "yes" ends that run as
``cancelled`` and the daemon syncs the newer commit at once.

The branch is fetched at most once per ``every_s`` (the poll interval: the same cadence as
when no pass runs), or at once after a webhook (``poke``). A newer commit counts only when it
can be applied: a revision that cannot be read, is invalid, or fails signature verification
supersedes nothing (its own pass will refuse it); nor does one that removes the workload (the
upgrade finishes; the next pass plans the removal).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitray.core.errors import GitrayError
from gitray.core.model import Kind, ObjectKey
from gitray.core.snapshot import Snapshot
from gitray.engine.apply import desired_from
from gitray.git.signing import verify_commit
from gitray.git.source import fetch_branch, read_snapshot
from gitray.plans.load import LoadMemo
from gitray.plans.rayservice.planner import desired_hash

__all__ = ["NewerCommit", "Source"]

log = logging.getLogger("gitray.sync")


@dataclass(frozen=True)
class Source:
    """Where the daemon reads Git from, and what a revision must pass to be applied."""

    repo: str
    branch: str | None
    cache_dir: Path | None
    overrides: dict[str, Any]
    allowed_signers: Path | None


class NewerCommit:
    """``(workload, desired hash of its run) -> reason | None`` for a pass of ``sha``.

    Thread-safe (a wave's RayServices run in parallel): one fetch and one read at a time; the
    newest commit's desired hashes are kept until the branch moves again.
    """

    def __init__(self, source: Source, sha: str, snapshot: Snapshot, memo: LoadMemo,
                 every_s: float, poke: threading.Event,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.sha = sha
        self._snapshot = snapshot  # the pass's: the newer commit's blobs are read against it
        self._memo = memo
        self.every_s = every_s
        self._poke = poke
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._checked_at = monotonic()  # the pass has just fetched
        self._newest = sha
        self._hashes: dict[ObjectKey, str] = {}  # of self._newest, when it can be applied

    def __call__(self, key: ObjectKey, planned_for: str) -> str | None:
        with self._lock:
            now = self._monotonic()
            if self._poke.is_set() or now - self._checked_at >= self.every_s:
                self._poke.clear()
                self._checked_at = now
                self._refresh()
            wanted = self._hashes.get(key)
        if wanted is None or wanted == planned_for:
            return None
        return (f"Git moved on to {self._newest[:7]}, which wants another spec for "
                f"{key.kind} {key.namespace}/{key.name}")

    def _refresh(self) -> None:
        src = self.source
        try:
            fetched = fetch_branch(src.repo, src.branch, cache_dir=src.cache_dir)
            if fetched.sha == self._newest:
                return
            self._newest, self._hashes = fetched.sha, {}
            if fetched.sha == self.sha:
                return  # (the branch moved back to the pass's own commit)
            if src.allowed_signers is not None:
                verify_commit(fetched.cache, fetched.sha, src.allowed_signers)
            snapshot = read_snapshot(str(fetched.cache), fetched.sha, previous=self._snapshot)
            desired = desired_from(snapshot, src.overrides, self._memo)
        except GitrayError as e:
            log.debug("newer commit not checked: %s", e)  # its own pass reports it
            return
        self._hashes = {w.key: desired_hash(w.spec) for w in desired.workloads
                        if w.key.kind == Kind.RAY_SERVICE.value}
