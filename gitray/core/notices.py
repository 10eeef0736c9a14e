"""What gitray tells people about (notifications): the kinds of events and one event's content.
Values only, no I/O. Made by ``gitray.engine.notices``, delivered by ``gitray.hosts.notify``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gitray.core.model import ObjectKey

__all__ = ["EventKind", "Notice"]


class EventKind(StrEnum):
    """The events a receiver may subscribe to (``notifications.receivers[].events``)."""

    UPGRADE_STARTED = "upgrade-started"  # a RayService builds a new cluster (extra capacity)
    TRAFFIC_STEP = "traffic-step"  # an incremental upgrade moved traffic
    ANALYSIS_FAILED = "analysis-failed"  # with the measured value
    ROLLED_BACK = "rolled-back"
    CONVERGED = "converged"  # a workload's run finished (it is in sync)
    RUN_FAILED = "run-failed"  # a workload's run failed (a RayJob: with Ray's error)
    HEALTH_DEGRADED = "health-degraded"
    HEALTH_RECOVERED = "health-recovered"
    DRIFT_HEALED = "drift-healed"  # a drift pass changed a workload back to Git
    CHANGE_REFUSED = "change-refused"  # a revision refused by validation (or its signature)


@dataclass(frozen=True)
class Notice:
    """One event: ``summary`` is one plain line; ``fields`` are (name, value) details."""

    event: EventKind
    revision: str
    summary: str
    workload: ObjectKey | None = None
    fields: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """What de-duplicates it: the same event, workload, revision and summary once."""
        return "\x00".join((self.event.value, str(self.workload or ""), self.revision,
                            self.summary))

    def as_dict(self) -> dict[str, object]:
        """The generic webhook's JSON body."""
        out: dict[str, object] = {"event": self.event.value, "revision": self.revision,
                                  "summary": self.summary, "fields": dict(self.fields)}
        if self.workload is not None:
            out["workload"] = {"kind": self.workload.kind, "namespace": self.workload.namespace,
                               "name": self.workload.name}
        return out
