"""Building a workload's ordered step list with stable ids. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gitray.core.model import ANN_WAVE, JSON, LiveObject, ObjectKey
from gitray.plans.plan import Action, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

__all__ = ["StepList", "delete_params", "live_wave", "removal_plan"]


class StepList:
    """Appends steps; ids are ``<position>-<type>``, stable for the same situation."""

    def __init__(self) -> None:
        self._steps: list[Step] = []

    def add(self, type_: StepType, target: str, params: Mapping[str, JSON], reason: str) -> None:
        step_id = f"{len(self._steps) + 1:02d}-{type_.value}"
        self._steps.append(Step(step_id, type_, target, dict(params), reason))

    def build(self) -> tuple[Step, ...]:
        return tuple(self._steps)

    def __bool__(self) -> bool:
        return bool(self._steps)


def live_wave(owned: Iterable[LiveObject]) -> int:
    """The wave a removed workload had (from its objects' annotation), 0 when unknown."""
    for obj in owned:
        text = obj.annotations.get(ANN_WAVE, "")
        if text.lstrip("-").isdigit():
            return int(text)
    return 0


def delete_params(step_type: StepType, obj: LiveObject) -> dict[str, JSON]:
    """What a deletion step needs to find ``obj`` again."""
    if step_type is StepType.DELETE_CLUSTER:
        return {"cluster": obj.name}
    if step_type is StepType.DELETE_JOB:
        return {"job": obj.name}
    if step_type is StepType.DELETE_SERVICE:
        return {"service": obj.name}
    return {"kind": obj.kind, "apiVersion": obj.body.get("apiVersion", "v1"), "name": obj.name}


def removal_plan(key: ObjectKey, owned: Iterable[LiveObject], step_type: StepType,
                 *, wave_from: Iterable[LiveObject] = ()) -> WorkloadPlan:
    """A workload removed from Git: delete each of ``owned`` in order (prune)."""
    objects = tuple(owned)
    steps = StepList()
    for obj in objects:
        steps.add(step_type, obj.name, delete_params(step_type, obj),
                  f"{key.name} was removed from Git")
    return WorkloadPlan(key, Action.DELETE, live_wave(tuple(wave_from) or objects),
                        steps.build())
