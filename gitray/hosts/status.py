"""Commit statuses as values, and the interface every Git host's provider implements. No I/O.

Contexts are ``<prefix>/<namespace>/<Kind>/<name>`` per workload and ``<prefix>`` per commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from gitray.core.model import ObjectKey

__all__ = ["ELLIPSIS", "CommitStatus", "NullProvider", "Provider", "State", "context_for",
           "newer", "step_description", "trim"]

ELLIPSIS = "…"


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


def context_for(prefix: str, key: ObjectKey | None) -> str:
    """``<prefix>/<namespace>/<Kind>/<name>`` for a workload, ``<prefix>`` for the commit."""
    prefix = prefix.strip("/") or "gitray"
    return prefix if key is None else f"{prefix}/{key.namespace}/{key.kind}/{key.name}"


STEP = re.compile(r"^step [0-9]+/[0-9]+\b")


def step_description(k: int, n: int, what: str) -> str:
    """The pending description while step ``k`` of ``n`` runs (GitLab shows it as running)."""
    return f"step {k}/{n}: {what}"


def trim(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis when longer."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + ELLIPSIS


def newer(item: dict[str, Any], than: dict[str, Any] | None) -> bool:
    """Whether a listed status is newer than another (ids grow; list order varies by host)."""
    return than is None or int(item.get("id") or 0) > int(than.get("id") or 0)


class Provider(Protocol):
    name: str
    description_limit: int
    secrets: tuple[str, ...]
    reads_before_write: bool  # post() itself skips what the host already shows

    def post(self, status: CommitStatus) -> bool:
        """Send ``status``; False when the host already shows it (nothing was sent)."""
        ...

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        """The newest (state, description) for a context, None when there is none."""
        ...


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
