"""Building a workload's ordered step list with stable ids. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gitray.model import ANN_WAVE, JSON, LiveObject
from gitray.plans.plan import Step, StepType

__all__ = ["StepList", "live_wave"]


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
