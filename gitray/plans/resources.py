"""What a plan asks of the cluster: pod requests per workload, added and at peak. Pure, no I/O.

A Ray cluster's pods come from its pod templates: one head pod (plus KubeRay's autoscaler
sidecar, 500m CPU / 512Mi unless ``autoscalerOptions.resources`` says otherwise, when in-tree
autoscaling is on) and, per worker group, ``replicas`` pods (clamped to ``minReplicas`` ..
``maxReplicas``, times ``numOfHosts``; none while ``suspend: true``). With autoscaling on, a
group runs anything from ``minReplicas`` to ``maxReplicas``: every figure is then a range
``low..high`` (low: the minimum replicas, what must fit for the cluster to start).

A pod's request for a resource is the Kubernetes rule: the larger of the sum over its
containers (and sidecars: init containers with ``restartPolicy: Always``) and each plain init
container's (plus the sidecars started before it); a container without a request takes its
limit (the API server defaults it so). Every resource counts: ``cpu``, ``memory``,
``nvidia.com/gpu`` or any other extended resource.

Per workload, :func:`workload_resources` replays the plan's steps over the clusters the workload
has live: a created cluster (``create-cluster``, the job cluster of ``create-job``) adds its
pods, an in-place update (``update-cluster``) swaps old for new (KubeRay never rolls pods: the peak
is the larger of the two, per resource),
``delete-cluster`` frees a cluster at once, ``schedule-cluster-deletion`` only after the plan
(the old cluster keeps running through the deletion delay). The result: what the change adds
while old and new overlap (``peak - before``), what it adds for good (``after - before``) and
the peak in the workload. Job runs gitray deletes free nothing here (their clusters are usually
gone with the run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gitray.core.model import JSON, Kind, LiveObject
from gitray.plans.plan import Step
from gitray.plans.quantities import Amounts, Range, ResourceChange, parse_quantity
from gitray.plans.steptypes import StepType

__all__ = [
    "AUTOSCALER_DEFAULT",
    "PodGroup",
    "cluster_pods",
    "pod_requests",
    "totals",
    "workload_resources",
]

# KubeRay's autoscaler sidecar (BuildAutoscalerContainer): requests = limits = 500m / 512Mi
AUTOSCALER_DEFAULT: Mapping[str, str] = {"cpu": "500m", "memory": "512Mi"}
# KubeRay's maxReplicas default (the CRD's): unbounded in practice
MAX_REPLICAS_DEFAULT = 2147483647


def _container_requests(container: Mapping[str, Any]) -> Amounts:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    out: Amounts = {}
    for name in {*limits, *requests}:  # a request left out defaults to the limit
        raw = requests.get(name, limits.get(name))
        try:
            out[str(name)] = parse_quantity(raw)
        except ValueError:
            continue  # the API server rejects it; validation reports it
    return out


def _add(a: Mapping[str, Fraction], b: Mapping[str, Fraction], times: int = 1) -> Amounts:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Fraction(0)) + v * times
    return out


def _max(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> Amounts:
    return {k: max(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in {*a, *b}}


def pod_requests(pod_spec: Mapping[str, Any],
                 extra: Iterable[Mapping[str, Any]] = ()) -> Amounts:
    """A pod's effective request per resource (the scheduler's rule; ``extra``: containers
    KubeRay adds)."""
    running: Amounts = {}
    for c in [*(pod_spec.get("containers") or []), *extra]:
        if isinstance(c, Mapping):
            running = _add(running, _container_requests(c))
    init_peak: Amounts = {}
    sidecars: Amounts = {}
    for c in pod_spec.get("initContainers") or []:
        if not isinstance(c, Mapping):
            continue
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            sidecars = _add(sidecars, _container_requests(c))
        else:
            init_peak = _max(init_peak, _add(sidecars, _container_requests(c)))
    return {k: v for k, v in _max(_add(running, sidecars), init_peak).items() if v}


@dataclass(frozen=True)
class PodGroup:
    """``low``..``high`` pods alike (the head: 1..1), each requesting ``per_pod``."""

    name: str
    per_pod: Mapping[str, Fraction] = field(compare=False, hash=False)
    low: int
    high: int
    pod_spec: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _int(value: JSON, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _template_spec(group: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = (group.get("template") or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def cluster_pods(spec: Mapping[str, Any]) -> tuple[PodGroup, ...]:
    """The pods a RayCluster spec runs, per group (the head first)."""
    auto = spec.get("enableInTreeAutoscaling") is True
    head = spec.get("headGroupSpec") or {}
    head_spec = _template_spec(head)
    extra: list[Mapping[str, Any]] = []
    if auto:
        options = spec.get("autoscalerOptions") or {}
        custom = options.get("resources") if isinstance(options, Mapping) else None
        extra.append({"resources": custom} if isinstance(custom, Mapping) else
                     {"resources": {"requests": dict(AUTOSCALER_DEFAULT)}})
    groups = [PodGroup("head", pod_requests(head_spec, extra), 1, 1, head_spec)]
    for group in spec.get("workerGroupSpecs") or []:
        if not isinstance(group, Mapping):
            continue
        low_bound = max(_int(group.get("minReplicas"), 0), 0)
        high_bound = max(_int(group.get("maxReplicas"), MAX_REPLICAS_DEFAULT), low_bound)
        hosts = max(_int(group.get("numOfHosts"), 1), 1)
        if group.get("suspend") is True:
            low = high = 0
        elif auto:
            low, high = low_bound, high_bound
        else:
            wanted = _int(group.get("replicas"), low_bound)
            low = high = min(max(wanted, low_bound), high_bound)
        pod_spec = _template_spec(group)
        groups.append(PodGroup(str(group.get("groupName", "workers")), pod_requests(pod_spec),
                               low * hosts, high * hosts, pod_spec))
    return tuple(groups)


def totals(groups: Iterable[PodGroup], *, high: bool = False) -> Amounts:
    """Sum of every pod's requests (``high``: at the groups' upper bounds), plus ``pods``."""
    out: Amounts = {}
    for g in groups:
        count = g.high if high else g.low
        out = _add(out, {**g.per_pod, "pods": Fraction(1)}, count)
    return {k: v for k, v in out.items() if v}


def _clusters_of(owned: Iterable[LiveObject]) -> dict[str, Mapping[str, Any]]:
    return {o.name: o.spec for o in owned if o.kind == Kind.RAY_CLUSTER.value}


def _step_spec(step: Step) -> Mapping[str, Any] | None:
    manifest = step.params.get("manifest")
    if not isinstance(manifest, Mapping):
        return None
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        return None
    if step.type is StepType.CREATE_JOB:
        cluster = spec.get("rayClusterSpec")
        return cluster if isinstance(cluster, Mapping) else None
    return spec


def _strategy(steps: Sequence[Step], had: bool) -> str:
    types = {s.type for s in steps}
    if StepType.SHIFT_TRAFFIC in types or StepType.SET_SERVE_CAPACITY in types:
        return "incremental"
    if StepType.CREATE_JOB in types:
        return "job"
    if StepType.CREATE_CLUSTER in types:
        return "blue-green" if had else "create"
    if StepType.UPDATE_CLUSTER in types:
        return "in place"
    return "delete"


def workload_resources(name: str, steps: Sequence[Step],
                       owned: Iterable[LiveObject]) -> ResourceChange | None:
    """What ``steps`` (one workload's plan) ask of the cluster, or None when no step creates,
    changes or deletes a Ray cluster."""
    live = _clusters_of(owned)
    cluster_steps = {StepType.CREATE_CLUSTER, StepType.UPDATE_CLUSTER, StepType.DELETE_CLUSTER,
                     StepType.SCHEDULE_CLUSTER_DELETION, StepType.CREATE_JOB}
    if not any(s.type in cluster_steps for s in steps):
        return None
    results = []
    for high in (False, True):
        def size(spec: Mapping[str, Any], high: bool = high) -> Amounts:
            return totals(cluster_pods(spec), high=high)
        running = {n: size(s) for n, s in live.items()}
        before = _sum(running.values())
        peak = dict(before)
        later: list[str] = []
        job = 0
        for step in steps:
            spec = _step_spec(step)
            if step.type is StepType.CREATE_CLUSTER and spec is not None:
                running[step.target] = size(spec)
            elif step.type is StepType.CREATE_JOB and spec is not None:
                job += 1
                running[f"job {job}"] = size(spec)
            elif step.type is StepType.UPDATE_CLUSTER and spec is not None:
                old = running.get(step.target, {})
                new = size(spec)
                # KubeRay never rolls pods: it adds or removes workers, or (Recreate) deletes
                # every pod before creating new ones; the peak is the larger of the two
                running[step.target] = _max(old, new)
                peak = _max(peak, _sum(running.values()))
                running[step.target] = new
            elif step.type is StepType.DELETE_CLUSTER:
                running.pop(step.target, None)
            elif step.type is StepType.SCHEDULE_CLUSTER_DELETION:
                later.append(step.target)
            peak = _max(peak, _sum(running.values()))
        for gone in later:
            running.pop(gone, None)
        after = _sum(running.values())
        results.append((before, peak, after))
    (b0, p0, a0), (b1, p1, a1) = results
    keys = sorted({*b0, *p0, *a0, *b1, *p1, *a1})

    def ranges(lo: Mapping[str, Fraction], hi: Mapping[str, Fraction]) -> dict[str, Range]:
        out = {k: Range(lo.get(k, Fraction(0)), hi.get(k, Fraction(0))) for k in keys}
        return {k: r for k, r in out.items() if r.low or r.high}

    return ResourceChange(
        strategy=_strategy(steps, bool(live)),
        while_both=ranges(_sub(p0, b0), _sub(p1, b1)),
        after=ranges(_sub(a0, b0), _sub(a1, b1)),
        peak=ranges(p0, p1),
        cluster=name,
    )


def _sum(items: Iterable[Mapping[str, Fraction]]) -> Amounts:
    out: Amounts = {}
    for item in items:
        out = _add(out, item)
    return out


def _sub(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> Amounts:
    return {k: a.get(k, Fraction(0)) - b.get(k, Fraction(0)) for k in {*a, *b}}
