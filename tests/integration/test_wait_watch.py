"""The watches of parked waits (``gitray.daemon.waitwatch``) against the real kube-apiserver
and KubeRay operator, with no re-check round running (so only a watch can release a wait):

- a wait parked on a RayCluster that is starting on the real node is released once KubeRay
  reports it ready (the wait is released while the cluster is ready, not before);
- a wait that parks on a cluster a watch already saw ready (it became ready between its run's
  check and its parking) is released by the next ``follow`` without any new event;
- ``stop`` ends the watches.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gitray.core.model import API_VERSION_RAY, ObjectKey
from gitray.daemon.waitwatch import WaitWatches
from gitray.engine.actions import cluster_ready
from gitray.engine.executor import Outcome, Waiting, WorkloadOutcome
from gitray.engine.fleet import Fleet
from gitray.k8s.client import Kube
from gitray.k8s.settings import KubeSettings
from gitray.plans.plan import Action, Step, WorkloadPlan
from gitray.plans.steptypes import StepType
from testenv.helpers import TestEnv, raycluster_manifest, wait_for


@pytest.fixture
def kube(testenv: TestEnv) -> Iterator[Kube]:
    client = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig), request_timeout_s=10))
    yield client
    client.close()


def park(fleet: Fleet, key: ObjectKey, cluster: str) -> None:
    """Park a run of ``key`` at a wait for ``cluster`` to be ready (as a run's check that
    found it not ready does)."""
    step = Step("s", StepType.WAIT_CLUSTER_READY, cluster)
    outcome = WorkloadOutcome(key, Outcome.WAITING, "head pod not ready yet",
                              waiting=Waiting(step, "head pod not ready yet", 600.0))
    wp = WorkloadPlan(key, Action.UPDATE, 0, (step,), desired_hash="h")
    assert fleet.dispatch(wp, "abc", "commit", lambda: outcome)
    wait_for(lambda: key in fleet.parked() or None, timeout=10, interval=0.01,
             what=f"{key} parked")


def test_a_cluster_becoming_ready_releases_the_wait_parked_on_it(
        testenv: TestEnv, namespace: str, kube: Kube) -> None:
    name = "watched"
    kube.apply({**raycluster_manifest(name, workers=0, real=True),
                "metadata": {"name": name, "namespace": namespace}})
    fleet = Fleet(2, lambda *_: None)
    released: list[bool] = []  # whether the cluster was ready when each release was asked for
    lock = threading.Lock()

    def on_release() -> None:
        ready = cluster_ready(kube.get(API_VERSION_RAY, "RayCluster", namespace, name))
        with lock:
            released.append(ready)

    watches = WaitWatches(kube, fleet, on_release)
    first = ObjectKey("RayService", namespace, "first")
    try:
        park(fleet, first, name)
        assert not cluster_ready(kube.get(API_VERSION_RAY, "RayCluster", namespace, name))
        watches.follow()
        assert watches.watching() == [(API_VERSION_RAY, "RayCluster", namespace)]
        wait_for(lambda: first in fleet.released() or None, timeout=300,
                 what="the wait released by the watch")
        # the watch's thread marks the run released and only then calls on_release (which
        # reads the RayCluster first): wait for its record too
        wait_for(lambda: released or None, timeout=60, what="the release callback")
        with lock:
            assert released == [True]

        # parks on the cluster the watch saw ready: no event comes, follow() releases it
        second = ObjectKey("RayService", namespace, "second")
        park(fleet, second, name)
        assert second not in fleet.released()
        watches.follow()
        assert second in fleet.released()
        with lock:
            assert released == [True, True]
    finally:
        watches.stop()
        fleet.shutdown()
    assert watches.watching() == []
