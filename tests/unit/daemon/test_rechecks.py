"""Re-checking parked waits (pure parts): which object settles a wait, which LISTs a round
needs, which waits a round releases; parking a wait; a parked run superseded by the pass."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.daemon.dispatch import newer_than_run
from gitray.daemon.rechecks import WATCHED, Rechecks, reads, round_keys, settled, to_release
from gitray.engine.executor import Outcome, Waiting, WorkloadOutcome
from gitray.engine.fleet import Fleet, Flight, Parked
from gitray.engine.parking import PARKABLE, parking, recall, remember, would_block
from gitray.engine.parking import Parked as ParkedWait
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import STEP_KINDS, StepType

JOB_API, CLUSTER_API = ("ray.io/v1", "RayJob"), ("ray.io/v1", "RayCluster")


def job(deployment: str | None, job_status: str | None = None) -> dict[str, Any]:
    status = {k: v for k, v in (("jobDeploymentStatus", deployment),
                                ("jobStatus", job_status)) if v}
    return {"metadata": {"name": "j"}, "status": status}


def cluster(state: str | None = None, head_ready: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state} if state else {}
    if head_ready:
        status["conditions"] = [{"type": "HeadPodReady", "status": "True"}]
    return {"metadata": {"name": "c"}, "status": status}


@pytest.mark.parametrize(("obj", "ended"), [
    (None, True),  # gone (KubeRay's DeleteSelf): its run says what that means
    (job(None), False), (job("Initializing"), False), (job("Running", "RUNNING"), False),
    (job("Suspended"), False), (job("Complete", "SUCCEEDED"), True),
    (job("Failed", "FAILED"), True), (job("Complete", "STOPPED"), True),
])
def test_a_rayjob_wait_settles_when_its_run_ends_or_it_is_gone(obj: Any, ended: bool) -> None:
    assert settled(StepType.WAIT_JOB, obj) is ended


@pytest.mark.parametrize(("obj", "ended"), [
    (None, True), (cluster(), False), (cluster("suspended"), False),
    (cluster("ready"), True), (cluster(head_ready=True), True), (cluster("failed"), True),
])
def test_a_cluster_wait_settles_when_ready_failed_or_gone(obj: Any, ended: bool) -> None:
    assert settled(StepType.WAIT_CLUSTER_READY, obj) is ended


def test_only_waits_are_parkable_and_the_watched_ones_are_parkable() -> None:
    assert all(not STEP_KINDS[t].mutates for t in PARKABLE)
    assert StepType.RUN_ANALYSIS not in PARKABLE  # a resumed analysis restarts its window
    assert set(WATCHED) <= PARKABLE


def key(ns: str, name: str, kind: str = "RayJob") -> ObjectKey:
    return ObjectKey(kind, ns, name)


def parked(step_type: StepType, target: str, *, due: float = 0.0,
           deadline: float | None = None) -> Parked:
    step = Step("s", step_type, target)
    return Parked(Flight("abc", "h", 0, 0.0), Waiting(step, "", None), due, deadline)


A1, A2, B1 = key("a", "j1"), key("a", "j2"), key("b", "j1")
C1 = key("a", "rc", "RayCluster")
S1 = key("a", "svc", "RayService")
P1 = key("b", "inc", "RayService")
PARKED = {A1: parked(StepType.WAIT_JOB, "j1-run"), A2: parked(StepType.WAIT_JOB, "j2-run"),
          B1: parked(StepType.WAIT_JOB, "j1-run", deadline=50.0),
          C1: parked(StepType.WAIT_CLUSTER_READY, "rc"),
          S1: parked(StepType.WAIT_SERVE_RUNNING, "svc-1"),
          P1: parked(StepType.PAUSE, "inc-2")}


def test_a_round_lists_each_kind_once_per_namespace_whatever_the_number_of_waits() -> None:
    assert reads(PARKED, list(PARKED)) == [(*CLUSTER_API, "a"), (*JOB_API, "a"),
                                          (*JOB_API, "b")]
    assert reads(PARKED, [A1, A2]) == [(*JOB_API, "a")]
    assert reads(PARKED, [S1, P1]) == []  # (their runs check them)
    many = {key("a", f"j{i}"): parked(StepType.WAIT_JOB, f"j{i}-run") for i in range(500)}
    assert reads(many, list(many)) == [(*JOB_API, "a")]


def test_a_round_releases_ended_unlisted_and_timed_out_waits_only() -> None:
    listed = {(*JOB_API, "a"): {"j1-run": job("Complete", "SUCCEEDED"),
                                "j2-run": job("Running", "RUNNING")},
              (*CLUSTER_API, "a"): {"rc": cluster("suspended")}}
    # the LIST of namespace b failed: B1 waits on, but for its timeout
    release, later = to_release(PARKED, list(PARKED), listed, now=10.0)
    assert release == sorted([A1, S1, P1]) and later == sorted([A2, B1, C1])
    release, later = to_release(PARKED, list(PARKED), listed, now=50.0)
    assert B1 in release and B1 not in later
    # a job gone from its LIST: released (its run tells what happened to it)
    release, _ = to_release(PARKED, [A2], {(*JOB_API, "a"): {}}, now=0.0)
    assert release == [A2]


def wplan(k: ObjectKey, h: str) -> WorkloadPlan:
    return WorkloadPlan(k, Action.UPDATE, 0, (), desired_hash=h)


def test_a_resumed_run_is_superseded_when_the_pass_wants_another_spec() -> None:
    asked: list[tuple[ObjectKey, str]] = []

    def fallback(k: ObjectKey, planned_for: str) -> str | None:
        asked.append((k, planned_for))
        return None

    check = newer_than_run(Plan("f00dcafe1234", "live", workloads=(wplan(S1, "new"),
                                                                   wplan(A1, ""))), fallback)
    why = check(S1, "old")
    assert why is not None and "f00dcaf" in why and "RayService a/svc" in why
    assert asked == []
    assert check(S1, "new") is None and check(A1, "x") is None and check(B1, "y") is None
    assert asked == [(S1, "new"), (A1, "x"), (B1, "y")]


def test_a_wait_that_would_block_parks_only_where_parking_is_on() -> None:
    would_block("not parking: nothing happens")
    with parking(True):
        with pytest.raises(ParkedWait) as e:
            would_block("run is Running, 3 s")
        assert e.value.detail == "run is Running, 3 s"
        with parking(False):  # (nested: restored after)
            would_block("fine")
        with pytest.raises(ParkedWait):
            would_block("again")
    would_block("off again")


def test_parking_is_per_thread() -> None:
    seen: list[BaseException | None] = []

    def other() -> None:
        try:
            would_block("another worker's wait")
            seen.append(None)
        except ParkedWait as e:
            seen.append(e)

    with parking(True):
        t = threading.Thread(target=other)
        t.start()
        t.join(30)
    assert seen == [None]


def test_a_round_checks_every_wait_its_lists_read_so_they_come_due_together() -> None:
    later = {A1: parked(StepType.WAIT_JOB, "j1-run", due=5.0),
             A2: parked(StepType.WAIT_JOB, "j2-run", due=50.0),
             B1: parked(StepType.WAIT_JOB, "j1-run", due=50.0),
             C1: parked(StepType.WAIT_CLUSTER_READY, "rc", due=50.0),
             S1: parked(StepType.WAIT_SERVE_RUNNING, "svc-1", due=50.0)}
    assert round_keys(later, 1.0) == ([], [])
    # A1 is due: its LIST (RayJobs in a) reads A2's job too; nothing else rides along
    assert round_keys(later, 5.0) == ([A1, A2], [(*JOB_API, "a")])
    keys, lists = round_keys(later, 50.0)
    assert keys == sorted(later) and len(lists) == 3


def test_what_a_parked_wait_saw_is_kept_until_it_is_let_go() -> None:
    assert recall("RayJob", "ns-x", "gone-run") == {}
    seen = {"metadata": {"name": "gone-run", "resourceVersion": "41"}}
    remember("RayJob", "ns-x", "gone-run", seen)
    kept = recall("RayJob", "ns-x", "gone-run")
    assert kept == seen and kept is not seen  # (a copy: the wait's own dict changes)
    assert recall("RayCluster", "ns-x", "gone-run") == {}
    remember("RayJob", "ns-x", "gone-run", None)
    assert recall("RayJob", "ns-x", "gone-run") == {}


# ---- the job: leading, not leading, shutting down ------------------------------------------


def fleet_with_parked(*keys: ObjectKey) -> Fleet:
    """A real fleet whose runs of ``keys`` are parked at a cluster wait (due at once)."""
    fleet = Fleet(1, lambda *_: None, monotonic=lambda: 0.0)
    for k in keys:
        step = Step("s", StepType.WAIT_CLUSTER_READY, "rc")
        outcome = WorkloadOutcome(k, Outcome.WAITING, "not ready",
                                  waiting=Waiting(step, "not ready", 600.0))
        assert fleet.dispatch(wplan(k, "h"), "abc", "commit", lambda o=outcome: o)
    for _ in range(3000):  # (each worker parks its run right after it returns)
        if len(fleet.parked()) == len(keys):
            break
        threading.Event().wait(0.01)
    assert set(fleet.parked()) == set(keys)
    return fleet


class NoApi:
    def list(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no LIST is made here")


def test_not_leading_forgets_the_parked_runs_and_asks_for_a_pass_to_resume_them() -> None:
    """A Lease lost for a moment (a loaded machine): the parked runs are forgotten, and a
    pass is asked for, which this replica makes once it leads again (its poll plans only as
    leader): that pass resumes them from their records. Without it, nothing else would start
    a pass of the same commit, and a parked upgrade would never go on (nor its old cluster's
    deletion be scheduled)."""
    fleet = fleet_with_parked(C1, S1)
    passes: list[int] = []
    leading = [False]
    rechecks = Rechecks(NoApi(), fleet, lambda: passes.append(1), lambda: leading[0],
                        monotonic=lambda: 0.0)
    try:
        rechecks.job()
        assert fleet.parked() == {} and fleet.in_flight() == {}
        assert passes == [1]
        rechecks.job()  # nothing parked any more: no second pass asked for
        assert passes == [1]
    finally:
        fleet.shutdown()


def test_shutting_down_the_job_leaves_the_parked_runs_to_the_hand_over() -> None:
    fleet = fleet_with_parked(C1)
    passes: list[int] = []
    rechecks = Rechecks(NoApi(), fleet, lambda: passes.append(1), lambda: False,
                        monotonic=lambda: 10.0, stopping=lambda: True)
    try:
        rechecks.job()  # (neither forgotten unsaid nor checked)
        assert set(fleet.parked()) == {C1} and passes == []
        fleet.stop()
        assert fleet.hand_over() == [C1]
    finally:
        fleet.shutdown()
