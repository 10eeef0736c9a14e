"""Kubernetes Events on the objects gitray changes (``kubectl describe`` shows them). I/O.

Best effort: an Event that cannot be written is logged at debug level and never fails a step.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

from gitray.core.errors import GitrayError
from gitray.core.model import ObjectKey
from gitray.core.timefmt import utc_timestamp
from gitray.k8s.client import Kube

__all__ = ["EventRecorder", "EventTarget"]

log = logging.getLogger("gitray.events")


@dataclass(frozen=True)
class EventTarget:
    """The object an Event is about, and the Event's reason (``CreateCluster``, ...)."""

    api_version: str
    kind: str
    name: str
    reason: str


class EventRecorder:
    def __init__(self, kube: Kube, instance: str) -> None:
        self.kube = kube
        self.instance = instance

    def record(self, workload: ObjectKey, target: EventTarget, message: str) -> None:
        """A Normal Event on ``target`` (in the workload's namespace) saying ``message``."""
        now = utc_timestamp()
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{target.name}.gitray-{secrets.token_hex(6)}",
                         "namespace": workload.namespace},
            "involvedObject": {"apiVersion": target.api_version, "kind": target.kind,
                               "name": target.name, "namespace": workload.namespace},
            "reason": target.reason,
            "message": f"{message} (workload {workload})"[:1000],
            "type": "Normal",
            "source": {"component": "gitray"},
            "reportingComponent": "gitray", "reportingInstance": self.instance[:128],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.kube.create(body)
        except GitrayError as e:
            log.debug("could not record an Event for %s: %s", target.name, e)
