"""How long a step may still run: its timeout, less what was spent on it before. Pure, no I/O.

A step with a timeout (the three waits, and deploy-serve's retries while the dashboard comes
up) is bounded as a whole, from when it first began — not from when this process picked it
up. Its start is persisted in the run record before it runs (``Record.current``), so a leader
that resumes it after a hand-over, a lost Lease or a restart waits only for what is left of
the original timeout, and fails it at once when none is left.

The holds of an incremental upgrade are timed the same way, but their time running out is
their success: ``wait-interval`` holds a weight ``seconds``, a timed ``pause`` ``seconds`` (one
until promoted has no timeout). A ``run-analysis`` is not timed here: a resumed analysis
measures a whole window afresh (the metrics scraped at the start of the interrupted one are
gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gitray.core.timefmt import parse_timestamp
from gitray.plans.plan import Step
from gitray.plans.steptypes import STEP_KINDS

__all__ = ["Budget", "seconds_since", "step_budget", "step_timeout"]

def step_timeout(step: Step) -> float | None:
    """The timeout of ``step`` in seconds; None for a step type that has none."""
    kind = STEP_KINDS[step.type]
    if kind.holds:
        seconds = step.params.get("seconds")
        return float(seconds) if isinstance(seconds, int | float) else None
    if kind.timeout_s is None:
        return None
    return max(float(step.params.get("timeoutSeconds", kind.timeout_s)), kind.min_timeout_s)


def seconds_since(started_at: str, now: datetime) -> float | None:
    """Seconds from the RFC 3339 time ``started_at`` to ``now``; never negative (replicas'
    clocks may differ a little); None when ``started_at`` is not a time."""
    started = parse_timestamp(started_at)
    if started is None:
        return None
    return max(0.0, (now - started).total_seconds())


@dataclass(frozen=True)
class Budget:
    """A step's timeout and the part of it already spent when this process took the step up.

    ``started_at``/``epoch`` say when, and under which Lease epoch, the step first began when
    it is resumed from a run record; empty/None for a step this process began itself."""

    timeout: float
    spent: float = 0.0
    started_at: str = ""
    epoch: int | None = None

    @property
    def resumed(self) -> bool:
        return bool(self.started_at)

    @property
    def left(self) -> float:
        return self.timeout - self.spent

    def describe(self) -> str:
        """For progress output: ``resumed, 12 s of 30 s left``."""
        return f"resumed, {max(self.left, 0.0):.0f} s of {self.timeout:.0f} s left"

    def expired(self, step: Step) -> str:
        """Why a resumed step whose timeout has already passed fails without running."""
        by = f" under Lease epoch {self.epoch}" if self.epoch is not None else ""
        return (f"not resumed: the {self.timeout:.0f} s timeout of {step.type.value} "
                f"{step.target} ran out {-self.left:.0f} s ago (the step started "
                f"{self.spent:.0f} s ago, at {self.started_at}{by}, and its run was "
                f"interrupted)")


def step_budget(step: Step, now: datetime, started_at: str = "",
                epoch: int | None = None) -> Budget | None:
    """The budget of ``step`` beginning at ``now`` — or, given the ``started_at`` (and
    ``epoch``) its run record kept for it, resumed at ``now``. None for a step with no
    timeout. An unreadable ``started_at`` counts as a fresh start, as before starts were
    persisted."""
    timeout = step_timeout(step)
    if timeout is None:
        return None
    spent = seconds_since(started_at, now) if started_at else None
    if spent is None:
        return Budget(timeout)
    return Budget(timeout, spent, started_at, epoch)
