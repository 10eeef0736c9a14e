"""What ``gitray sync`` keeps of Git between passes, and how a standby keeps it warm. I/O
(git fetch and reading a commit; never the cluster's objects).

Passes re-read the same commit (drift, deletions, retries) and new commits change a few files:
:class:`Revisions` keeps the last commit's files and each file's validated result. A standby
(not holding the Lease) fetches the branch and validates its head into them about every
``STANDBY_PREPARE_S``, quietly (the leader reports problems), so that taking over costs a plan,
not a cold load.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from gitray.core.credentials import redact_url
from gitray.core.errors import GitrayError
from gitray.core.snapshot import Snapshot
from gitray.daemon.settings import DaemonSettings
from gitray.daemon.state import PassLock
from gitray.engine.apply import desired_from
from gitray.git.source import fetch_branch, read_snapshot
from gitray.k8s.client import Kube
from gitray.plans.load import LoadMemo

__all__ = ["Revisions", "Standby"]

log = logging.getLogger("gitray.sync")  # the `gitray sync` logger (log pipelines match it)

STANDBY_PREPARE_S = 30.0  # a standby fetches and validates the branch head this often


class Revisions:
    """The last commit read (its files) and the memo of validated files."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.memo = LoadMemo()

    def read(self, cache: Path, sha: str) -> Snapshot:
        """Commit ``sha``'s files (blobs the previous revision held are not read again)."""
        if self.snapshot is None or self.snapshot.revision != sha:
            self.snapshot = read_snapshot(str(cache), sha, previous=self.snapshot)
        return self.snapshot


class Standby:
    def __init__(self, settings: DaemonSettings, kube: Kube, revisions: Revisions,
                 passing: PassLock) -> None:
        self._settings = settings
        self._kube = kube
        self._revisions = revisions
        self._passing = passing  # held while a sync pass runs
        self._prepared_at: float | None = None  # when it last fetched and validated

    def prepare(self) -> None:
        """Fetch the branch and validate its head into the memo, at most every
        ``STANDBY_PREPARE_S``, and never while a pass runs (this process just became leader)."""
        now = time.monotonic()
        if self._prepared_at is not None and now - self._prepared_at < STANDBY_PREPARE_S:
            return
        self._prepared_at = now
        if not self._passing.acquire_if_idle():
            return
        s = self._settings
        try:
            fetched = fetch_branch(s.repo, s.branch, cache_dir=s.cache_dir)
            snapshot = self._revisions.read(fetched.cache, fetched.sha)
            desired_from(snapshot, s.overrides, self._revisions.memo, self._kube)
        except GitrayError as e:
            log.debug("standby: could not prepare %s: %s", redact_url(s.repo), e)
        finally:
            self._passing.release()
