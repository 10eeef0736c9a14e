"""The writes of leader election: create a Lease, and replace it with the next record by
compare-and-swap (the ``resourceVersion`` of the Lease it was computed from). Does I/O; the
rules are :mod:`gitray.k8s.election`, the holder's state and threads :mod:`gitray.k8s.lease`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitray.core.errors import ConfigError, ConflictError, NotFoundError
from gitray.core.timefmt import utc_timestamp
from gitray.k8s.client import Kube
from gitray.k8s.election import LeaseRecord, lease_body, next_record

__all__ = ["create_lease", "renew_in_place", "wall_now", "write_next"]


def wall_now() -> str:
    """A Lease's MicroTime: written for people and other tools; never read back for
    decisions (expiry is judged on each process's own monotonic clock)."""
    return utc_timestamp(digits=6)


def create_lease(kube: Kube, body: Mapping[str, Any]) -> dict[str, Any]:
    """Create the Lease ``body``: ConflictError when another process created it first, a
    ConfigError that says what to do when its namespace does not exist."""
    namespace = body["metadata"]["namespace"]
    try:
        return kube.create(body)
    except NotFoundError as e:
        if f'namespaces "{namespace}" not found' not in str(e):
            raise
        raise ConfigError(
            f"the Lease namespace {namespace!r} does not exist: create it (kubectl create "
            f"namespace {namespace}) or choose another with --lease-namespace") from e


def write_next(kube: Kube, live: Mapping[str, Any], identity: str, *, renewing: bool,
               duration_s: int) -> dict[str, Any]:
    """Replace ``live`` with the record that renews it for ``identity`` (or takes it):
    ConflictError when anyone wrote the Lease since ``live`` was read."""
    new = next_record(LeaseRecord.from_spec(live.get("spec")), identity, renewing=renewing,
                      duration_s=duration_s, now_wall=wall_now())
    return kube.replace(lease_body(live, new))


def renew_in_place(kube: Kube, written: Mapping[str, Any], identity: str,
                   duration_s: int) -> dict[str, Any] | None:
    """The holder's renew in one request, no read (client-go's fast path): the next record
    over the Lease as this holder last wrote it. None when anyone wrote (or deleted) the Lease
    since: then read it and decide."""
    try:
        return write_next(kube, written, identity, renewing=True, duration_s=duration_s)
    except (ConflictError, NotFoundError):
        return None
