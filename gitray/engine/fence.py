"""The Lease as the engine sees it: one small interface (``gitray.k8s.lease.Lease`` is the
real one). No I/O here."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Fence"]


class Fence(Protocol):
    """Raises ``LeaseLostError`` from ``ensure_held`` unless this process still leads."""

    @property
    def epoch(self) -> int: ...

    def ensure_held(self) -> None: ...
