"""``gitray apply``'s notifications: the receivers its revision's gitray.yaml names hear the
same events as from ``gitray sync`` (upgrade started, traffic steps, failed analyses,
converged, failed, rolled back). Delivery runs in the background; before exiting, apply waits
at most ``FLUSH_S`` for it (a receiver that is down delays the exit by no more)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gitray.cli.console import ConsoleReporter
from gitray.core.config import Config
from gitray.engine.executor import Reporter, StepEvent, WorkloadOutcome
from gitray.engine.notices import outcome_notices, step_notices
from gitray.hosts.notify import Notifier

__all__ = ["FLUSH_S", "ApplyNotices"]

FLUSH_S = 10.0


class ApplyNotices:
    def __init__(self, config: Config, revision: str, notifier: Notifier | None = None) -> None:
        self.revision = revision
        self.notifier = notifier or Notifier()
        self.notifier.configure(config.notifications)

    def reporter(self, inner: Reporter) -> Reporter:
        def report(event: StepEvent) -> None:
            inner(event)
            for notice in step_notices(event, self.revision):
                self.notifier.notify(notice)
        return report

    def run(self, execute: Callable[[Reporter], list[WorkloadOutcome]]
            ) -> list[WorkloadOutcome]:
        """``execute`` with the console's reporter and this one's; the outcomes notified."""
        outcomes = execute(self.reporter(ConsoleReporter()))
        self.finish(outcomes)
        return outcomes

    def finish(self, outcomes: Iterable[WorkloadOutcome]) -> None:
        for notice in outcome_notices(self.revision, "commit", outcomes):
            self.notifier.notify(notice)
        self.notifier.flush(FLUSH_S)
