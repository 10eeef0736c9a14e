"""Taking a failed RayService upgrade back, for the executor (``gitray.engine.executor``).
I/O (the Kubernetes API, and the executor's own step runner).

An incremental upgrade that moved traffic is rolled back (all traffic to the old cluster, its
capacity restored); a blue-green upgrade whose after-switch gate failed is switched back (both
Services to the old cluster); one that failed before traffic moved has its new cluster removed
(or kept, marked failed). Both undos share one loop (``_undo``) and one result line
(``_undone``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gitray.core.config import Config
from gitray.core.errors import TerminalError, TransientError
from gitray.core.model import ANN_FAILED, API_VERSION_RAY, Kind
from gitray.engine.actions import Actions
from gitray.engine.fence import Fence
from gitray.engine.gates import keep_failed, own_service, switch_back_of
from gitray.engine.incremental.upgradecontrol import rollback_of
from gitray.plans.plan import Step, WorkloadPlan
from gitray.plans.steptypes import STEP_KINDS, StepType

__all__ = ["Undoing", "new_cluster", "traffic_moved"]


class Undoing:
    """The executor's clean-up after a failed step (mixed into ``Executor``)."""

    actions: Actions
    fence: Fence
    config: Config

    def _run_step(self, wp: WorkloadPlan, index: int, step: Step, budget: None) -> str:
        raise NotImplementedError  # (the executor's)

    def _clean_up_failure(self, wp: WorkloadPlan, failed_at: int) -> str:
        """A RayService upgrade failed: an incremental one that moved traffic is rolled back;
        one that failed before traffic moved has its new cluster removed (or marked)."""
        if wp.key.kind != Kind.RAY_SERVICE.value:
            return ""
        switched_back = self._switch_back(wp, failed_at)
        if switched_back is not None:
            return switched_back
        rolled_back = self._roll_back(wp, failed_at)
        if rolled_back is not None:
            return rolled_back
        if traffic_moved(wp, failed_at):
            return ""  # traffic already moved: leave everything for the next plan to settle
        cluster = new_cluster(wp)
        if cluster is None:
            return ""
        try:
            self.fence.ensure_held()
            if keep_failed(wp, self.config.rayservice.keep_failed_clusters):
                self.actions.kube.patch(API_VERSION_RAY, "RayCluster", wp.key.namespace,
                                        cluster, {"metadata": {"annotations": {
                                            ANN_FAILED: "upgrade failed; kept for debugging"}}})
                return f"kept failed cluster {cluster} for debugging"
            if (service := own_service(wp, cluster)) is not None:  # a gate's: it goes too
                self.actions.kube.delete("v1", "Service", wp.key.namespace, service)
            self.actions.kube.delete(API_VERSION_RAY, "RayCluster", wp.key.namespace, cluster)
            return f"deleted failed pending cluster {cluster}"
        except (TransientError, TerminalError) as e:
            return f"could not clean up {cluster}: {e}"

    def _roll_back(self, wp: WorkloadPlan, failed_at: int) -> str | None:
        """An incremental upgrade failed once traffic moved: take it back (None: no traffic
        had moved, or it was promoted already)."""
        rollback = rollback_of(wp, failed_at, self.config.rayservice.keep_failed_clusters)
        if rollback is None:
            return None
        problems, stuck = self._undo(wp, failed_at, rollback.steps, StepType.SHIFT_TRAFFIC)
        if stuck is not None:
            return (f"rollback incomplete: could not send all traffic back to "
                    f"{rollback.old} ({stuck[1]}); {rollback.new} is left in place")
        return (f"rolled back: all traffic to {rollback.old} at full Serve capacity, "
                + self._undone(wp, rollback.new, rollback.keep, problems))

    def _switch_back(self, wp: WorkloadPlan, failed_at: int) -> str | None:
        """A blue-green upgrade's after-switch gate failed: both Services back to the old
        cluster, the new one deleted (or kept); None when it was no such gate."""
        back = switch_back_of(wp, failed_at, self.config.rayservice.keep_failed_clusters)
        if back is None:
            return None
        problems, stuck = self._undo(wp, failed_at, back.steps, StepType.SWITCH_SERVICE)
        if stuck is not None:
            return (f"switch-back incomplete: could not point the {stuck[0].params['role']}"
                    f" Service at {back.old} ({stuck[1]}); {back.new} is left in place")
        return (f"switched back: head and serve Service to {back.old}, "
                + self._undone(wp, back.new, back.keep, problems))

    def _undo(self, wp: WorkloadPlan, failed_at: int, steps: Sequence[Step], critical: StepType
              ) -> tuple[list[str], tuple[Step, Exception] | None]:
        """Run an undo's steps: the problems of those that failed, and the first `critical`
        one that failed (the undo stops there: the new cluster must stay)."""
        problems: list[str] = []
        for step in steps:
            try:
                self._run_step(wp, failed_at, step, None)
            except (TerminalError, TransientError) as e:
                if step.type is critical:
                    return problems, (step, e)
                problems.append(f"{step.type.value} {step.target}: {e}")
        return problems, None

    def _undone(self, wp: WorkloadPlan, new: str, keep: bool, problems: list[str]) -> str:
        """The tail of an undo's line: the new cluster deleted or kept (marked), problems."""
        kept = self._mark_failed(wp, new) if keep else ""
        where = f"{new} kept for debugging" if keep else f"{new} deleted"
        return where + "".join(f"; {p}" for p in problems) + (f"; {kept}" if kept else "")

    def _mark_failed(self, wp: WorkloadPlan, cluster: str) -> str:
        """Annotate a kept failed cluster; "" or why it could not be."""
        try:
            self.fence.ensure_held()
            self.actions.kube.patch(API_VERSION_RAY, "RayCluster", wp.key.namespace, cluster,
                                    {"metadata": {"annotations": {
                                        ANN_FAILED: "upgrade failed; kept for debugging"}}})
        except (TransientError, TerminalError) as e:
            return f"could not mark {cluster} failed: {e}"
        return ""


def traffic_moved(wp: WorkloadPlan, index: int) -> bool:
    """Whether a step before ``index`` created or switched a Service (traffic may have moved)."""
    return any(STEP_KINDS[s.type].moves_traffic for s in wp.steps[:index])


def new_cluster(wp: WorkloadPlan) -> str | None:
    """The cluster a failed RayService rollout built or waited for: the one it creates, or
    the pending cluster it took over from an earlier run (a plan waits for a cluster to be
    ready only when building one: ``Ctx.build_new_cluster``). None when it builds none."""
    for wanted in (StepType.CREATE_CLUSTER, StepType.WAIT_CLUSTER_READY):
        targets = [s.target for s in wp.steps if s.type is wanted]
        if targets:
            return targets[0]
    return None
