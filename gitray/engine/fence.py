"""The Lease as the engine sees it: one small interface (``gitray.k8s.lease.Lease`` is the
real one). No I/O here."""

from __future__ import annotations

from typing import Protocol

from gitray.core.errors import GitrayError

__all__ = ["Fence", "ReadOnly"]


class Fence(Protocol):
    """Raises ``LeaseLostError`` from ``ensure_held`` unless this process still leads."""

    @property
    def epoch(self) -> int: ...

    def ensure_held(self) -> None: ...


class ReadOnly:
    """For readers of run records (``gitray plan``, ``gitray status``): they hold no Lease
    and never write."""

    epoch = 0

    def ensure_held(self) -> None:
        raise GitrayError("a reader of run records never writes them")
