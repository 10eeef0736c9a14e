"""The step registry: one row per step type, the one place a step type's meaning is written.
Pure, no I/O.

A row (:class:`StepKind`) holds the typed parameters (:class:`Params` subclasses, with their
JSON codec), whether the step changes the cluster (``mutates``: waits and holds only observe;
an analysis may roll back, so it counts), whether traffic may have moved once it ran
(``moves_traffic``), whether a newer commit may end it (``supersedable``: a RayService's waits
before any traffic moved), its default timeout (and, for a hold, that its timeout is how long
it holds), the kind of object its target names (for its Kubernetes Event) and ``describe``,
its plain-English line. Every table that needs one of these reads :data:`STEP_KINDS`; the
step's handler lives in ``gitray.engine`` (checked by tests/unit/plans/test_step_registry.py, which
also holds ``schemas/plan.schema.json``'s per-type params to the rows).

Adding a step type: its :class:`StepType` value, params dataclass and row here, its handler in
the engine, and their tests (``scripts/gen-schemas --only plan`` then rewrites the plan schema;
a line too long for a lambda goes to ``gitray.plans.stepdescribe``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from gitray.core.model import JSON
from gitray.plans import stepdescribe as lines
from gitray.plans.stepcodec import P, Params, duration

__all__ = [
    "CLUSTER", "FROM_PARAMS", "JOB", "SERVICE", "STEP_KINDS", "StepKind",
    "StepType", "describe_step", "params_of", "typed_params",
]


class StepType(StrEnum):
    """Every kind of step a plan may hold. The values are the wire format; each has its row in
    :data:`STEP_KINDS`."""

    CREATE_CLUSTER = "create-cluster"
    UPDATE_CLUSTER = "update-cluster"
    WAIT_CLUSTER_READY = "wait-cluster-ready"
    DEPLOY_SERVE = "deploy-serve"
    WAIT_SERVE_RUNNING = "wait-serve-running"
    CREATE_SERVICE = "create-service"
    SWITCH_SERVICE = "switch-service"
    DELETE_SERVICE = "delete-service"
    SCHEDULE_CLUSTER_DELETION = "schedule-cluster-deletion"
    CANCEL_CLUSTER_DELETION = "cancel-cluster-deletion"
    DELETE_CLUSTER = "delete-cluster"
    CANCEL_UPGRADE = "cancel-upgrade"
    CREATE_JOB = "create-job"
    WAIT_JOB = "wait-job"
    DELETE_JOB = "delete-job"
    APPLY_OBJECT = "apply-object"
    DELETE_OBJECT = "delete-object"
    # progressive delivery (RayService upgradeStrategy NewClusterWithIncrementalUpgrade)
    SET_SERVE_CAPACITY = "set-serve-capacity"  # Serve target_capacity of one cluster
    SHIFT_TRAFFIC = "shift-traffic"  # HTTPRoute backendRefs weights between two clusters
    WAIT_INTERVAL = "wait-interval"  # hold a weight for intervalSeconds
    RUN_ANALYSIS = "run-analysis"  # hold a weight, then check; rolls back on failureLimit
    PAUSE = "pause"  # timed, or until `gitray promote`
    # gates of a blue-green RayService upgrade (besides run-analysis)
    AWAIT_APPROVAL = "await-approval"  # hold before the switch until `gitray approve`


class _Step(Protocol):  # gitray.plans.plan.Step (which names its type with StepType)
    @property
    def type(self) -> StepType: ...
    @property
    def target(self) -> str: ...
    @property
    def params(self) -> Mapping[str, JSON]: ...


# what a step's target names: (apiVersion, kind); FROM_PARAMS: the manifest or params say
CLUSTER = ("ray.io/v1", "RayCluster")
SERVICE = ("v1", "Service")
JOB = ("ray.io/v1", "RayJob")
FROM_PARAMS = ("", "")


# ---- params, one dataclass per step type --------------------------------------------------
# Required fields first; optional ones default to None (absent from the JSON). ``schema``: what
# plan.schema.json adds to the required keys (generated from here: gitray.plans.stepschema).

PERCENT = {"type": "integer", "minimum": 0, "maximum": 100}
POSITIVE = {"type": "integer", "minimum": 1}


@dataclass(frozen=True)
class ManifestParams(Params):  # create-cluster, create-job
    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class UpdateClusterParams(Params):
    manifest: Mapping[str, Any]
    preserve_live_replicas: bool | None = None
    recreate_pods: bool | None = None
    new_pods_only: bool | None = None


@dataclass(frozen=True)
class ClusterParams(Params):  # the cluster steps with no more than their cluster
    cluster: str | None = None


@dataclass(frozen=True)
class WaitClusterParams(Params):
    timeout_seconds: int
    cluster: str | None = None


@dataclass(frozen=True)
class DeployServeParams(Params):
    cluster: str
    serve_config: Mapping[str, Any]
    serve_config_hash: str
    target_capacity: int | None = None
    timeout_seconds: int | None = None


@dataclass(frozen=True)
class WaitServeParams(Params):
    timeout_seconds: int
    cluster: str | None = None
    serve_config: Mapping[str, Any] | None = None
    serve_config_hash: str | None = None


@dataclass(frozen=True)
class CreateServiceParams(Params):
    manifest: Mapping[str, Any]
    cluster: str | None = None
    role: str | None = None
    server_side_apply: bool | None = None


@dataclass(frozen=True)
class SwitchServiceParams(Params):
    cluster: str
    selector: Mapping[str, str]
    role: str
    from_: str | None = field(default=None, metadata={"json": "from"})


@dataclass(frozen=True)
class DeleteServiceParams(Params):
    service: str | None = None


@dataclass(frozen=True)
class ScheduleDeletionParams(Params):
    cluster: str
    delay_seconds: int


@dataclass(frozen=True)
class WaitJobParams(Params):
    timeout_seconds: int
    job: str | None = None


@dataclass(frozen=True)
class JobParams(Params):
    job: str | None = None


@dataclass(frozen=True)
class ApplyObjectParams(Params):
    manifest: Mapping[str, Any]
    gate_serve: str | None = None


@dataclass(frozen=True)
class DeleteObjectParams(Params):
    api_version: str | None = None
    kind: str | None = None


@dataclass(frozen=True)
class SetCapacityParams(Params):
    cluster: str
    target_capacity: int
    serve_config: Mapping[str, Any] | None = None
    serve_config_hash: str | None = None
    schema = {"properties": {"targetCapacity": PERCENT}}


@dataclass(frozen=True)
class ShiftTrafficParams(Params):
    route: str
    manifest: Mapping[str, Any]
    cluster: str
    percent: int
    backends: list[Any]
    from_: str | None = field(default=None, metadata={"json": "from"})
    step: int | None = None
    steps: int | None = None
    schema = {"properties": {
        "percent": PERCENT,
        "backends": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
            "type": "object", "required": ["name", "weight"],
            "properties": {"name": {"type": "string", "minLength": 1}, "weight": PERCENT}}},
        "step": POSITIVE, "steps": POSITIVE}}


@dataclass(frozen=True)
class WaitIntervalParams(Params):
    cluster: str
    seconds: int
    percent: int
    schema = {"properties": {"seconds": POSITIVE, "percent": PERCENT}}


@dataclass(frozen=True)
class RunAnalysisParams(Params):
    cluster: str
    previous: str
    percent: int
    window_seconds: int
    checks: list[Any]
    failure_limit: int
    on_failure: Mapping[str, Any]
    step: int | None = None
    steps: int | None = None
    backend: Mapping[str, Any] | None = None  # the new cluster's Service, as metrics name it
    metrics: Mapping[str, Any] | None = None  # url, provider, requests, durations
    schema = {"properties": {
        "percent": PERCENT, "windowSeconds": POSITIVE, "failureLimit": POSITIVE,
        "checks": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "type"], "properties": {
                "name": {"type": "string"},
                "type": {"enum": ["serve-health", "success-rate", "latency", "webhook"]}}}},
        "onFailure": {"type": "object", "required": ["trafficTo", "keepFailedCluster"]},
        "gate": {"enum": ["before-switch", "after-switch"], "description": (
            "a blue-green upgrade's gate: before the Services switch to the new cluster, or "
            "after it (a failure switches them back)")},
        "probe": {"type": "object", "required": ["path", "requests", "port"], "description": (
            "blue-green: requests gitray sends to the new cluster's serve Service over the "
            "window")}}}


@dataclass(frozen=True)
class PauseParams(Params):
    cluster: str
    percent: int
    seconds: int | None = None
    until_promoted: bool | None = None
    promote: str | None = None
    schema = {"oneOf": [
        {"required": ["seconds"], "properties": {"seconds": POSITIVE}},
        {"required": ["untilPromoted"], "properties": {"untilPromoted": {"const": True}}}]}


@dataclass(frozen=True)
class AwaitApprovalParams(Params):
    cluster: str  # the new cluster the switch would go to
    previous: str  # the cluster serving until then
    approve: str  # the command that approves
    schema = {"properties": {"approve": {"type": "string", "minLength": 1}}}


# ---- the registry -------------------------------------------------------------------------

Describe = Callable[[Mapping[str, JSON], str], str]  # (params, target) -> one line


@dataclass(frozen=True)
class StepKind:
    """Everything gitray knows about one step type (its handler aside: ``gitray.engine``)."""

    step_type: StepType
    params: type[Params]
    describe: Describe
    mutates: bool = True
    moves_traffic: bool = False  # traffic may have moved once it ran
    supersedable: bool = False  # a newer commit may end it (before any traffic moved)
    timeout_s: float | None = None  # its default timeout (None: it has none)
    min_timeout_s: float = 0.0  # its timeout is at least this long
    holds: bool = False  # its timeout (params ``seconds``) is how long it holds: ending is done
    target: tuple[str, str] | None = None  # what the target names, for its Kubernetes Event
    # its params' manifest is a whole object it creates or server-side applies (a plan's
    # server-side dry-run sends it: gitray.engine.dryrun)
    dry_run: bool = False


def _rows() -> dict[StepType, StepKind]:
    T = StepType
    rows = [
        StepKind(T.CREATE_CLUSTER, ManifestParams, lambda p, t: f"create RayCluster {t}",
                 target=CLUSTER, dry_run=True),
        StepKind(T.UPDATE_CLUSTER, UpdateClusterParams, lines.update_cluster, target=CLUSTER,
                 dry_run=True),
        StepKind(T.WAIT_CLUSTER_READY, WaitClusterParams,
                 lambda p, t: (f"wait for {t} to be ready (head pod ready, timeout "
                               f"{duration(p.get('timeoutSeconds'))})"),
                 mutates=False, supersedable=True, timeout_s=900.0),
        # kubelets report a head pod ready before its dashboard answers: deploy-serve retries
        # its PUT for the plan's Serve timeout, but at least 180 s
        StepKind(T.DEPLOY_SERVE, DeployServeParams, lines.deploy_serve, supersedable=True,
                 timeout_s=0.0, min_timeout_s=180.0, target=CLUSTER),
        StepKind(T.WAIT_SERVE_RUNNING, WaitServeParams,
                 lambda p, t: (f"wait for every Serve application on {t} to be RUNNING "
                               f"(timeout {duration(p.get('timeoutSeconds'))})"),
                 mutates=False, supersedable=True, timeout_s=600.0),
        StepKind(T.CREATE_SERVICE, CreateServiceParams,
                 lambda p, t: f"create Service {t} -> {p.get('cluster')}",
                 moves_traffic=True, target=SERVICE, dry_run=True),
        StepKind(T.SWITCH_SERVICE, SwitchServiceParams, lines.switch_service, moves_traffic=True,
                 target=SERVICE),
        StepKind(T.DELETE_SERVICE, DeleteServiceParams, lambda p, t: f"delete Service {t}",
                 target=SERVICE),
        StepKind(T.SCHEDULE_CLUSTER_DELETION, ScheduleDeletionParams,
                 lambda p, t: (f"schedule deletion of old cluster {t} in "
                               f"{duration(p.get('delaySeconds'))}"),
                 target=CLUSTER),
        StepKind(T.CANCEL_CLUSTER_DELETION, ClusterParams,
                 lambda p, t: f"cancel the scheduled deletion of {t}", target=CLUSTER),
        StepKind(T.DELETE_CLUSTER, ClusterParams, lambda p, t: f"delete RayCluster {t}",
                 target=CLUSTER),
        StepKind(T.CANCEL_UPGRADE, ClusterParams,
                 lambda p, t: f"cancel the upgrade: delete pending cluster {t}", target=CLUSTER),
        StepKind(T.CREATE_JOB, ManifestParams, lambda p, t: f"start RayJob run {t}", target=JOB,
                 dry_run=True),
        StepKind(T.WAIT_JOB, WaitJobParams,
                 lambda p, t: (f"wait for run {t} to finish (timeout "
                               f"{duration(p.get('timeoutSeconds'))})"),
                 mutates=False, timeout_s=3600.0),
        StepKind(T.DELETE_JOB, JobParams, lambda p, t: f"delete RayJob run {t}", target=JOB),
        StepKind(T.APPLY_OBJECT, ApplyObjectParams,
                 lambda p, t: f"apply {(p.get('manifest') or {}).get('kind', 'object')} {t}",
                 target=FROM_PARAMS, dry_run=True),
        StepKind(T.DELETE_OBJECT, DeleteObjectParams,
                 lambda p, t: f"delete {p.get('kind', 'object')} {t}", target=FROM_PARAMS),
        StepKind(T.SET_SERVE_CAPACITY, SetCapacityParams,
                 lambda p, t: f"set Serve target_capacity of {t} to {p.get('targetCapacity')} %"),
        StepKind(T.SHIFT_TRAFFIC, ShiftTrafficParams, lines.shift_traffic, moves_traffic=True),
        StepKind(T.WAIT_INTERVAL, WaitIntervalParams,
                 lambda p, t: (f"hold {p.get('percent')} % on {t} for "
                               f"{duration(p.get('seconds'))}"),
                 mutates=False, holds=True),
        StepKind(T.RUN_ANALYSIS, RunAnalysisParams, lines.run_analysis),
        StepKind(T.PAUSE, PauseParams, lines.pause, mutates=False, holds=True),
        # a newer commit ends a run held for approval (nothing moved yet)
        StepKind(T.AWAIT_APPROVAL, AwaitApprovalParams, lines.await_approval, mutates=False,
                 supersedable=True),
    ]
    return {row.step_type: row for row in rows}


STEP_KINDS: Mapping[StepType, StepKind] = _rows()


def describe_step(step: _Step) -> str:
    """One plain-English line for a step."""
    return STEP_KINDS[step.type].describe(step.params, step.target)


def params_of(step: _Step) -> Params:
    """``step``'s params, typed (``KeyError`` naming a required key that is missing)."""
    return STEP_KINDS[step.type].params.from_json(step.params)


def typed_params(step: _Step, cls: type[P]) -> P:
    """``step``'s params as ``cls``, its row's params type (a handler reads them so)."""
    params = params_of(step)
    if not isinstance(params, cls):
        raise TypeError(f"{step.type.value} has {type(params).__name__}, not {cls.__name__}")
    return params
