"""Live objects kept compact between reading them and planning with them. Pure, no I/O.

A live object decoded into Python dicts takes several times its JSON size, so holding the
whole live state of a large installation at once is what made planning's memory grow with the
repository. :class:`LiveStore` keeps the objects grouped in *batches* (see
:func:`batch_namespace`), each as zlib-compressed JSON chunks, and hands out one batch at a time
as a ``LiveState``, forgetting it: the planner (``gitray.plans.planner.Planner``) plans one
batch and frees it before the next.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable

from gitray.core.model import LiveObject, LiveState, ObjectKey

__all__ = ["LiveStore", "batch_namespace"]

_LEVEL = 1  # zlib's fastest level: chunks of similar objects still shrink ~10x


def batch_namespace(owner: ObjectKey | None, namespace: str) -> str:
    """The batch a live object belongs to: its owning workload's namespace (an object without
    an owner: its own), so that each workload's batch holds everything it owns."""
    return owner.namespace if owner is not None else namespace


class LiveStore:
    """Live objects by batch, compressed until taken. Not thread-safe."""

    def __init__(self) -> None:
        self._chunks: dict[str, list[bytes]] = {}
        self.objects = 0  # objects added (logs, benchmarks)
        self.compressed_bytes = 0

    def add(self, objects: Iterable[LiveObject]) -> None:
        """Keep ``objects`` (e.g. one LIST page): one compressed chunk per batch they touch."""
        rows: dict[str, list[list[object]]] = {}
        for o in objects:
            rows.setdefault(batch_namespace(o.owner, o.namespace), []).append(
                [o.kind, o.namespace, o.name, o.resource_version, o.body])
        for batch, group in rows.items():
            chunk = zlib.compress(json.dumps(group, separators=(",", ":")).encode(), _LEVEL)
            self._chunks.setdefault(batch, []).append(chunk)
            self.objects += len(group)
            self.compressed_bytes += len(chunk)

    def batches(self) -> list[str]:
        """The batches not taken yet, sorted."""
        return sorted(self._chunks)

    def take(self, batch: str) -> LiveState:
        """The objects of ``batch`` (sorted by kind, namespace, name), forgotten here."""
        objects = [LiveObject(str(kind), str(ns), str(name), str(rv), body)
                   for chunk in self._chunks.pop(batch, [])
                   for kind, ns, name, rv, body in json.loads(zlib.decompress(chunk))]
        objects.sort(key=lambda o: (o.kind, o.namespace, o.name))
        return LiveState(tuple(objects))
