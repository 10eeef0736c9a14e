"""Faults against real `gitray sync` processes (issue 6, items 1-3).

- Leader failover at every step boundary of a blue-green upgrade: two replicas share a Lease;
  the leader stops itself at a boundary (a failpoint, gitray.engine.failpoints: right after
  step k of 7 is recorded, or after its effect but before it is recorded) and is SIGKILLed
  there; the other replica takes over and resumes the run record, and is itself stopped and
  killed at the next boundary: one upgrade passes all 8 boundaries, the last leader
  converges. Across every run: one pending cluster per upgrade (every RayCluster ever ADDED
  is recorded by a watch), traffic never selects a cluster whose Serve apps are not all
  RUNNING (a background sampler reads the serve Service's selector and that cluster's real
  Serve status), and no step recorded as done is lost.
- Fencing: the leader is SIGSTOPped inside wait-serve-running for longer than the Lease; the
  other replica takes over and converges; after SIGCONT the old one writes nothing (object
  histories: gitray's managedFields entries, run-record and Lease versions, the git-notes ref),
  says it lost the Lease and reports gitray_leader 0.
- API server restart in the middle of wait-serve-running, in an environment of this module's
  own: gitray retries, resumes and converges with no duplicate objects.

Take-over times are printed (run with -s to see them) — never asserted.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.engine.failpoints import Point
from gitray.engine.record import Record, RunState
from testenv.helpers import (
    EnvUnavailable,
    TestEnv,
    drop_namespace,
    environment,
    make_namespace,
    wait_for,
)
from testenv.load import LoadGenerator, LoadResult
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import GREETER, example_rayservice
from tests.integration.chaos import (
    ClusterWatch,
    Replica,
    TrafficSampler,
    figures,
    holder_pid,
    isolated,
    lease_holder,
    restart_apiserver,
    start_replica,
)
from tests.integration.gitops import GitOpsRepo
from tests.integration.harness import (
    all_answered,
    load_record,
    ray_clusters,
    selected_cluster,
    wait_converged,
)

# Counts failed requests (0 allowed) while leaders are killed: run alone, not beside a lane.
pytestmark = pytest.mark.alone

SVC = "serve-demo"
UPGRADE_STEPS = ["create-cluster", "wait-cluster-ready", "deploy-serve", "wait-serve-running",
                 "switch-service", "switch-service", "schedule-cluster-deletion"]
# (k, step k, where): kill once step k is recorded, or once its effect happened but before
# it is recorded (the new leader must then redo step k idempotently)
BOUNDARIES = [(1, "create-cluster", Point.STEP_DONE), (1, "create-cluster", Point.STEP_RECORDED),
              (2, "wait-cluster-ready", Point.STEP_RECORDED),
              (3, "deploy-serve", Point.STEP_RECORDED),
              (4, "wait-serve-running", Point.STEP_RECORDED),
              (5, "switch-service-head", Point.STEP_DONE),
              (5, "switch-service-head", Point.STEP_RECORDED),
              (6, "switch-service-serve", Point.STEP_RECORDED)]
TAKEOVERS: list[float] = []
TRAFFIC: dict[str, LoadResult] = {}  # scenario -> real requests to the serve Service's ClusterIP


def rs(ns: str, revision: int = 0) -> str:
    """The examples RayService (greeter only); each `revision` is a different cluster spec (an
    environment variable of the head), so every upgrade is a blue-green one on real pods."""
    return dump(example_rayservice(ns, serve=serve_config(GREETER), revision=revision))


@dataclass
class Fleet:
    """Two (or more over time) `gitray sync` replicas on one namespace and bare remote."""

    env: TestEnv
    ns: str
    bare: Path
    work: GitOpsRepo
    tmp: Path
    replicas: list[Replica] = field(default_factory=list)
    version: int = 0

    @property
    def failpoints(self) -> Path:
        return self.tmp / "failpoints"

    def start(self) -> Replica:
        r = start_replica(self.env.kubeconfig, self.ns, self.bare, self.tmp,
                          f"r{len(self.replicas)}", failpoints=self.failpoints)
        self.replicas.append(r)
        return r

    def push(self, message: str, files: dict[str, str | None]) -> str:
        sha = self.work.commit(message, files)
        self.work.git("push", "-q", "origin", "main")
        return sha

    def upgrade(self, message: str) -> str:
        self.version += 1
        return self.push(message, {"svc.yaml": rs(self.ns, self.version)})

    def leader(self) -> tuple[Replica, str]:
        def find() -> tuple[Replica, str] | None:
            holder, _ = lease_holder(self.env, self.ns)
            pid = holder_pid(holder)
            for r in self.replicas:
                if r.pid == pid and r.alive() and r.metric("gitray_leader") == 1:
                    return r, holder
            return None
        return wait_for(find, timeout=60, interval=0.2, what="a live leader")

    def record(self) -> Record | None:
        return load_record(self.env.kubeconfig, self.ns, ObjectKey("RayService", self.ns, SVC))

    def converged(self, sha: str, timeout: float = 600) -> Record:
        return wait_converged(self.record, sha,
                              lambda svc: selected_cluster(self.env, self.ns, svc),
                              [f"{SVC}-serve-svc", f"{SVC}-head-svc"], self.logs, timeout)

    def not_failed(self, sha: str) -> None:
        rec = self.record()
        if rec is not None and rec.revision == sha and rec.state is RunState.FAILED:
            raise AssertionError(f"the run of {sha[:7]} failed: {rec.reason}\n{self.logs()}")

    def only_active_left(self, rec: Record) -> None:
        new = rec.plan.steps[0].target
        wait_for(lambda: ray_clusters(self.env, self.ns) == [new] or None, timeout=120,
                 what=f"old cluster deleted, only {new} left")
        # and its pods gone (real memory; and a head still answering on an IP the next pod
        # gets would be taken for the next cluster's)
        wait_for(lambda: all(p.metadata.labels.get("ray.io/cluster") == new
                             for p in self.env.core.list_namespaced_pod(self.ns).items) or None,
                 timeout=180, what="old cluster's pods gone")

    def logs(self) -> str:
        return "\n".join(f"--- {r.name} (pid {r.pid})\n{r.log.read_text()[-4000:]}"
                         for r in self.replicas)


@pytest.fixture(scope="module")
def fleet(testenv: TestEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("failover")
    ns = make_namespace(testenv)
    bare = tmp / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp / "work")
    work.git("remote", "add", "origin", str(bare))
    f = Fleet(testenv, ns, bare, work, tmp)
    try:
        first = f.push("first", {"gitray.yaml": isolated(gitray_config(
            "2s", status={"provider": "git-notes"}), ns),
            "svc.yaml": rs(ns)})
        f.start()
        f.start()
        with ClusterWatch(testenv, ns) as watch, \
                TrafficSampler(testenv, ns, f"{SVC}-serve-svc") as sampler:
            f.watch, f.sampler = watch, sampler  # type: ignore[attr-defined]
            rec = f.converged(first)
            f.only_active_left(rec)
            yield f
    finally:
        for r in f.replicas:
            r.terminate()
        drop_namespace(testenv, ns)


def check_traffic(f: Fleet) -> None:
    sampler: TrafficSampler = f.sampler  # type: ignore[attr-defined]
    bad = sampler.violations()
    print(f"traffic samples: {len(sampler.samples)} ({sampler.answered()} answered, "
          f"{sampler.unreachable()} dashboard unreachable), violations: {len(bad)}")
    assert sampler.answered() > 0, "the sampler never read a Serve status"
    assert not bad, f"traffic selected a cluster whose Serve apps were not all RUNNING: {bad[:5]}"


def load(f: Fleet) -> LoadGenerator:
    """Real requests (10/s, a new connection each, bounded) to the serve Service's ClusterIP.
    A request counts as failed when it is refused, reset, answered non-2xx or not answered
    within 10 s (slow answers on a loaded 2-core machine show in p99, not as losses)."""
    svc = f.env.core.read_namespaced_service(f"{SVC}-serve-svc", f.ns)
    return LoadGenerator(f"http://{svc.spec.cluster_ip}:8000/greet?name=Ada", rate=10,
                         count=9000, timeout=10).start()


def check_requests(name: str, result: LoadResult) -> None:
    TRAFFIC[name] = result
    print(f"{'scenario':<34} {'sent':>5} {'2xx':>5} {'failed':>6} {'p50 ms':>7} {'p99 ms':>7}")
    for label, r in TRAFFIC.items():
        print(f"{label:<34} {r.sent:>5} {r.ok:>5} {r.failed:>6} {r.percentile(50):>7.1f} "
              f"{r.percentile(99):>7.1f}  {dict(r.failures) or ''}")
    # when requests failed, when they were sent (UTC), to set beside the replicas' step lines
    failed_at = [time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d} {what}"
                 for t, what in result.timeline if what.startswith("!")]
    all_answered(name, result, f"; failed requests sent at {failed_at[:20]}")


def check_record_order(rec: Record) -> None:
    """Step order from the run record: all 7 done, switches only after Serve was RUNNING."""
    assert [s.type for s in rec.steps] == UPGRADE_STEPS, rec.steps
    assert all(s.status.value == "ok" for s in rec.steps), rec.steps
    running = next(s for s in rec.steps if s.type == "wait-serve-running")
    for s in rec.steps:
        if s.type == "switch-service":
            assert s.started_at >= running.finished_at, (s, running)


def stop_at(f: Fleet, leader: Replica, sha: str, point: Point, k: int) -> None:
    """Wait until ``leader`` stopped itself at ``point`` ``k`` (the failpoints file asks)."""
    def at_boundary() -> bool | None:
        if leader.stopped():
            return True
        if not leader.alive():
            raise AssertionError(f"leader exited on its own\n{f.logs()}")
        f.not_failed(sha)
        return None
    wait_for(at_boundary, timeout=300, interval=0.05, what=f"leader stopped at {point} {k}")


def test_leader_failover_at_every_step(fleet: Fleet) -> None:
    """One blue-green upgrade, its leader SIGKILLed at each of the 8 boundaries in turn: each
    new leader resumes the run at the recorded cursor and is itself killed at the next
    boundary; the last one converges. (Until session 10 this was 8 upgrades, one kill each:
    the per-boundary checks are the same, docs/testenv.md has the table.)"""
    f = fleet
    watch: ClusterWatch = f.watch  # type: ignore[attr-defined]
    leader, _ = f.leader()
    t_push = time.time()
    requests = load(f)
    snapshots: list[Record] = []
    point, k = BOUNDARIES[0][2], BOUNDARIES[0][0]
    f.failpoints.write_text(f"{point.value} {k}\n")
    try:
        sha = f.upgrade("upgrade, the leader killed at every step boundary in turn")
        for i, (k, after, point) in enumerate(BOUNDARIES):
            stop_at(f, leader, sha, point, k)
            snapshot = f.record()
            # the next boundary is armed before the stopped leader goes and before a standby
            # can take the Lease (>= 8 s): the next leader stops there
            if i + 1 < len(BOUNDARIES):
                nk, _, npoint = BOUNDARIES[i + 1]
                f.failpoints.write_text(f"{npoint.value} {nk}\n")
            else:
                f.failpoints.unlink(missing_ok=True)
            killed_at = leader.kill()
            f.start()  # a fresh standby replaces the killed replica (before any assertion)
            assert snapshot is not None and snapshot.revision == sha, snapshot
            snapshots.append(snapshot)
            done_before = [s for s in snapshot.steps if s.status.value == "ok"]
            expected_done = k if point is Point.STEP_RECORDED else k - 1
            assert len(done_before) == expected_done, (k, point, snapshot.steps)
            assert [s.type for s in snapshot.plan.steps] == UPGRADE_STEPS, snapshot.plan.steps

            def first_step_after_kill(
                    dead: Replica = leader,
                    since: float = killed_at) -> tuple[Replica, float, int] | None:
                for r in f.replicas:
                    if r is dead:
                        continue
                    lines = r.step_lines(since=since)
                    if lines:
                        return r, lines[0][0].time, lines[0][1]
                return None
            leader, t_first, resumed_at = wait_for(
                first_step_after_kill, timeout=120, interval=0.1,
                what=f"the new leader's first step after the kill at {point.value} {k}")
            takeover = t_first - killed_at
            TAKEOVERS.append(takeover)
            print(f"{point.value} {k} ({after}): take-over {takeover:.1f} s by {leader.name}, "
                  f"resumed at step {resumed_at}/7")
            # it resumed the killed leader's run at its cursor instead of starting over (at
            # step k again when k's effect happened unrecorded: idempotent, checked below)
            assert resumed_at == len(done_before) + 1, (resumed_at, snapshot.steps)
    finally:
        f.failpoints.unlink(missing_ok=True)

    rec = f.converged(sha)
    new = rec.plan.steps[0].target
    check_record_order(rec)
    for snapshot in snapshots:  # no step recorded as done was lost or redone by a successor
        for step in snapshot.steps:
            if step.status.value == "ok":
                kept = next(s for s in rec.steps if s.id == step.id)
                assert kept == step, (kept, step)
    epochs = [s.epoch for s in snapshots] + [rec.epoch]
    assert epochs == sorted(epochs) and rec.epoch > snapshots[0].epoch, epochs
    created = [(uid, name) for uid, name in watch.since(t_push)]
    assert [name for _, name in created] == [new], \
        f"expected exactly one pending cluster {new} for this upgrade, saw {created}"
    f.only_active_left(rec)
    check_requests("leader killed at every boundary", requests.stop())
    # first rollout + one per upgrade so far
    assert len(watch.uids_named(f"{SVC}-")) == f.version + 1
    check_traffic(f)
    print(f"take-over: {figures(TAKEOVERS)}")


def note_ref(bare: Path) -> str:
    return subprocess.run(["git", "--git-dir", str(bare), "rev-parse", "-q", "--verify",
                           "refs/notes/gitray"], capture_output=True, text=True,
                          check=False).stdout.strip()


def gitray_history(env: TestEnv, ns: str) -> dict[str, Any]:
    """What only gitray writes: its managedFields entries on RayClusters, Services and Pods
    (others, e.g. KubeRay's status, are left out), and the run records' versions."""
    out: dict[str, Any] = {}

    def mine(kind: str, items: list[dict[str, Any]]) -> None:
        for item in items:
            meta = item["metadata"]
            entries = [(m.get("manager"), m.get("operation"), m.get("time"),
                        str(m.get("fieldsV1"))) for m in meta.get("managedFields") or []
                       if str(m.get("manager", "")).startswith(("gitray", "python"))]
            out[f"{kind}/{meta['name']}"] = (meta["uid"], entries)

    api = env.api_client
    rcs = env.custom.list_namespaced_custom_object("ray.io", "v1", ns, "rayclusters")["items"]
    mine("RayCluster", rcs)
    for kind, fn in (("Service", env.core.list_namespaced_service),
                     ("Pod", env.core.list_namespaced_pod)):
        mine(kind, api.sanitize_for_serialization(fn(ns))["items"])
    for cm in env.core.list_namespaced_config_map(
            ns, label_selector="gitray.io/role=progress").items:
        out[f"ConfigMap/{cm.metadata.name}"] = cm.metadata.resource_version
    return out


def test_fencing_under_sigstop(fleet: Fleet) -> None:
    f = fleet
    old, old_identity = f.leader()
    _, epoch_before = lease_holder(f.env, f.ns)
    t_push = time.time()
    requests = load(f)
    sha = f.upgrade("upgrade, leader paused in wait-serve-running")

    def in_wait() -> bool | None:
        f.not_failed(sha)
        return any(idx == 4 and typ == "wait-serve-running" and not done
                   for _, idx, _, typ, done in old.step_lines(since=t_push)) or None
    wait_for(in_wait, timeout=300, interval=0.05, what="leader in wait-serve-running")
    old.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        rec = f.converged(sha)
        f.only_active_left(rec)
        holder, epoch = lease_holder(f.env, f.ns)
        assert holder != old_identity and epoch > epoch_before, (holder, epoch)
        check_record_order(rec)
        before = gitray_history(f.env, f.ns)
        notes_before = note_ref(f.bare)
        paused = time.monotonic() - stopped_at
        print(f"old leader paused for {paused:.1f} s (lease 8 s); new holder {holder}, "
              f"epoch {epoch_before} -> {epoch}")
        assert paused > 8
    finally:
        t_cont = time.time()
        old.signal(signal.SIGCONT)

    def stepped_down() -> bool | None:
        # the log's timestamps are cut to milliseconds; nothing logs while stopped
        said = [line.msg for line in old.lines() if line.time >= t_cont - 0.01
                and ("stepped down" in line.msg or "lost the Lease" in line.msg)]
        return (bool(said) and old.metric("gitray_leader") == 0) or None
    wait_for(stepped_down, timeout=60, interval=0.2, what="old leader steps down")
    # give the woken process time to try whatever it still had in flight: its Serve wait
    # returns (the cluster is RUNNING) and it tries to record the step
    time.sleep(8)
    after = gitray_history(f.env, f.ns)
    assert after == before, "an object gitray manages changed after the old leader woke: " \
        + str({k: (before.get(k), after.get(k)) for k in set(before) | set(after)
               if before.get(k) != after.get(k)})
    assert note_ref(f.bare) == notes_before, "a commit status was posted after SIGCONT"
    check_requests("leader SIGSTOPped (fenced)", requests.stop())
    assert lease_holder(f.env, f.ns) == (holder, epoch)
    assert old.alive() and old.metric("gitray_leader") == 0
    woke = [line.msg for line in old.lines() if line.time >= t_cont - 0.01]
    print("old leader after SIGCONT:\n  " + "\n  ".join(woke[:15]))
    # its Serve wait found the apps RUNNING and would have annotated the cluster (a write):
    # it must refuse (fenced) rather than complete the step
    finished = [line.msg for line, *_ in old.step_lines(since=t_cont - 0.01, done_only=True)]
    assert not finished, f"the old leader completed steps after SIGCONT: {finished}"
    check_traffic(f)
    print(f"take-over times over the failover runs: {figures(TAKEOVERS)}"
          + (f"; mean {statistics.mean(TAKEOVERS):.1f} s" if TAKEOVERS else ""))


# ---- API server restart: an environment of this module's own ------------------------------


@pytest.fixture(scope="module")
def own_env() -> Iterator[tuple[TestEnv, Path]]:
    try:
        # never a shared environment: this test restarts its API server
        with environment(None, "gitray-chaos-env-", keep_logs=False) as started:
            yield started
    except EnvUnavailable as exc:
        pytest.fail(f"a second test environment: {exc}")


def test_apiserver_restart_mid_wait(own_env: tuple[TestEnv, Path], tmp_path: Path) -> None:
    env, state_dir = own_env
    ns = make_namespace(env)
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))
    work.commit("first", {"gitray.yaml": isolated(gitray_config("2s"), ns),
                          "svc.yaml": rs(ns)})
    work.git("push", "-q", "origin", "main")
    sha = work.git("rev-parse", "HEAD")
    t0 = time.time()  # before the replica starts: it may reach the wait at once
    # kwok's pods have loopback IPs, which the API server will not proxy to: pod-ip here
    replica = start_replica(env.kubeconfig, ns, bare, tmp_path, "solo",
                            extra=("--dashboard", "pod-ip"))
    try:
        with ClusterWatch(env, ns) as watch:
            # wait-serve-running lasts seconds (Serve deploys the app); wait-cluster-ready is
            # over in milliseconds here (kwok marks the head pod ready at once)
            def waiting() -> bool | None:
                return any(idx == 4 and typ == "wait-serve-running" and not done
                           for _, idx, _, typ, done in replica.step_lines(since=t0)) or None
            wait_for(waiting, timeout=300, interval=0.05, what="wait-serve-running started")
            assert not [1 for _, idx, _, _, done in replica.step_lines(since=t0)
                        if idx == 4 and done], "the wait ended before the API server stopped"
            restarted_at = time.time()
            down, to_ready = restart_apiserver(state_dir, down_for_s=8)
            print(f"kube-apiserver down {down:.1f} s, ready {to_ready:.1f} s after restart")
            assert replica.alive(), replica.log.read_text()[-3000:]

            def converged() -> Record | None:
                rec = load_record(env.kubeconfig, ns, ObjectKey("RayService", ns, SVC))
                if rec is None or rec.state is not RunState.SUCCEEDED or rec.revision != sha:
                    return None
                return rec
            rec = wait_for(converged, timeout=300, interval=1, what="converged after restart")
            cluster = rec.plan.steps[0].target
            assert selected_cluster(env, ns, f"{SVC}-serve-svc") == cluster
            assert selected_cluster(env, ns, f"{SVC}-head-svc") == cluster
            assert [s.type for s in rec.steps][:4] == UPGRADE_STEPS[:4]
            assert all(s.status.value == "ok" for s in rec.steps)
            wait_done = next(s for s in rec.steps if s.type == "wait-serve-running")
            print(f"wait-serve-running {wait_done.started_at} -> {wait_done.finished_at}: "
                  f"{wait_done.message}")
            assert list(watch.uids_named().values()) == [cluster], watch.seen  # one cluster
            assert ray_clusters(env, ns) == [cluster]
            services = [s.metadata.name for s in env.core.list_namespaced_service(ns).items]
            for name in (f"{SVC}-head-svc", f"{SVC}-serve-svc"):
                assert services.count(name) == 1, services
            text = replica.log.read_text()
            # it saw the outage (not a no-op test) and survived it
            assert "Kubernetes API" in text or "retrying" in text or "Lease" in text, text[-3000:]
            problems = [line.msg for line in replica.lines()
                        if line.time >= restarted_at and line.level in {"error", "warning"}]
            print("daemon during the outage:\n  " + "\n  ".join(problems[:12]))
            assert problems, "the daemon logged nothing about the outage"
    finally:
        # shown with a failure (pytest prints a failed test's output): what the daemon did
        print("daemon's log, last lines:\n" + replica.log.read_text(errors="replace")[-4000:])
        replica.terminate()
        drop_namespace(env, ns)
