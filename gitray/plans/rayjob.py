"""RayJob planning: a RayJob is a record of runs; a given spec runs once. Pure.

The run for a spec is the RayJob ``<job>-<hash of spec>``. A finished run is never started
again because of drift; a changed spec is a new run. Superseded finished runs beyond the
retention count are deleted, oldest first; a superseded run still going is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitray.core.config import Config
from gitray.core.model import Kind, LiveObject, ObjectKey, Workload
from gitray.plans.inputs import changed_inputs, inputs_annotation, used
from gitray.plans.manifests import job_manifest
from gitray.plans.plan import Action, WorkloadPlan
from gitray.plans.steps import StepList, removal_plan
from gitray.plans.steptypes import StepType

__all__ = ["TERMINAL_DEPLOYMENT_STATUSES", "job_finished", "plan_rayjob"]

# RayJob status.jobDeploymentStatus values after which KubeRay does nothing more.
TERMINAL_DEPLOYMENT_STATUSES = frozenset({"Complete", "Failed"})


def job_finished(job: LiveObject) -> bool:
    return job.status.get("jobDeploymentStatus") in TERMINAL_DEPLOYMENT_STATUSES


def _created(job: LiveObject) -> str:
    return str(job.metadata.get("creationTimestamp") or "")


def _why_new(latest: LiveObject, manifest: Mapping[str, Any]) -> str:
    """Why the spec's run is not the latest one: what its pods use changed, or its spec."""
    kind = Kind.RAY_JOB.value
    changed = changed_inputs(inputs_annotation(kind, latest.spec),
                             inputs_annotation(kind, manifest["spec"]))
    return f"{used(changed)} changed" if changed else "the spec changed"


def plan_rayjob(
    key: ObjectKey,
    workload: Workload | None,
    owned: tuple[LiveObject, ...],
    config: Config,
    remembered: Mapping[str, str],
) -> WorkloadPlan:
    """``remembered``: run name -> outcome of the runs gitray started for ``key`` (from its
    run record); a remembered run that is no longer live (KubeRay deleted it when it finished,
    ``deletionStrategy``) stays done."""
    runs = sorted((o for o in owned if o.kind == key.kind), key=lambda j: (_created(j), j.name))
    if workload is None:
        return removal_plan(key, runs, StepType.DELETE_JOB, wave_from=owned)
    steps = StepList()

    manifest = job_manifest(workload, config.instance)
    name = manifest["metadata"]["name"]
    current = next((r for r in runs if r.name == name), None)
    notes: list[str] = []
    action = Action.NOOP
    if current is None and name in remembered:
        notes.append(f"run {name} was started before and is gone (KubeRay deletes it when it "
                     f"finishes, by its deletionStrategy); recorded outcome: "
                     f"{remembered[name]}; it is not run again")
    elif current is None:
        why = _why_new(runs[-1], manifest) if runs else ""
        if why:
            notes.append(f"a new run because {why}")
        steps.add(StepType.CREATE_JOB, name, {"manifest": manifest},
                  f"start run {name} of {key.name}" + (f" ({why})" if why else ""))
        steps.add(StepType.WAIT_JOB, name,
                  {"job": name, "timeoutSeconds": config.rayjob.timeout_s},
                  "wait for the run to finish")
        action = Action.CREATE
    elif not job_finished(current):
        steps.add(StepType.WAIT_JOB, name,
                  {"job": name, "timeoutSeconds": config.rayjob.timeout_s},
                  f"run {name} is in progress: wait for it to finish")
        action = Action.UPDATE
    else:
        status = current.status.get("jobStatus") or current.status.get("jobDeploymentStatus")
        notes.append(f"run {name} finished: {status}; it is not run again")

    superseded = [r for r in runs if r.name != name]
    finished = [r for r in superseded if job_finished(r)]
    for run in superseded:
        if not job_finished(run):
            notes.append(f"earlier run {run.name} is still going; left alone")
    excess = len(finished) - config.rayjob.retention
    for run in finished[: max(excess, 0)]:
        steps.add(StepType.DELETE_JOB, run.name, {"job": run.name},
                  f"retention keeps {config.rayjob.retention} earlier run(s)")
        if action is Action.NOOP:
            action = Action.UPDATE
    return WorkloadPlan(key, action, workload.wave, steps.build(), workload.source,
                        manifest["metadata"]["annotations"]["gitray.io/spec-hash"], tuple(notes))
