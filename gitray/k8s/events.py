"""Kubernetes Events on the objects gitray changes (``kubectl describe`` shows them). I/O.

Best effort: an Event that cannot be written is logged at debug level and never fails a step.
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime

from gitray.core.errors import GitrayError
from gitray.core.model import ObjectKey
from gitray.k8s.client import Kube
from gitray.plans.plan import Step, StepType

__all__ = ["EventRecorder"]

log = logging.getLogger("gitray.events")

_TARGET_KIND = {
    StepType.CREATE_CLUSTER: ("ray.io/v1", "RayCluster"),
    StepType.UPDATE_CLUSTER: ("ray.io/v1", "RayCluster"),
    StepType.DEPLOY_SERVE: ("ray.io/v1", "RayCluster"),
    StepType.SCHEDULE_CLUSTER_DELETION: ("ray.io/v1", "RayCluster"),
    StepType.CANCEL_CLUSTER_DELETION: ("ray.io/v1", "RayCluster"),
    StepType.DELETE_CLUSTER: ("ray.io/v1", "RayCluster"),
    StepType.CANCEL_UPGRADE: ("ray.io/v1", "RayCluster"),
    StepType.CREATE_SERVICE: ("v1", "Service"),
    StepType.SWITCH_SERVICE: ("v1", "Service"),
    StepType.DELETE_SERVICE: ("v1", "Service"),
    StepType.CREATE_JOB: ("ray.io/v1", "RayJob"),
    StepType.DELETE_JOB: ("ray.io/v1", "RayJob"),
}


def _reason(step_type: StepType) -> str:
    return "".join(part.capitalize() for part in step_type.value.split("-"))


class EventRecorder:
    def __init__(self, kube: Kube, instance: str) -> None:
        self.kube = kube
        self.instance = instance

    def record(self, workload: ObjectKey, step: Step, message: str) -> None:
        api, kind = _TARGET_KIND.get(step.type, ("", ""))
        if step.type in {StepType.APPLY_OBJECT, StepType.DELETE_OBJECT}:
            manifest = step.params.get("manifest") or {}
            api = str(manifest.get("apiVersion") or step.params.get("apiVersion") or "v1")
            kind = str(manifest.get("kind") or step.params.get("kind") or "")
        if not kind:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{step.target}.gitray-{secrets.token_hex(6)}",
                         "namespace": workload.namespace},
            "involvedObject": {"apiVersion": api, "kind": kind, "name": step.target,
                               "namespace": workload.namespace},
            "reason": _reason(step.type),
            "message": f"{message} (workload {workload})"[:1000],
            "type": "Normal",
            "source": {"component": "gitray"},
            "reportingComponent": "gitray", "reportingInstance": self.instance[:128],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.kube.create(body)
        except GitrayError as e:
            log.debug("could not record an Event for %s: %s", step.target, e)
