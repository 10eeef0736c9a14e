"""Durable run records against the real kube-apiserver, fenced by a real Lease.

The first test is pure (the JSON codec); every other one writes ConfigMaps through the API.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator

import pytest

from gitray.core.errors import ConflictError, LeaseLostError, TerminalError
from gitray.core.model import ObjectKey, SourceLocation
from gitray.engine.progress import ProgressStore, RecordReader
from gitray.engine.record import (
    MAX_MESSAGE_CHARS,
    Record,
    RunState,
    StepRecord,
    StepStart,
    StepStatus,
    record_from_json,
    record_name,
    record_to_json,
    utc_now,
)
from gitray.k8s.client import Kube
from gitray.k8s.election import LeaseSettings
from gitray.k8s.lease import Lease
from gitray.k8s.settings import KubeSettings
from gitray.plans.plan import Action, FieldChange, Step, WorkloadPlan
from gitray.plans.steptypes import StepType
from testenv.helpers import TestEnv

INSTANCE = "test"
STEPS = (StepType.CREATE_CLUSTER, StepType.WAIT_CLUSTER_READY, StepType.DEPLOY_SERVE)


def workload_plan(name: str = "svc", blob: str = "") -> WorkloadPlan:
    key = ObjectKey("RayService", "apps", name)
    steps = tuple(
        Step(id=f"{i + 1}-{t.value}", type=t, target=f"{name}-abcde",
             params={"manifest": {"kind": "RayCluster", "spec": {"image": "ray:2.60"}},
                     **({"blob": blob} if blob and i == 0 else {})},
             reason=f"step {i + 1}")
        for i, t in enumerate(STEPS))
    return WorkloadPlan(key=key, action=Action.REPLACE, wave=1, steps=steps,
                        source=SourceLocation("apps/svc.yaml", 3, 1), desired_hash="h" * 64,
                        notes=("a note",),
                        changes=(FieldChange("spec.image", "ray:2.59", "ray:2.60"),))


def result(record: Record, status: StepStatus = StepStatus.OK, message: str = "") -> StepRecord:
    step = record.plan.steps[record.cursor]
    return StepRecord(id=step.id, type=step.type.value, status=status, message=message,
                      started_at=utc_now(), finished_at=utc_now())


def test_record_json_round_trip_is_lossless() -> None:
    wp = workload_plan()
    record = Record(key=wp.key, revision="abc123", desired_hash=wp.desired_hash, plan=wp,
                    cursor=1, steps=(StepRecord("1-create-cluster", "create-cluster",
                                                StepStatus.OK, "created", "t0", "t1"),),
                    state=RunState.RUNNING, reason="", epoch=4, updated_at="t2")
    data = json.loads(json.dumps(record_to_json(record)))
    assert data["plan"]["steps"][0]["params"]["manifest"]["kind"] == "RayCluster"
    assert record_from_json(data) == record
    with pytest.raises(ValueError, match="formatVersion"):
        record_from_json({**data, "formatVersion": 99})


# ---- against the API server -----------------------------------------------------------------


@pytest.fixture
def connect(testenv: TestEnv) -> Iterator[Callable[[], Kube]]:
    made: list[Kube] = []

    def make() -> Kube:
        kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig), request_timeout_s=5))
        made.append(kube)
        return kube

    yield make
    for kube in made:
        kube.close()


@pytest.fixture
def leases(connect: Callable[[], Kube], namespace: str) -> Iterator[Callable[..., Lease]]:
    made: list[Lease] = []

    def make(identity: str, short: bool = False, **kwargs: Callable[[], float]) -> Lease:
        durations = {"lease_duration_s": 3, "renew_deadline_s": 2.0, "retry_period_s": 0.5} \
            if short else {}
        lease = Lease(connect(), LeaseSettings(namespace=namespace, identity=identity,
                                               **durations), **kwargs)  # type: ignore[arg-type]
        made.append(lease)
        return lease

    yield make
    for lease in made:
        lease.stop_renewing()


@pytest.fixture
def leader(leases: Callable[..., Lease]) -> Lease:
    lease = leases("leader")
    lease.acquire(timeout_s=5)
    lease.start_renewing()
    return lease


class PausedAfterCheck:
    """A real Lease as fence, but the process "pauses" right after its check passed: the
    newer leader acts during the pause (the window fencing alone cannot close)."""

    def __init__(self, lease: Lease, during_pause: Callable[[], None]) -> None:
        self.lease = lease
        self.during_pause: Callable[[], None] | None = during_pause

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    def ensure_held(self) -> None:
        self.lease.ensure_held()
        hook, self.during_pause = self.during_pause, None
        if hook is not None:
            hook()


def test_begin_advance_finish_round_trip(connect: Callable[[], Kube], leader: Lease,
                                         namespace: str) -> None:
    kube = connect()
    store = ProgressStore(kube, namespace, INSTANCE, leader)
    wp = workload_plan()
    assert store.load(wp.key) is None

    record = store.begin(wp, "rev1", leader.epoch)
    assert (record.cursor, record.state, record.epoch, record.steps) == (0, "running", 0, ())
    assert record.next_step == "1-create-cluster"
    assert store.load(wp.key) == record

    cm = kube.get("v1", "ConfigMap", namespace, record_name(wp.key))
    assert re.fullmatch(r"gitray-run-[0-9a-f]{12}", cm["metadata"]["name"])
    assert cm["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gitray",
                                        "gitray.io/instance": INSTANCE,
                                        "gitray.io/role": "progress"}
    assert cm["metadata"]["annotations"] == {"gitray.io/progress-for": "apps/RayService/svc"}
    stored = json.loads(cm["data"]["record.json"])
    assert (stored["revision"], stored["epoch"], stored["state"]) == ("rev1", 0, "running")
    assert stored["plan"]["desiredHash"] == wp.desired_hash

    record = store.advance(record, result(record))
    assert record.cursor == 1
    failed = store.advance(record, result(record, StepStatus.FAILED, "head pod not ready"))
    assert failed.cursor == 1  # a failed step keeps the cursor on itself
    retried = store.advance(failed, result(failed, StepStatus.OK, "ready"))
    assert retried.cursor == 2
    assert [(s.id, s.status, s.message) for s in retried.steps] == [
        ("1-create-cluster", "ok", ""), ("2-wait-cluster-ready", "ok", "ready")]
    with pytest.raises(ValueError, match="cursor is at '3-deploy-serve'"):
        store.advance(retried, StepRecord("1-create-cluster", "create-cluster", StepStatus.OK))
    done = store.finish(retried, RunState.FAILED, "Serve said no")
    assert done.resource_version != retried.resource_version != record.resource_version

    loaded = store.load(wp.key)
    assert loaded == done
    assert loaded is not None
    assert (loaded.state, loaded.reason, loaded.cursor, loaded.plan) == ("failed",
                                                                         "Serve said no", 2, wp)
    with pytest.raises(ValueError, match="final state"):
        store.finish(loaded, RunState.RUNNING)
    # a later run of the same workload starts afresh in the same ConfigMap
    again = store.begin(wp, "rev2", leader.epoch)
    assert (again.revision, again.cursor, again.steps, again.state) == ("rev2", 0, (), "running")


def test_a_steps_start_is_stored_before_it_runs_and_kept_when_resumed(
        connect: Callable[[], Kube], leader: Lease, namespace: str) -> None:
    store = ProgressStore(connect(), namespace, INSTANCE, leader)
    wp = workload_plan()
    record = store.begin(wp, "rev1", leader.epoch)
    record = store.advance(record, result(record))
    with pytest.raises(ValueError, match="cursor is at '2-wait-cluster-ready'"):
        store.start(record, StepStart("3-deploy-serve", utc_now(), leader.epoch))
    first = StepStart("2-wait-cluster-ready", "2026-11-30T09:00:00.000Z", leader.epoch)
    started = store.start(record, first)
    assert started.current == first and started.resource_version != record.resource_version
    loaded = store.load(wp.key)
    assert loaded == started and loaded is not None and loaded.current == first
    # resumed (here by the same epoch): the step keeps its first start; nothing is written
    resumed = store.resume(loaded, leader.epoch)
    again = store.start(resumed, StepStart("2-wait-cluster-ready", utc_now(), leader.epoch))
    assert again.current == first and again.resource_version == resumed.resource_version
    # the step's result ends it: no running step until the next one starts
    done = store.advance(again, result(again))
    assert (done.cursor, done.current) == (2, None)
    assert store.load(wp.key) == done


def test_two_writers_in_one_epoch_conflict(connect: Callable[[], Kube], leader: Lease,
                                           namespace: str) -> None:
    first = ProgressStore(connect(), namespace, INSTANCE, leader)
    second = ProgressStore(connect(), namespace, INSTANCE, leader)
    wp = workload_plan()
    mine = first.begin(wp, "rev1", leader.epoch)
    theirs = second.load(wp.key)
    assert theirs == mine
    written = first.advance(mine, result(mine, message="first"))
    with pytest.raises(ConflictError, match="changed by another writer") as info:
        second.advance(theirs, result(theirs, message="second"))
    assert "\n" not in str(info.value)
    assert second.load(wp.key) == written


def test_resuming_a_record_that_changed_since_it_was_read_is_a_conflict(
        connect: Callable[[], Kube], leader: Lease, namespace: str) -> None:
    store = ProgressStore(connect(), namespace, INSTANCE, leader)
    wp = workload_plan()
    record = store.begin(wp, "rev1", leader.epoch)
    loaded = store.load(wp.key)
    assert loaded is not None
    advanced = store.advance(record, result(record))  # e.g. the old leader's last step
    with pytest.raises(ConflictError, match="read it again"):
        store.resume(loaded, leader.epoch)
    assert store.load(wp.key) == advanced
    resumed = store.resume(advanced, leader.epoch)
    assert (resumed.cursor, resumed.steps) == (1, advanced.steps)
    with pytest.raises(ValueError, match="cannot resume a run that is succeeded"):
        store.resume(store.finish(resumed, RunState.SUCCEEDED), leader.epoch)


def test_a_writer_whose_lease_was_taken_is_refused(leases: Callable[..., Lease],
                                                   connect: Callable[[], Kube],
                                                   namespace: str) -> None:
    frozen = 1000.0  # a's clock never moves: only the remote check can stop it
    old = leases("old", short=True, clock=lambda: frozen)
    new = leases("new", short=True)
    old_store = ProgressStore(connect(), namespace, INSTANCE, old)
    new_store = ProgressStore(connect(), namespace, INSTANCE, new)
    wp = workload_plan()
    assert old.acquire(timeout_s=5) == 0
    stale = old_store.begin(wp, "rev1", old.epoch)

    assert new.acquire(timeout_s=10) == 1  # after old's lease lapses
    loaded = new_store.load(wp.key)
    assert loaded is not None
    resumed = new_store.resume(loaded, new.epoch)
    assert resumed.epoch == 1

    with pytest.raises(LeaseLostError, match="now held by new"):
        old_store.advance(stale, result(stale, message="old was here"))
    with pytest.raises(LeaseLostError):
        old_store.begin(wp, "rev0", 0)
    assert new_store.load(wp.key) == resumed


def take_over_during_pause(new: Lease, store: ProgressStore, wp: WorkloadPlan,
                           done: list[Record]) -> Callable[[], None]:
    def pause() -> None:
        new.acquire(timeout_s=10)
        loaded = store.load(wp.key)
        record = store.resume(loaded, new.epoch) if loaded else \
            store.begin(wp, "rev2", new.epoch)
        done.append(store.advance(record, result(record, message="new leader")))
    return pause


def test_an_old_epoch_writer_past_its_check_cannot_overwrite_the_newer_record(
        leases: Callable[..., Lease], connect: Callable[[], Kube], namespace: str) -> None:
    old, new = leases("old", short=True), leases("new", short=True)
    new_store = ProgressStore(connect(), namespace, INSTANCE, new)
    wp = workload_plan()
    assert old.acquire(timeout_s=5) == 0
    done: list[Record] = []
    fence = PausedAfterCheck(old, lambda: None)
    old_store = ProgressStore(connect(), namespace, INSTANCE, fence)
    stale = old_store.begin(wp, "rev1", old.epoch)
    fence.during_pause = take_over_during_pause(new, new_store, wp, done)

    started = time.monotonic()
    with pytest.raises(LeaseLostError,
                       match=r"a newer leader \(epoch 1\) owns this run record") as info:
        old_store.advance(stale, result(stale, message="old was here"))
    assert time.monotonic() - started >= 3  # the takeover really happened in the pause
    assert "\n" not in str(info.value)
    stored = new_store.load(wp.key)
    assert stored == done[0]
    assert stored is not None
    assert (stored.epoch, stored.steps[0].message) == (1, "new leader")


def test_an_old_epoch_writer_cannot_begin_over_a_newer_record(
        leases: Callable[..., Lease], connect: Callable[[], Kube], namespace: str) -> None:
    old, new = leases("old", short=True), leases("new", short=True)
    new_store = ProgressStore(connect(), namespace, INSTANCE, new)
    wp = workload_plan()
    assert old.acquire(timeout_s=5) == 0
    done: list[Record] = []
    fence = PausedAfterCheck(old, take_over_during_pause(new, new_store, wp, done))
    old_store = ProgressStore(connect(), namespace, INSTANCE, fence)
    with pytest.raises(LeaseLostError, match=r"a newer leader \(epoch 1\)"):
        old_store.begin(wp, "rev1", old.epoch)
    assert new_store.load(wp.key) == done[0]


def test_records_are_written_only_in_the_leases_current_epoch(
        connect: Callable[[], Kube], leader: Lease, namespace: str) -> None:
    store = ProgressStore(connect(), namespace, INSTANCE, leader)
    with pytest.raises(LeaseLostError, match="epoch 5 but this process holds the Lease in "
                                             "epoch 0"):
        store.begin(workload_plan(), "rev1", 5)
    assert store.load(workload_plan().key) is None


def test_list_reads_every_record_of_the_instance_in_one_request(
        connect: Callable[[], Kube], leader: Lease, namespace: str) -> None:
    kube = connect()
    store = ProgressStore(kube, namespace, INSTANCE, leader)
    other = ProgressStore(connect(), namespace, "other-instance", leader)
    for name in ("c", "a", "b"):
        store.begin(workload_plan(name), "rev1", leader.epoch)
    other.begin(workload_plan("z"), "rev1", leader.epoch)
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "unrelated", "namespace": namespace}, "data": {"a": "b"}})

    before = kube.requests
    kube.list("v1", "ConfigMap", namespace=namespace)
    one_list = kube.requests - before
    before = kube.requests
    records = store.list()
    assert kube.requests - before == one_list
    assert [r.key.name for r in records] == ["a", "b", "c"]
    assert [r.key.name for r in other.list()] == ["z"]


def test_a_reader_needs_no_lease_and_cannot_write(connect: Callable[[], Kube], leader: Lease,
                                                  namespace: str) -> None:
    """``gitray status``/``plan``/``promote`` read records with no Lease and no stand-in fence;
    the reader has no write methods at all."""
    store = ProgressStore(connect(), namespace, INSTANCE, leader)
    written = store.begin(workload_plan("r"), "rev1", leader.epoch)
    reader = RecordReader(connect(), namespace, INSTANCE)
    assert reader.load(written.key) == written
    assert [r.key.name for r in reader.list()] == ["r"]
    assert RecordReader(connect(), namespace).load(written.key) == written  # any instance's
    assert RecordReader(connect(), namespace, "other-instance").list() == []
    assert not any(hasattr(reader, m) for m in ("begin", "resume", "start", "advance",
                                                "count_failure", "finish"))


def test_a_record_over_the_configmap_limit_fails_clearly_and_writes_nothing(
        connect: Callable[[], Kube], leader: Lease, namespace: str) -> None:
    store = ProgressStore(connect(), namespace, INSTANCE, leader)
    huge = workload_plan("huge", blob="x" * (1024 * 1024))
    with pytest.raises(TerminalError, match=r"apps/RayService/huge: the run record would be "
                                            r"\d+ bytes, over the ConfigMap limit") as info:
        store.begin(huge, "rev1", leader.epoch)
    assert "\n" not in str(info.value)
    assert store.load(huge.key) is None
    # just under the bound is accepted by the API server: the bound is real, not arbitrary
    big = workload_plan("big", blob="x" * (1000 * 1024))
    assert store.load(store.begin(big, "rev1", leader.epoch).key) is not None


def test_long_step_messages_are_trimmed_keeping_head_and_tail(
        connect: Callable[[], Kube], leader: Lease, namespace: str) -> None:
    store = ProgressStore(connect(), namespace, INSTANCE, leader)
    record = store.begin(workload_plan(), "rev1", leader.epoch)
    message = "Traceback:" + "x" * 200_000 + "ImportError: no module named app"
    record = store.advance(record, result(record, StepStatus.FAILED, message))
    loaded = store.load(record.key)
    assert loaded is not None
    stored = loaded.steps[0].message
    assert len(stored) == MAX_MESSAGE_CHARS
    assert stored.startswith("Traceback:")
    assert stored.endswith("ImportError: no module named app")
    assert "chars cut" in stored


def test_an_unreadable_record_is_reported_not_overwritten(
        connect: Callable[[], Kube], leader: Lease, namespace: str) -> None:
    kube = connect()
    store = ProgressStore(kube, namespace, INSTANCE, leader)
    wp = workload_plan()
    store.begin(wp, "rev1", leader.epoch)
    kube.patch("v1", "ConfigMap", namespace, record_name(wp.key),
               {"data": {"record.json": "{not json"}})
    with pytest.raises(TerminalError, match=r"is unreadable .*delete it") as info:
        store.load(wp.key)
    assert "\n" not in str(info.value)
    with pytest.raises(TerminalError, match="is unreadable"):
        store.begin(wp, "rev2", leader.epoch)
    cm = kube.get("v1", "ConfigMap", namespace, record_name(wp.key))
    assert cm["data"]["record.json"] == "{not json"
