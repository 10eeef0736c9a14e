"""A repository revision as bytes: the files gitray may read, and the limits on reading them.

Values only, no I/O: ``gitray.git.source`` fills a ``Snapshot`` from Git or a directory,
``gitray.plans.load`` parses it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from gitray.core.model import stable_hash

__all__ = [
    "MANIFEST_SUFFIXES",
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "RepoFile",
    "Snapshot",
    "is_manifest_name",
    "snapshot_revision",
]

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TOTAL_BYTES = 64 * 1024 * 1024
MAX_FILES = 5000
MANIFEST_SUFFIXES = (".yaml", ".yml")



@dataclass(frozen=True)
class RepoFile:
    """One file of a snapshot. ``data`` is None when it was not read, and ``problem`` says why."""

    path: str  # posix path relative to the repository root, e.g. "services/text.yaml"
    data: bytes | None
    problem: str | None = None
    # Git's object id of the bytes (of the file a symlink resolves to); "" when not from Git.
    # Equal ids mean equal bytes: a reader may reuse them, a loader may key results by them.
    blob: str = field(default="", compare=False)


@dataclass(frozen=True)
class Snapshot:
    """The files of one revision of a repository (only those that may matter to gitray)."""

    revision: str  # full commit SHA, or "worktree" for an uncommitted directory
    label: str  # for people: "examples-repo (working tree)", "1a2b3c4 (main)"
    files: tuple[RepoFile, ...]
    # how many blobs were read from Git; the others were reused from a previous snapshot
    blobs_read: int = field(default=0, compare=False)

    def blob_data(self) -> dict[str, bytes]:
        """Bytes by blob id, for reading the next revision without re-reading these."""
        return {f.blob: f.data for f in self.files if f.blob and f.data is not None}


def is_manifest_name(path: str) -> bool:
    """Whether a file could hold manifests (the cheap test the source layer uses)."""
    return path.lower().endswith(MANIFEST_SUFFIXES)


def snapshot_revision(snapshot: Snapshot) -> str:
    """The commit SHA; for an uncommitted working tree, ``worktree:<hash of its files>`` so a
    plan saved from a working tree is stale once the files change."""
    if snapshot.revision != "worktree":
        return snapshot.revision
    digest = stable_hash([[f.path, f.problem or "",
                           hashlib.sha256(f.data).hexdigest() if f.data is not None else ""]
                          for f in sorted(snapshot.files, key=lambda f: f.path)], 40)
    return f"worktree:{digest}"
