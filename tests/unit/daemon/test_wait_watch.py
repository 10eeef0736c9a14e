"""Which parked waits a watch event releases (pure), and which waits park at once."""

from __future__ import annotations

from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.daemon.waitwatch import released_by
from gitray.engine.executor import Waiting
from gitray.engine.fleet import Flight, Parked
from gitray.engine.parking import BRIEF, PARK_GRACE_S, PARKABLE, parks_now
from gitray.plans.plan import Step
from gitray.plans.steptypes import StepType

CLUSTERS = ("ray.io/v1", "RayCluster", "a")
JOBS = ("ray.io/v1", "RayJob", "a")


def parked(step_type: StepType, target: str, released: bool = False) -> Parked:
    return Parked(Flight("abc", "h", 0, 0.0), Waiting(Step("s", step_type, target), "", None),
                  0.0, None, released)


def obj(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "7"}, "status": status}


READY = [{"type": "HeadPodReady", "status": "True"}]
SVC, SVC2 = ObjectKey("RayService", "a", "svc"), ObjectKey("RayService", "a", "svc2")
OTHER_NS = ObjectKey("RayService", "b", "svc")
JOB = ObjectKey("RayJob", "a", "train")


def test_a_cluster_becoming_ready_releases_the_waits_on_it_only() -> None:
    parked_now = {SVC: parked(StepType.WAIT_CLUSTER_READY, "svc-1"),
                  SVC2: parked(StepType.WAIT_CLUSTER_READY, "svc2-1"),
                  OTHER_NS: parked(StepType.WAIT_CLUSTER_READY, "svc-1")}
    assert released_by(parked_now, CLUSTERS, "MODIFIED", obj("svc-1", conditions=READY)) == [SVC]
    assert released_by(parked_now, CLUSTERS, "ADDED", obj("svc-1", state="ready")) == [SVC]
    assert released_by(parked_now, CLUSTERS, "MODIFIED", obj("svc-1", state="failed")) == [SVC]
    # not ready yet; another cluster; the watch of another kind
    assert released_by(parked_now, CLUSTERS, "MODIFIED", obj("svc-1")) == []
    assert released_by(parked_now, CLUSTERS, "MODIFIED", obj("svc-9", state="ready")) == []
    assert released_by(parked_now, JOBS, "MODIFIED", obj("svc-1", state="ready")) == []


def test_a_deleted_object_releases_its_waits_and_a_released_wait_is_left_alone() -> None:
    parked_now = {SVC: parked(StepType.WAIT_CLUSTER_READY, "svc-1"),
                  SVC2: parked(StepType.WAIT_CLUSTER_READY, "svc-1", released=True)}
    assert released_by(parked_now, CLUSTERS, "DELETED", obj("svc-1")) == [SVC]


def test_a_rayjob_wait_is_released_when_its_run_ends_or_it_is_deleted() -> None:
    parked_now = {JOB: parked(StepType.WAIT_JOB, "train-run")}
    running = obj("train-run", jobDeploymentStatus="Running", jobStatus="RUNNING")
    done = obj("train-run", jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    assert released_by(parked_now, JOBS, "MODIFIED", running) == []
    assert released_by(parked_now, JOBS, "MODIFIED", done) == [JOB]
    assert released_by(parked_now, JOBS, "DELETED", running) == [JOB]  # DeleteSelf


@pytest.mark.parametrize("step_type", [StepType.WAIT_SERVE_RUNNING, StepType.PAUSE,
                                       StepType.WAIT_INTERVAL])
def test_waits_no_watch_shows_are_never_released_by_one(step_type: StepType) -> None:
    parked_now = {SVC: parked(step_type, "svc-1")}
    assert released_by(parked_now, CLUSTERS, "DELETED", obj("svc-1")) == []
    assert released_by(parked_now, CLUSTERS, "MODIFIED", obj("svc-1", state="ready")) == []


def test_brief_waits_park_only_after_their_grace_the_others_at_once() -> None:
    assert BRIEF <= PARKABLE
    for step_type in sorted(PARKABLE, key=str):
        assert parks_now(step_type, PARK_GRACE_S) is True
        assert parks_now(step_type, 10_000.0) is True
        # a step with no timeout keeps no start: a grace would begin again at each re-check
        assert parks_now(step_type, None) is True
        assert parks_now(step_type, 0.0) is (step_type not in BRIEF)
        assert parks_now(step_type, PARK_GRACE_S - 0.01) is (step_type not in BRIEF)
    assert {StepType.WAIT_SERVE_RUNNING, StepType.WAIT_CLUSTER_READY} == BRIEF
