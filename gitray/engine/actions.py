"""One idempotent handler per step type: check whether the effect holds, act only if not. I/O.

Handlers return a short message for the step result and raise ``TerminalError`` (the plan
fails with that reason) or ``TransientError`` (retried by the executor with backoff). Waits are
bounded by the step's timeout (a deadline handed in, partly spent when the step is resumed)
and woken by watch events where the API has them; Serve status is polled every 0.25 s at
first, slowing to every 1.5 s. ``report`` receives progress lines for long waits.
The Serve steps are ``gitray.engine.servesteps``'s; the steps of an incremental upgrade are
``gitray.engine.incremental.traffic``'s (steered by the run).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from gitray.core.errors import TerminalError, TransientError
from gitray.core.model import (
    ANN_DELETE_AFTER,
    ANN_WORKLOAD_KEY,
    API_VERSION_RAY,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from gitray.core.timefmt import utc_timestamp
from gitray.core.waits import Clock, Deadline, poll
from gitray.engine.deadlines import step_timeout
from gitray.engine.fence import Fence
from gitray.engine.incremental.probes import HttpProbe
from gitray.engine.incremental.traffic import TRAFFIC_STEPS, Steering, Traffic
from gitray.engine.ownership import labelled
from gitray.engine.parking import recall, remember
from gitray.engine.servesteps import Report, ServeSteps
from gitray.k8s.client import Kube
from gitray.plans.plan import Step
from gitray.plans.rayjob import TERMINAL_DEPLOYMENT_STATUSES
from gitray.plans.steptypes import (
    ApplyObjectParams,
    CreateServiceParams,
    DeleteObjectParams,
    ManifestParams,
    ScheduleDeletionParams,
    StepType,
    SwitchServiceParams,
    UpdateClusterParams,
    typed_params,
)
from gitray.ray.dashboard import Resolver

__all__ = ["Actions", "cluster_ready"]

DELETE_BUDGET_S = 180.0


def cluster_ready(cluster: Mapping[str, Any]) -> bool:
    status = cluster.get("status") or {}
    if status.get("state") == "ready":
        return True
    return any(c.get("type") == "HeadPodReady" and c.get("status") == "True"
               for c in status.get("conditions") or [])


class Actions:
    def __init__(self, kube: Kube, resolver: Resolver, fence: Fence,
                 clock: Clock | None = None, labels: Mapping[str, str] | None = None) -> None:
        self.kube = kube
        # added to every object created or applied (a sharded daemon: gitray.io/shard)
        self.labels = dict(labels or {})
        self.resolver = resolver
        # checked before a write made inside a wait step (the executor fences every mutating
        # step up front, but a wait step is not one)
        self.fence = fence
        self.clock = clock or Clock()
        self.traffic = Traffic(kube, resolver, self.clock, HttpProbe(resolver), self.labels)
        self.serve = ServeSteps(kube, resolver, fence, self.clock)
        self._handlers: dict[StepType, Callable[[str, Step, Report], str]] = {
            StepType.CREATE_CLUSTER: self._create_cluster,
            StepType.UPDATE_CLUSTER: self._update_cluster,
            StepType.CREATE_SERVICE: self._create_service,
            StepType.SWITCH_SERVICE: self._switch_service,
            StepType.DELETE_SERVICE: self._delete_service,
            StepType.SCHEDULE_CLUSTER_DELETION: self._schedule_deletion,
            StepType.CANCEL_CLUSTER_DELETION: self._cancel_deletion,
            StepType.DELETE_CLUSTER: self._delete_cluster,
            StepType.CANCEL_UPGRADE: self._delete_cluster,
            StepType.CREATE_JOB: self._create_job,
            StepType.DELETE_JOB: self._delete_job,
            StepType.APPLY_OBJECT: self._apply_object,
            StepType.DELETE_OBJECT: self._delete_object,
        }
        # the steps with a timeout (gitray.engine.deadlines.step_timeout): given their deadline
        self._timed: dict[StepType, Callable[[str, Step, Report, Deadline], str]] = {
            StepType.WAIT_CLUSTER_READY: self._wait_cluster_ready,
            StepType.DEPLOY_SERVE: self.serve.deploy_serve,
            StepType.WAIT_SERVE_RUNNING: self.serve.wait_serve_running,
            StepType.WAIT_JOB: self._wait_job,
        }

    def run(self, namespace: str, step: Step, report: Report, spent: float = 0.0,
            steering: Steering | None = None) -> str:
        """Run ``step``; ``spent``: seconds of its timeout used up before this call;
        ``steering``: the run's promote/abort signals (incremental upgrades)."""
        if step.type in TRAFFIC_STEPS:
            timeout = step_timeout(step)
            deadline = None if timeout is None else Deadline(timeout, self.clock, spent)
            return self.traffic.run(namespace, step, report, deadline, steering)
        timed = self._timed.get(step.type)
        if timed is not None:
            deadline = Deadline(step_timeout(step) or 0.0, self.clock, spent)
            return timed(namespace, step, report, deadline)
        return self._handlers[step.type](namespace, step, report)

    # ---- helpers ------------------------------------------------------------------------

    def _deadline(self, seconds: float) -> Deadline:
        return Deadline(seconds, self.clock)

    def _create(self, manifest: Mapping[str, Any]) -> str:
        manifest = labelled(manifest, self.labels)
        kind, meta = manifest["kind"], manifest["metadata"]
        ns, name = meta["namespace"], meta["name"]
        existing = self.kube.get_or_none(manifest["apiVersion"], kind, ns, name)
        if existing is not None:
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
                raise TerminalError(f"{kind} {ns}/{name} exists and is not managed by gitray; "
                                    "rename the workload or remove that object")
            if (existing.get("metadata") or {}).get("deletionTimestamp"):
                self._await_gone(manifest["apiVersion"], kind, ns, name)
            else:
                return f"{kind} {name} already exists"
        self.kube.create(manifest)
        return f"created {kind} {name}"

    def _await_gone(self, api: str, kind: str, ns: str, name: str) -> None:
        poll(lambda: True if self.kube.get_or_none(api, kind, ns, name) is None else None,
             self._deadline(DELETE_BUDGET_S), wait=lambda _left: self.clock.sleep(1.0),
             timeout=lambda: TerminalError(f"{kind} {ns}/{name} still exists "
                                           f"{DELETE_BUDGET_S:.0f} s after deletion "
                                           "(a finalizer may be stuck)"))

    def _await_change(self, api: str, kind: str, ns: str, name: str, rv: str,
                      seconds: float) -> None:
        """Block until the object changes (watch event) or ``seconds`` pass."""
        timeout = max(1, int(min(seconds, 10)))
        started = self.clock.monotonic()
        try:
            for _ in self.kube.watch(api, kind, ns, field_selector=f"metadata.name={name}",
                                     resource_version=rv, timeout_s=timeout):
                return
        except TransientError:
            pass
        if self.clock.monotonic() - started < 0.5:  # watch unavailable: don't spin
            self.clock.sleep(1.0)

    # ---- clusters -----------------------------------------------------------------------

    def _create_cluster(self, ns: str, step: Step, report: Report) -> str:
        return self._create(typed_params(step, ManifestParams).manifest)

    def _update_cluster(self, ns: str, step: Step, report: Report) -> str:
        p = typed_params(step, UpdateClusterParams)
        manifest = copy.deepcopy(dict(p.manifest))
        if p.preserve_live_replicas:
            live = self.kube.get(API_VERSION_RAY, "RayCluster", ns, step.target)
            replicas = {g.get("groupName"): g.get("replicas")
                        for g in (live.get("spec") or {}).get("workerGroupSpecs") or []}
            for group in manifest["spec"].get("workerGroupSpecs") or []:
                if replicas.get(group.get("groupName")) is not None:
                    group["replicas"] = replicas[group["groupName"]]
        self.kube.apply(labelled(manifest, self.labels))
        return f"applied RayCluster {step.target}"

    def _wait_cluster_ready(self, ns: str, step: Step, report: Report, deadline: Deadline) -> str:
        seen: dict[str, Any] = {}

        def attempt() -> str | None:
            cluster = self.kube.get_or_none(API_VERSION_RAY, "RayCluster", ns, step.target)
            if cluster is None:
                raise TerminalError(f"RayCluster {step.target} disappeared while waiting")
            seen.clear()
            seen.update(cluster)
            status = cluster.get("status") or {}
            if cluster_ready(cluster):
                return f"{step.target} ready after {deadline.elapsed():.0f} s"
            if status.get("state") == "failed":
                raise TerminalError(f"RayCluster {step.target} failed: "
                                    f"{status.get('reason') or 'see its events'}")
            return None

        def wait(left: float) -> None:
            report(f"head pod not ready yet, {deadline.elapsed():.0f} s")
            rv = str((seen.get("metadata") or {}).get("resourceVersion", ""))
            self._await_change(API_VERSION_RAY, "RayCluster", ns, step.target, rv, left)

        def timed_out() -> TerminalError:
            status = seen.get("status") or {}
            conditions = ", ".join(f"{c.get('type')}={c.get('status')}"
                                   for c in status.get("conditions") or []) or "none"
            return TerminalError(f"RayCluster {step.target} not ready after "
                                 f"{deadline.seconds:.0f} s "
                                 f"(state {status.get('state') or 'unknown'}; "
                                 f"conditions {conditions})")

        return poll(attempt, deadline, wait=wait, timeout=timed_out)

    def _delete_cluster(self, ns: str, step: Step, report: Report) -> str:
        if not self.kube.delete(API_VERSION_RAY, "RayCluster", ns, step.target):
            return f"RayCluster {step.target} already gone"
        self._await_gone(API_VERSION_RAY, "RayCluster", ns, step.target)
        return f"deleted RayCluster {step.target}"

    def _schedule_deletion(self, ns: str, step: Step, report: Report) -> str:
        cluster = self.kube.get_or_none(API_VERSION_RAY, "RayCluster", ns, step.target)
        if cluster is None:
            return f"{step.target} already gone"
        annotations = (cluster.get("metadata") or {}).get("annotations") or {}
        if annotations.get(ANN_DELETE_AFTER):
            return f"deletion already scheduled at {annotations[ANN_DELETE_AFTER]}"
        when = utc_timestamp(self.clock.now() + timedelta(
            seconds=int(typed_params(step, ScheduleDeletionParams).delay_seconds)))
        self.kube.patch(API_VERSION_RAY, "RayCluster", ns, step.target,
                        {"metadata": {"annotations": {ANN_DELETE_AFTER: when}}})
        return f"{step.target} will be deleted after {when}"

    def _cancel_deletion(self, ns: str, step: Step, report: Report) -> str:
        self.kube.patch(API_VERSION_RAY, "RayCluster", ns, step.target,
                        {"metadata": {"annotations": {ANN_DELETE_AFTER: None}}})
        return f"deletion of {step.target} cancelled"

    # ---- Services -----------------------------------------------------------------------

    def _point(self, ns: str, name: str, selector: Mapping[str, str]) -> str:
        svc = self.kube.get("v1", "Service", ns, name)
        if (svc.get("spec") or {}).get("selector") == dict(selector):
            return f"Service {name} already selects {selector.get('ray.io/cluster')}"
        # Only the selector changes; clusterIP (immutable) and ports stay as they are.
        self.kube.patch("v1", "Service", ns, name,
                        [{"op": "replace", "path": "/spec/selector", "value": dict(selector)}],
                        json_patch=True)
        return f"Service {name} now selects {selector.get('ray.io/cluster')}"

    def _create_service(self, ns: str, step: Step, report: Report) -> str:
        p = typed_params(step, CreateServiceParams)
        manifest = p.manifest
        if p.role == "serve":
            self.serve.gate_serve_pods(ns, str(p.cluster), report, manifest["spec"]["selector"])
        existing = self.kube.get_or_none("v1", "Service", ns, step.target)
        if existing is not None:
            meta = existing.get("metadata") or {}
            owner = (meta.get("annotations") or {}).get(ANN_WORKLOAD_KEY)
            mine = manifest["metadata"]["annotations"].get(ANN_WORKLOAD_KEY)
            if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY or (
                    owner is not None and owner != mine):  # e.g. a name from spec.serveService
                raise TerminalError(f"Service {ns}/{step.target} exists and is not this "
                                    f"workload's ({owner or 'not managed by gitray'}); choose "
                                    "another name or remove that Service")
            return self._point(ns, step.target, manifest["spec"]["selector"])
        if p.server_side_apply:  # spec.serveService: later changes are applied
            self.kube.apply(labelled(manifest, self.labels))
            return f"created Service {step.target}"
        return self._create(manifest)

    def _switch_service(self, ns: str, step: Step, report: Report) -> str:
        p = typed_params(step, SwitchServiceParams)
        if p.role == "serve":
            n = self.serve.gate_serve_pods(ns, p.cluster, report, p.selector)
            report(f"{n} pod(s) with a healthy Serve proxy")
        return self._point(ns, step.target, p.selector)

    def _delete_service(self, ns: str, step: Step, report: Report) -> str:
        gone = not self.kube.delete("v1", "Service", ns, step.target)
        return f"Service {step.target} {'already gone' if gone else 'deleted'}"

    # ---- jobs and supporting objects ----------------------------------------------------

    def _create_job(self, ns: str, step: Step, report: Report) -> str:
        return self._create(typed_params(step, ManifestParams).manifest)

    def _wait_job(self, ns: str, step: Step, report: Report, deadline: Deadline) -> str:
        seen: dict[str, Any] = {}

        def attempt() -> str | None:
            job = self.kube.get_or_none(API_VERSION_RAY, "RayJob", ns, step.target)
            gone = job is None
            if job is None and not seen:  # resumed after parking: what it saw then
                seen.update(recall("RayJob", ns, step.target))
            if job is None:  # KubeRay deletes a finished run with a DeleteSelf rule
                if deployment() not in TERMINAL_DEPLOYMENT_STATUSES:
                    self._last_state(ns, step.target, seen)
                if deployment() not in TERMINAL_DEPLOYMENT_STATUSES:
                    raise TerminalError(f"RayJob {step.target} disappeared while waiting")
                job = dict(seen)
            seen.clear()
            seen.update(job)
            status = job.get("status") or {}
            deployment_status = status.get("jobDeploymentStatus")
            if deployment_status in TERMINAL_DEPLOYMENT_STATUSES:
                if deployment_status == "Failed" or status.get("jobStatus") in {"FAILED",
                                                                                 "STOPPED"}:
                    why = status.get("message") or status.get("reason") or deployment_status
                    raise TerminalError(f"run {step.target} failed: {why}")
                after = " (then KubeRay deleted it)" if gone else ""
                return (f"run {step.target} finished: "
                        f"{status.get('jobStatus') or deployment_status}{after}")
            return None

        def deployment() -> str:
            return str((seen.get("status") or {}).get("jobDeploymentStatus") or "")

        def wait(left: float) -> None:
            remember("RayJob", ns, step.target, seen)  # (the wait may park now)
            report(f"run is {deployment() or 'starting'}, {deadline.elapsed():.0f} s")
            rv = str((seen.get("metadata") or {}).get("resourceVersion", ""))
            self._await_change(API_VERSION_RAY, "RayJob", ns, step.target, rv, left)

        try:
            finished = poll(attempt, deadline, wait=wait, timeout=lambda: TerminalError(
                f"run {step.target} not finished after {deadline.seconds:.0f} s (status "
                f"{deployment() or 'none'})"))
        except TerminalError:
            remember("RayJob", ns, step.target, None)
            raise
        remember("RayJob", ns, step.target, None)
        return finished

    def _last_state(self, ns: str, name: str, seen: dict[str, Any]) -> None:
        """Update ``seen`` to the last state of a RayJob deleted since it was read: its watch
        events from there, up to the deletion (which carries the final status)."""
        rv = str((seen.get("metadata") or {}).get("resourceVersion", ""))
        if not rv:
            return
        try:
            for kind, obj in self.kube.watch(API_VERSION_RAY, "RayJob", ns,
                                             field_selector=f"metadata.name={name}",
                                             resource_version=rv, timeout_s=2):
                seen.clear()
                seen.update(obj)
                if kind == "DELETED":
                    return
        except TransientError:
            pass

    def _delete_job(self, ns: str, step: Step, report: Report) -> str:
        gone = not self.kube.delete(API_VERSION_RAY, "RayJob", ns, step.target)
        return f"RayJob {step.target} {'already gone' if gone else 'deleted'}"

    def _apply_object(self, ns: str, step: Step, report: Report) -> str:
        p = typed_params(step, ApplyObjectParams)
        manifest = p.manifest
        if p.gate_serve:  # a per-cluster serve Service (incremental upgrade)
            n = self.serve.gate_serve_pods(ns, p.gate_serve, report, manifest["spec"]["selector"])
            report(f"{n} pod(s) with a healthy Serve proxy")
        self.kube.apply(labelled(manifest, self.labels))
        return f"applied {manifest['kind']} {step.target}"

    def _delete_object(self, ns: str, step: Step, report: Report) -> str:
        p = typed_params(step, DeleteObjectParams)
        gone = not self.kube.delete(str(p.api_version), str(p.kind), ns, step.target)
        return f"{p.kind} {step.target} {'already gone' if gone else 'deleted'}"
