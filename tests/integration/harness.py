"""Helpers the integration tests share (one copy each): reading a workload's run record,
listing RayClusters, the cluster a Service selects, waiting for a RayService's run to converge,
and checking that every real request was answered."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gitray.core.model import ObjectKey
from gitray.engine.progress import RecordReader
from gitray.engine.record import Record, RunState
from gitray.k8s.client import Kube
from gitray.k8s.settings import KubeSettings
from gitray.plans.steptypes import StepType
from testenv.helpers import TestEnv, WaitTimeout, wait_for
from testenv.load import LoadResult

__all__ = ["all_answered", "load_record", "new_cluster", "ray_clusters", "selected_cluster",
           "wait_converged"]


def load_record(kubeconfig: str, lease_namespace: str, key: ObjectKey) -> Record | None:
    """``key``'s run record, as any reader sees it (no Lease)."""
    kube = Kube.connect(KubeSettings(kubeconfig=kubeconfig))
    try:
        return RecordReader(kube, lease_namespace).load(key)
    finally:
        kube.close()


def ray_clusters(env: TestEnv, ns: str) -> list[str]:
    """The RayClusters of ``ns`` not being deleted, by name."""
    items = env.custom.list_namespaced_custom_object("ray.io", "v1", ns, "rayclusters")["items"]
    return sorted(i["metadata"]["name"] for i in items
                  if not i["metadata"].get("deletionTimestamp"))


def selected_cluster(env: TestEnv, ns: str, service: str) -> str | None:
    """The RayCluster Service ``service`` selects (None: no such Service, or no cluster)."""
    try:
        svc = env.core.read_namespaced_service(service, ns)
    except Exception:
        return None
    selected: str | None = (svc.spec.selector or {}).get("ray.io/cluster")
    return selected


def new_cluster(rec: Record) -> str | None:
    """The cluster ``rec``'s run moves traffic to: the target of its create-cluster step, else of
    its first step unless that is a deletion (a later run of the same revision that only deletes
    the old cluster once its deadline passed replaces the upgrade's record)."""
    steps = rec.plan.steps
    created = [s.target for s in steps if s.type is StepType.CREATE_CLUSTER]
    if created:
        return created[0]
    return steps[0].target if steps and steps[0].type is not StepType.DELETE_CLUSTER else None


def wait_converged(read: Callable[[], Record | None], sha: str,
                   selects: Callable[[str], str | None], services: Sequence[str],
                   logs: Callable[[], str], timeout: float = 600, interval: float = 0.5,
                   new: str | None = None) -> Record:
    """The run record of ``sha`` once it succeeded and each of ``services`` selects the run's
    new cluster (``new`` when the caller knows it: the record may by then be the later run that
    deleted the old cluster); fails at once, with ``logs()``, when the run failed."""
    def done() -> Record | None:
        rec = read()
        if rec is None or rec.revision != sha:
            return None
        if rec.state is RunState.FAILED:
            raise AssertionError(f"the run failed: {rec.reason}\n{logs()}")
        if rec.state is not RunState.SUCCEEDED:
            return None
        target = new or new_cluster(rec)
        deleted = {s.target for s in rec.plan.steps if s.type is StepType.DELETE_CLUSTER}
        for service in services:
            selected = selects(service)
            if (target and selected != target) or (not target and selected in deleted):
                return None
        return rec
    try:
        return wait_for(done, timeout=timeout, interval=interval, what=f"{sha[:7]} converged")
    except WaitTimeout as exc:
        raise AssertionError(f"{exc}\nrecord: {read()}\n{logs()}") from None


def all_answered(name: str, result: LoadResult, detail: str = "",
                   body: str = "Hello, Ada!") -> None:
    """Every request of ``result`` was sent and answered with ``body``."""
    assert result.sent > 0 and result.failed == 0, f"{name}: {result.summary()}{detail}"
    assert set(result.bodies) == {body}, (name, result.bodies)
