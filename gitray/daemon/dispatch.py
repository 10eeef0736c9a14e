"""Starting the runs a pass of ``gitray sync`` chose, each on a worker. I/O (through the fleet).

A pass (``gitray.daemon.daemon``) plans a commit; here the workloads whose turn has come
(``gitray.engine.fleet.dispatchable``) get their runs: new ones for the pass's commit, and the
parked runs released by a re-check (``gitray.daemon.rechecks``), resumed at their wait step for
the commit they were started for (their statuses go to that commit). Waits park
(``gitray.engine.parking``): no run holds a worker while it waits.

A resumed run of an older commit is superseded, as SPEC §3 says for a RayService's wait before
traffic moved, when the pass's own commit wants another spec for it (``newer_than_run``) — by
a pass of the branch's newest commit only: a deletions pass plans the last commit a pass took
(read before it waited for the pass lock, it may be older than a run parked since), and must
not stop a newer commit's run as if Git had moved back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gitray.core.model import Kind, ObjectKey
from gitray.daemon.verdicts import VERDICT_TRIGGERS, Verdicts
from gitray.engine.apply import Desired
from gitray.engine.executor import Executor, SupersedeCheck, WorkloadOutcome
from gitray.engine.fleet import Fleet, Flight, dispatchable
from gitray.engine.record import Record, RunState
from gitray.git.source import WORKTREE
from gitray.plans.plan import Plan, WorkloadPlan
from gitray.plans.steptypes import StepType

__all__ = ["RESUMED", "Dispatcher", "newer_than_run", "run_trigger"]

log = logging.getLogger("gitray.sync")

PostStatus = Callable[[str, ObjectKey | None, str, str], None]
# (commit whose statuses the run posts, desired state, supersede check, shard of the
# workloads it runs) -> an executor
ExecutorFor = Callable[[str, Desired, SupersedeCheck, int], Executor]


def newer_than_run(plan: Plan, fallback: SupersedeCheck) -> SupersedeCheck:
    """``fallback``, and first: does ``plan``'s commit want another spec than the run's?
    (A run parked at an older commit, resumed by this pass.) Pure but for ``fallback``."""
    wanted = {w.key: w.desired_hash for w in plan.workloads if w.desired_hash}

    def check(key: ObjectKey, planned_for: str) -> str | None:
        hash_ = wanted.get(key)
        if hash_ and planned_for and hash_ != planned_for:
            return (f"Git moved on to {plan.revision[:7]}, which wants another spec for "
                    f"{key.kind} {key.namespace}/{key.name}")
        return fallback(key, planned_for)
    return check


# The trigger a run resumed from its record is reported under when the pass that resumes it
# gives no verdict (``drift``, ``deletions``): it ends in ``converged``, counted as no healing.
RESUMED = "resume"


def run_trigger(trigger: str, record: Record | None) -> str:
    """The trigger a run dispatched by a ``trigger`` pass is reported under (its notices,
    metrics and verdict). Pure.

    A run resumed from its ``record`` (a new leader; the Lease lost mid-run and taken back by
    the same process, whose next pass is a ``drift`` pass as the commit was attempted already)
    is the run of the record's commit, not drift the pass found: under a drift or deletions
    pass it is ``RESUMED`` and ends in ``converged``. One whose steps only delete old clusters
    (a deletions pass's run, resumed) stays housekeeping: ``deletions``. A verdict pass's
    trigger stands (the verdict of an older commit's resumed run depends on it)."""
    if record is None or trigger in VERDICT_TRIGGERS:
        return trigger
    if record.plan.steps and all(s.type is StepType.DELETE_CLUSTER for s in record.plan.steps):
        return "deletions"
    return RESUMED


def _commit_of(record: Record | None, sha: str) -> str:
    """The commit a run resumed from ``record`` reports to: the record's revision when it is
    one (not a working tree's), else the pass's ``sha``."""
    revision = record.revision if record is not None else ""
    return revision if revision and revision != WORKTREE else sha


class Dispatcher:
    def __init__(self, fleet: Fleet, verdicts: Verdicts, post_status: PostStatus,
                 executor_for: ExecutorFor,
                 shard_of: Callable[[ObjectKey], int] = lambda _key: 0) -> None:
        self.fleet = fleet
        self.shard_of = shard_of  # each shard's runs are fenced by its own Lease
        self.verdicts = verdicts
        self.post_status = post_status
        self.executor_for = executor_for
        self._resuming: set[ObjectKey] = set()  # the released runs this pass resumes

    def __call__(self, sha: str, trigger: str, desired: Desired, plan: Plan,
                 resume: dict[ObjectKey, Record], in_flight: dict[ObjectKey, Flight],
                 failed: list[ObjectKey], superseded: SupersedeCheck,
                 newest: bool = True) -> list[WorkloadPlan]:
        """Start the runs whose turn has come (``dispatchable``), each on a worker. Only a
        pass of the ``newest`` commit supersedes resumed runs of older ones."""
        released = self.fleet.released()
        # (one released after this pass read the records is left for the next pass)
        ready = [w for w in dispatchable(plan, in_flight, failed, resume)
                 if w.key not in released or w.key in self._resuming]
        waiting = [w for w in plan.workloads
                   if (w.steps or w.key in resume) and w.key not in in_flight and w not in ready]
        fresh = [w for w in ready if w.key not in released]
        # Each run reports to its own commit: a parked run to the one it parked at, a run
        # resumed from its record (a new leader, a Lease taken back) to the record's revision,
        # whatever commit this pass plans; its verdict is that commit's.
        commit = {w.key: released[w.key].sha if w.key in released
                  else _commit_of(resume.get(w.key), sha) for w in ready}
        if fresh:
            log.info("sync %s (%s): %s", sha[:7], trigger, ", ".join(
                f"{w.key} {len(resume[w.key].plan.steps) if w.key in resume else len(w.steps)}"
                " steps" for w in fresh))
        if trigger in VERDICT_TRIGGERS and (fresh or trigger == "commit") and not failed:
            changing = sum(1 for w in plan.workloads if w.steps or w.key in resume
                           or (w.key in in_flight and in_flight[w.key].sha == sha))
            self.post_status(sha, None, "pending", f"applying: {changing} workload(s) to change")
        if not ready:
            return []
        check = newer_than_run(plan, superseded) if newest else superseded
        executors: dict[tuple[str, int], Executor] = {}

        def run(wp: WorkloadPlan, at: str) -> Callable[[], WorkloadOutcome]:
            shard = self.shard_of(wp.key)
            if (at, shard) not in executors:
                executors[at, shard] = self.executor_for(at, desired, check, shard)
                executors[at, shard].unparked = frozenset(self._resuming)
            executor = executors[at, shard]
            return lambda: executor.run_workload(wp, plan.revision, resume.get(wp.key))

        for wp in ready:  # (a released parked run keeps its own flight's trigger)
            self.fleet.dispatch(wp, commit[wp.key], run_trigger(trigger, resume.get(wp.key)),
                                run(wp, commit[wp.key]))
        mine = [w.key for w in fresh if commit[w.key] == sha]
        if trigger in VERDICT_TRIGGERS and mine:
            self.verdicts.dispatched(sha, mine, left=bool(waiting))
        return ready

    def resume_released(self, plan: Plan, records: list[Record],
                        resume: dict[ObjectKey, Record], newest: bool = True) -> None:
        """Parked runs this pass resumes at their wait step, whatever their commit: those a
        re-check released, and (a pass of the ``newest`` commit) a RayService's wait the
        pass's commit wants another spec for (its run is superseded then). A parked run with
        no record left is forgotten."""
        wanted = {w.key: w.desired_hash for w in plan.workloads}
        if newest:
            self.fleet.rechecked([k for k, p in self.fleet.parked().items()
                                  if k.kind == Kind.RAY_SERVICE.value
                                  and wanted.get(k, p.flight.desired_hash)
                                  != p.flight.desired_hash], [])
        running = {r.key: r for r in records if r.state is RunState.RUNNING}
        released = self.fleet.released()
        gone = [k for k in released if k not in running or k not in wanted]
        if gone:
            log.warning("parked runs not resumed (their records or workloads are gone): %s",
                        ", ".join(str(k) for k in gone))
            self.fleet.forget(gone)
        self._resuming = {k for k in released if k not in gone}
        resume.update({k: running[k] for k in self._resuming})
