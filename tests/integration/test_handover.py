"""Planned hand-over between two real `gitray sync` replicas (issue 15, item 4).

The leader is in the middle of a run — a RayService's first rollout waiting in
wait-cluster-ready (step 2 of 6) for a cluster that stays suspended, so no Ray head is needed
and the wait lasts as long as the test wants. It gets SIGTERM. Checked, all against the real
API server and the replicas' own logs:

- the leader ends its wait at once, releases the Lease (a watch on the Lease sees the holder
  go from the leader to nobody, then to the standby, in that order) and exits 0;
- the standby took the Lease because its watch saw it free — not on its retry tick, which is
  30 s here, far beyond the test's run;
- the standby resumed the SAME run (same revision, plan and desired spec; step 1's result kept
  as recorded, not redone; a higher epoch) at the recorded step: its first step line is
  step 2/6 wait-cluster-ready, and there is still exactly one RayCluster.

Take-over times are printed (run with -s), never asserted: bench/failover.py measures them.

Then a resumed wait keeps the deadline of its first start (the run record stores when a step
with a timeout began, before it runs):

- handed over 20 s into a 75 s wait-cluster-ready, the standby says "resumed, N s of 75 s
  left" (N <= 55) and the run fails about 75 s after the step first began — a timeout
  restarted at the take-over would end it 95 s or more after;
- a leader SIGKILLed in a 20 s wait, with no replica running until the 20 s have passed: the
  next one fails the step at once ("not resumed: the 20 s timeout ... ran out ...") instead of
  waiting 20 s more, and the pending cluster is removed as for any failed first rollout.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gitray.core.model import ObjectKey
from gitray.core.timefmt import parse_timestamp
from gitray.engine.record import Record, RunState
from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import GREETER, example_rayservice
from tests.integration import harness
from tests.integration.chaos import Replica, holder_pid, isolated, start_replica
from tests.integration.gitops import GitOpsRepo

SVC = "handover"
FIRST_ROLLOUT = ["create-cluster", "wait-cluster-ready", "deploy-serve", "wait-serve-running",
                 "create-service", "create-service"]
# the standby's own election ticks are this far apart: a take-over within the test's time can
# only come from its watch on the Lease
SLOW_STANDBY = ("--lease-duration", "60", "--renew-deadline", "40", "--retry-period", "30")


def load_record(env: TestEnv, ns: str) -> Record | None:
    return harness.load_record(env.kubeconfig, ns, ObjectKey("RayService", ns, SVC))


def suspended_service(ns: str) -> str:
    doc = example_rayservice(ns, serve=serve_config(GREETER), name=SVC)
    doc["spec"]["rayClusterConfig"]["suspend"] = True  # KubeRay makes no pods: never ready
    return dump(doc)


@contextmanager
def lease_history(env: TestEnv, ns: str) -> Iterator[list[tuple[str, int]]]:
    """Every (holderIdentity, leaseTransitions) the Lease takes, from a real watch."""
    from kubernetes import client, watch

    api = client.CoordinationV1Api(env.api_client)
    seen: list[tuple[str, int]] = []
    w = watch.Watch()
    started, stopped = threading.Event(), threading.Event()

    def run() -> None:
        version = api.read_namespaced_lease("gitray", ns).metadata.resource_version
        started.set()
        try:
            for event in w.stream(api.list_namespaced_lease, ns, resource_version=version,
                                  field_selector="metadata.name=gitray", timeout_seconds=120):
                spec = event["object"].spec
                seen.append((str(spec.holder_identity or ""), int(spec.lease_transitions or 0)))
        except Exception:
            if not stopped.is_set():  # w.stop() shuts the socket down: the read then fails
                raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield seen
    finally:
        stopped.set()
        w.stop()
        thread.join(10)


def test_sigterm_hands_over_and_standby_resumes_at_recorded_step(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))
    sha = work.commit("first rollout", {
        "gitray.yaml": isolated(gitray_config("10s", ready_timeout="30m"), ns),
        "svc.yaml": suspended_service(ns)})
    work.git("push", "-q", "origin", "main")

    leader = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "leader")
    standby = None
    try:
        def waiting() -> bool | None:
            if not leader.alive():
                raise AssertionError(f"the leader exited:\n{leader.logs()[-3000:]}")
            return any(k == 2 and typ == "wait-cluster-ready" and not done
                       for _, k, _, typ, done in leader.step_lines()) or None
        wait_for(waiting, timeout=120, interval=0.1, what="the leader in wait-cluster-ready")
        standby = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "standby",
                                extra=SLOW_STANDBY)
        # the standby's first election attempt (at its start) found the Lease held
        wait_for(lambda: any(line.msg.startswith("gitray sync started")
                             for line in standby.lines()) or None, timeout=30,
                 what="the standby started")

        before = load_record(testenv, ns)
        assert before is not None and before.revision == sha, before
        assert before.state is RunState.RUNNING
        assert [s.type for s in before.plan.steps] == FIRST_ROLLOUT, before.plan.steps
        assert before.cursor == 1 and [s.type for s in before.steps] == ["create-cluster"]

        with lease_history(testenv, ns) as history:
            sent = time.time()
            leader.proc.send_signal(signal.SIGTERM)
            assert leader.proc.wait(timeout=60) == 0, leader.logs()[-3000:]

            def resumed() -> tuple[float, int, str] | None:
                lines = standby.step_lines(since=sent)
                return (lines[0][0].time, lines[0][1], lines[0][3]) if lines else None
            t_step, k, typ = wait_for(resumed, timeout=25, interval=0.05,
                                      what="the standby's first step")
        print(f"SIGTERM -> standby's first step {t_step - sent:.2f} s; Lease history {history}")

        leader_id = next(str(line.raw["identity"]) for line in leader.lines()
                         if line.raw.get("identity"))
        standby_id = next(str(line.raw["identity"]) for line in standby.lines()
                          if line.raw.get("identity"))
        assert holder_pid(standby_id) == standby.pid
        holders = [h for h, _ in history]
        assert "" in holders and standby_id in holders, history
        released_at, taken_at = holders.index(""), holders.index(standby_id)
        assert released_at < taken_at and set(holders[:released_at]) <= {leader_id}, history

        leader_said = [line.msg for line in leader.lines()]
        assert any(m.startswith("sync of") and "interrupted" in m for m in leader_said), \
            leader_said[-10:]
        assert "released the Lease" in leader_said, leader_said[-10:]
        standby_said = [line.msg for line in standby.lines()]
        assert any(m.startswith("the Lease is free") for m in standby_said), standby_said
        assert any(m.startswith("became leader") for m in standby_said), standby_said

        # the same run, resumed at the recorded step
        assert (k, typ) == (2, "wait-cluster-ready"), (k, typ)
        after = load_record(testenv, ns)
        assert after is not None
        assert (after.revision, after.desired_hash, after.plan) == \
            (before.revision, before.desired_hash, before.plan)
        assert after.steps == before.steps  # step 1's result kept, not redone
        assert after.cursor == 1 and after.state is RunState.RUNNING
        assert after.epoch > before.epoch
        clusters = testenv.custom.list_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters")["items"]
        assert [c["metadata"]["name"] for c in clusters] == [before.plan.steps[0].target]
    finally:
        leader.terminate()
        if standby is not None:
            standby.terminate()


# ---- a resumed wait keeps the deadline of its first start ---------------------------------

RESUMED = re.compile(r"\(resumed, (\d+) s of (\d+) s left\)")


def push_first_rollout(ns: str, tmp_path: Path, timeout_s: int) -> Path:
    """The suspended RayService (never ready) with ``timeout_s`` as its cluster-ready timeout,
    pushed to a bare remote; returns the remote."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))
    work.commit("first rollout", {
        "gitray.yaml": isolated(gitray_config("10s", ready_timeout=f"{timeout_s}s"), ns),
        "svc.yaml": suspended_service(ns)})
    work.git("push", "-q", "origin", "main")
    return bare


def wait_started(env: TestEnv, ns: str, leader: Replica) -> tuple[Record, str, float]:
    """Once ``leader`` is in wait-cluster-ready: its run record, and when the step began as
    the record keeps it (the text and the wall time)."""
    def waiting() -> bool | None:
        if not leader.alive():
            raise AssertionError(f"the leader exited:\n{leader.logs()[-3000:]}")
        return any(k == 2 and typ == "wait-cluster-ready" and not done
                   for _, k, _, typ, done in leader.step_lines()) or None
    wait_for(waiting, timeout=120, interval=0.1, what="the leader in wait-cluster-ready")
    record = load_record(env, ns)
    assert record is not None and record.cursor == 1, record
    # stored before the step's first line was logged
    assert record.current is not None and record.current.id == record.plan.steps[1].id, record
    assert record.current.epoch == record.epoch
    began = parse_timestamp(record.current.started_at)
    assert began is not None, record.current
    return record, record.current.started_at, began.timestamp()


def failed_run(env: TestEnv, ns: str, timeout: float) -> Record:
    def failed() -> Record | None:
        record = load_record(env, ns)
        if record is not None and record.state is RunState.SUCCEEDED:
            raise AssertionError(f"the run succeeded: {record}")
        return record if record is not None and record.state is RunState.FAILED else None
    return wait_for(failed, timeout=timeout, interval=0.5, what="the run failed")


def test_a_wait_resumed_by_the_standby_keeps_the_deadline_of_its_first_start(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """Handed over 20+ s into a 75 s wait-cluster-ready, the standby waits only for what is
    left: the run fails about 75 s after the step first began. A timeout restarted at the
    take-over would fail it 95 s or more after."""
    ns, timeout_s, hand_over_s = namespace, 75, 20
    bare = push_first_rollout(ns, tmp_path, timeout_s)
    leader = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "leader")
    standby = None
    try:
        before, started_at, began = wait_started(testenv, ns, leader)
        standby = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "standby",
                                extra=SLOW_STANDBY)
        time.sleep(max(0.0, began + hand_over_s - time.time()))
        sent = time.time()
        assert sent - began < timeout_s - 20, "too slow to hand over well before the timeout"
        leader.proc.send_signal(signal.SIGTERM)
        assert leader.proc.wait(timeout=60) == 0, leader.logs()[-3000:]

        lines = wait_for(lambda: standby.step_lines(since=sent) or None, timeout=25,
                         interval=0.05, what="the standby's first step")
        first, k, _, typ, _ = lines[0]
        assert (k, typ) == (2, "wait-cluster-ready"), first.msg
        said = RESUMED.search(first.msg)
        assert said is not None, first.msg
        left, of = int(said.group(1)), int(said.group(2))
        assert of == timeout_s and 0 < left <= timeout_s - hand_over_s, first.msg

        after = failed_run(testenv, ns, timeout=timeout_s + 60)
        step = after.steps[-1]
        assert (step.id, step.status.value) == (before.plan.steps[1].id, "failed"), after.steps
        assert step.started_at == started_at
        assert after.epoch > before.epoch
        assert f"not ready after {timeout_s} s" in after.reason, after.reason
        ended = parse_timestamp(step.finished_at)
        assert ended is not None, step
        lasted = ended.timestamp() - began
        print(f"handed over {sent - began:.1f} s into the wait; the standby resumed with {left} "
              f"s of {of} s left; the step failed {lasted:.1f} s after it first began")
        assert timeout_s - 1 <= lasted < timeout_s + 15, lasted
    finally:
        leader.terminate()
        if standby is not None:
            standby.terminate()


def test_a_wait_whose_timeout_ran_out_with_no_leader_fails_at_once_when_resumed(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """The leader is killed in a 20 s wait-cluster-ready and no replica runs until the 20 s
    have passed: the next one fails the step at once, saying why, instead of waiting 20 s
    more; the pending cluster is removed as for any failed first rollout."""
    ns, timeout_s = namespace, 20
    bare = push_first_rollout(ns, tmp_path, timeout_s)
    leader = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "leader")
    later = None
    try:
        before, started_at, began = wait_started(testenv, ns, leader)
        leader.kill()
        time.sleep(max(0.0, began + timeout_s + 5 - time.time()))
        later = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "later")
        after = failed_run(testenv, ns, timeout=90)

        lines = later.step_lines()
        first, k, _, typ, _ = lines[0]
        assert (k, typ) == (2, "wait-cluster-ready"), first.msg
        assert f"(resumed, 0 s of {timeout_s} s left)" in first.msg, first.msg
        step = after.steps[-1]
        assert (step.id, step.status.value) == (before.plan.steps[1].id, "failed"), after.steps
        assert step.started_at == started_at
        assert (f"not resumed: the {timeout_s} s timeout of wait-cluster-ready "
                f"{before.plan.steps[1].target} ran out") in after.reason, after.reason
        assert f"at {step.started_at} under Lease epoch {before.epoch}" in after.reason
        ended = parse_timestamp(step.finished_at)
        assert ended is not None, step
        print(f"resumed {first.time - began:.1f} s after the step began; failed "
              f"{ended.timestamp() - first.time:.2f} s after the resumed step's first line")
        assert ended.timestamp() - first.time < timeout_s / 2  # no wait at all
        wait_for(lambda: not testenv.custom.list_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters")["items"] or None, timeout=60,
            what="the failed pending cluster removed")
    finally:
        leader.terminate()
        if later is not None:
            later.terminate()
