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

Adding a step type: a :class:`StepType` value, its params dataclass and row here, its handler
in the engine, and their tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from gitray.core.model import JSON
from gitray.plans.plan import Step, StepType

__all__ = [
    "CLUSTER",
    "FROM_PARAMS",
    "JOB",
    "SERVICE",
    "STEP_KINDS",
    "Params",
    "StepKind",
    "describe_step",
    "duration",
    "params_of",
    "typed_params",
]

# what a step's target names: (apiVersion, kind); FROM_PARAMS: the manifest or params say
CLUSTER = ("ray.io/v1", "RayCluster")
SERVICE = ("v1", "Service")
JOB = ("ray.io/v1", "RayJob")
FROM_PARAMS = ("", "")


def _key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class Params:
    """A step's parameters, typed. The JSON keys are the fields' names in camelCase (or a
    field's ``json`` metadata); keys a row does not name are kept in ``extra``, so that
    ``to_json(from_json(p)) == p``."""

    extra: Mapping[str, JSON] = field(default_factory=dict, kw_only=True)

    @classmethod
    def json_keys(cls) -> dict[str, str]:
        """field name -> JSON key, for the fields of the step type (``extra`` aside)."""
        return {f.name: f.metadata.get("json", _key(f.name))
                for f in dataclasses.fields(cls) if f.name != "extra"}

    @classmethod
    def required(cls) -> frozenset[str]:
        """The JSON keys every step of this type has."""
        keys = cls.json_keys()
        return frozenset(keys[f.name] for f in dataclasses.fields(cls)
                         if f.name != "extra" and f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Self:
        """``KeyError`` naming a required key that is missing."""
        keys = cls.json_keys()
        missing = sorted(cls.required() - set(data))
        if missing:
            raise KeyError(f"{cls.__name__} needs {', '.join(missing)}")
        known = {name: data[key] for name, key in keys.items() if key in data}
        extra = {k: v for k, v in data.items() if k not in set(keys.values())}
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        for name, key in self.json_keys().items():
            value = getattr(self, name)
            f = next(f for f in dataclasses.fields(self) if f.name == name)
            if value is None and f.default is None:
                continue  # an optional key that was absent stays absent
            out[key] = value
        out.update(self.extra)
        return out


P = TypeVar("P", bound="Params")


# ---- params, one dataclass per step type --------------------------------------------------
# Required fields first; optional ones default to None (absent from the JSON).


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


@dataclass(frozen=True)
class WaitIntervalParams(Params):
    cluster: str
    seconds: int
    percent: int


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


@dataclass(frozen=True)
class PauseParams(Params):
    cluster: str
    percent: int
    seconds: int | None = None
    until_promoted: bool | None = None
    promote: str | None = None


@dataclass(frozen=True)
class AwaitApprovalParams(Params):
    cluster: str  # the new cluster the switch would go to
    previous: str  # the cluster serving until then
    approve: str  # the command that approves


# ---- describing a step ----------------------------------------------------------------------


def duration(seconds: JSON) -> str:
    """``90`` -> ``90s``, ``120`` -> ``2m``, ``3600`` -> ``1h``; ``?`` when not a number."""
    if not isinstance(seconds, int):
        return "?"
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def _apps(params: Mapping[str, JSON]) -> str:
    apps = (params.get("serveConfig") or {}).get("applications") or []
    names = [str(a.get("name", "default")) for a in apps if isinstance(a, dict)]
    return f"{len(names)} application{'s' if len(names) != 1 else ''}: {', '.join(names)}"


def _update_cluster(p: Mapping[str, JSON], t: str) -> str:
    if p.get("recreatePods"):
        return (f"update RayCluster {t}: KubeRay recreates all its pods with the new "
                "template (upgradeStrategy Recreate)")
    if p.get("newPodsOnly"):
        return f"update RayCluster {t}: only pods created from now on get the new template"
    keep = " (keeping the autoscaler's replicas)" if p.get("preserveLiveReplicas") else ""
    return f"update RayCluster {t} in place{keep}"


def _deploy_serve(p: Mapping[str, JSON], t: str) -> str:
    if isinstance(p.get("targetCapacity"), int):
        return (f"deploy the Serve config to {t} at target_capacity "
                f"{p['targetCapacity']} % ({_apps(p)})")
    return f"deploy the Serve config to {t} ({_apps(p)})"


def _switch_service(p: Mapping[str, JSON], t: str) -> str:
    if p.get("from") == p.get("cluster"):
        return f"change which pods of {p.get('cluster')} Service {t} selects"
    return f"switch Service {t}: {p.get('from') or '(none)'} -> {p.get('cluster')}"


def _shift(p: Mapping[str, JSON], route: str) -> str:
    new, old, percent = p.get("cluster"), p.get("from"), p.get("percent")
    if new == old:
        return f"send all traffic to {new} (HTTPRoute {route})"
    step = f" step {p.get('step')}/{p.get('steps')}" if p.get("step") else ""
    rest = 100 - percent if isinstance(percent, int) else "?"
    return f"shift traffic{step}: {percent} % to {new}, {rest} % to {old} (HTTPRoute {route})"


def _check(check: Mapping[str, JSON]) -> str:
    match check.get("type"):
        case "success-rate":
            return f"success rate >= {check.get('min')} %"
        case "latency":
            return f"p{check.get('percentile')} latency <= {check.get('maxMs')} ms"
        case "webhook":
            return f"webhook {check.get('name')}"
    return "Serve health"


def _analysis(p: Mapping[str, JSON], cluster: str) -> str:
    checks = ", ".join(_check(c) for c in p.get("checks") or [] if isinstance(c, dict))
    limit = p.get("failureLimit")
    gate = p.get("gate")
    if gate is not None:  # a blue-green upgrade's gate
        then = (f"switch back to {p.get('previous')}" if gate == "after-switch"
                else "fail without switching")
        return (f"analyse {cluster} {str(gate).replace('-', ' the ')} over "
                f"{duration(p.get('windowSeconds'))}: {checks} ({then} after {limit} failed "
                f"analys{'i' if limit == 1 else 'e'}s)")
    return (f"analyse {cluster} at {p.get('percent')} % over {duration(p.get('windowSeconds'))}"
            f": {checks} (roll back after {limit} failed analys{'i' if limit == 1 else 'e'}s)")


def _approval(p: Mapping[str, JSON], t: str) -> str:
    return (f"hold before switching to {p.get('cluster')} until `{p.get('approve')}`"
            f" ({p.get('previous')} serves meanwhile)")


def _pause(p: Mapping[str, JSON], t: str) -> str:
    if p.get("untilPromoted"):
        return f"pause at {p.get('percent')} % until `{p.get('promote')}`"
    return f"pause at {p.get('percent')} % for {duration(p.get('seconds'))}"


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


def _rows() -> dict[StepType, StepKind]:
    T = StepType
    rows = [
        StepKind(T.CREATE_CLUSTER, ManifestParams, lambda p, t: f"create RayCluster {t}",
                 target=CLUSTER),
        StepKind(T.UPDATE_CLUSTER, UpdateClusterParams, _update_cluster, target=CLUSTER),
        StepKind(T.WAIT_CLUSTER_READY, WaitClusterParams,
                 lambda p, t: (f"wait for {t} to be ready (head pod ready, timeout "
                               f"{duration(p.get('timeoutSeconds'))})"),
                 mutates=False, supersedable=True, timeout_s=900.0),
        # kubelets report a head pod ready before its dashboard answers: deploy-serve retries
        # its PUT for the plan's Serve timeout, but at least 180 s
        StepKind(T.DEPLOY_SERVE, DeployServeParams, _deploy_serve, supersedable=True,
                 timeout_s=0.0, min_timeout_s=180.0, target=CLUSTER),
        StepKind(T.WAIT_SERVE_RUNNING, WaitServeParams,
                 lambda p, t: (f"wait for every Serve application on {t} to be RUNNING "
                               f"(timeout {duration(p.get('timeoutSeconds'))})"),
                 mutates=False, supersedable=True, timeout_s=600.0),
        StepKind(T.CREATE_SERVICE, CreateServiceParams,
                 lambda p, t: f"create Service {t} -> {p.get('cluster')}",
                 moves_traffic=True, target=SERVICE),
        StepKind(T.SWITCH_SERVICE, SwitchServiceParams, _switch_service, moves_traffic=True,
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
        StepKind(T.CREATE_JOB, ManifestParams, lambda p, t: f"start RayJob run {t}", target=JOB),
        StepKind(T.WAIT_JOB, WaitJobParams,
                 lambda p, t: (f"wait for run {t} to finish (timeout "
                               f"{duration(p.get('timeoutSeconds'))})"),
                 mutates=False, timeout_s=3600.0),
        StepKind(T.DELETE_JOB, JobParams, lambda p, t: f"delete RayJob run {t}", target=JOB),
        StepKind(T.APPLY_OBJECT, ApplyObjectParams,
                 lambda p, t: f"apply {(p.get('manifest') or {}).get('kind', 'object')} {t}",
                 target=FROM_PARAMS),
        StepKind(T.DELETE_OBJECT, DeleteObjectParams,
                 lambda p, t: f"delete {p.get('kind', 'object')} {t}", target=FROM_PARAMS),
        StepKind(T.SET_SERVE_CAPACITY, SetCapacityParams,
                 lambda p, t: f"set Serve target_capacity of {t} to {p.get('targetCapacity')} %"),
        StepKind(T.SHIFT_TRAFFIC, ShiftTrafficParams, _shift, moves_traffic=True),
        StepKind(T.WAIT_INTERVAL, WaitIntervalParams,
                 lambda p, t: (f"hold {p.get('percent')} % on {t} for "
                               f"{duration(p.get('seconds'))}"),
                 mutates=False, holds=True),
        StepKind(T.RUN_ANALYSIS, RunAnalysisParams, _analysis),
        StepKind(T.PAUSE, PauseParams, _pause, mutates=False, holds=True),
        # a newer commit ends a run held for approval (nothing moved yet)
        StepKind(T.AWAIT_APPROVAL, AwaitApprovalParams, _approval, mutates=False,
                 supersedable=True),
    ]
    return {row.step_type: row for row in rows}


STEP_KINDS: Mapping[StepType, StepKind] = _rows()


def describe_step(step: Step) -> str:
    """One plain-English line for a step."""
    return STEP_KINDS[step.type].describe(step.params, step.target)


def params_of(step: Step) -> Params:
    """``step``'s params, typed (``KeyError`` naming a required key that is missing)."""
    return STEP_KINDS[step.type].params.from_json(step.params)


def typed_params(step: Step, cls: type[P]) -> P:
    """``step``'s params as ``cls``, its row's params type (a handler reads them so)."""
    params = params_of(step)
    if not isinstance(params, cls):
        raise TypeError(f"{step.type.value} has {type(params).__name__}, not {cls.__name__}")
    return params
