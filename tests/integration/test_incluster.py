"""gitray's Deployment (deploy/) running for real on the real node (issue 17).

The module fixture builds gitray's image from the repository's Dockerfile (or reuses the one
cached for these inputs), imports it into the node's containerd, starts a real Gitea on the
node's address (pods clone from it over HTTP and get their commit statuses written there),
creates the Secret a user creates (repository URL with its token, status token) and applies
``deploy/overlays/testenv`` — the base as shipped, with that image — with ``kubectl apply -k``.
Two replicas then run ``gitray sync`` with in-cluster config, the projected ServiceAccount
token, RBAC as shipped and the default ``service`` dashboard mode (head Services by cluster DNS
name through CoreDNS). Nothing is granted beyond deploy/; the workloads go to ``default``, the
namespace the base binds.

Real requests (the bounded load generator) go to the serve Service's ClusterIP during the
hand-overs; every RayCluster ever created is recorded by a watch. Figures are printed (``-s``)
and collected in FIGURES for the closing note.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.core.timefmt import parse_timestamp
from gitray.engine.record import Record, RunState
from gitray.engine.shards import shard_label, shard_lease_name, shard_of
from testenv import gitray_image as gi
from testenv import node
from testenv.gitea.build import build_any, static_dir
from testenv.gitea.server import ADMIN, Gitea
from testenv.helpers import TestEnv, drop_namespace, make_namespace, wait_for
from testenv.load import LoadGenerator, LoadResult
from testenv.manifests import dump, serve_config
from testenv.rayservices import CALC, GREETER, real_node_rayservice
from tests.integration.chaos import ClusterWatch, lease_holder
from tests.integration.gitops import GitOpsRepo
from tests.integration.harness import (
    all_answered,
    load_record,
    new_cluster,
    selected_cluster,
    wait_converged,
)
from tests.integration.test_shard_leases import Cluster

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy" / "overlays" / "testenv"
NS = "gitray"  # gitray's own namespace, as deploy/ names it
WORKLOADS = "default"  # the namespace deploy/base binds gitray-workloads in
SVC = "serve-demo"
SELECTOR = "app.kubernetes.io/name=gitray,app.kubernetes.io/component=sync"
FIGURES: dict[str, Any] = {}


def service(ns: str, revision: int, serve: str | None = None) -> str:
    """The RayService sized for the real node; each revision another cluster spec, so a
    revision change is a blue-green upgrade."""
    return dump(real_node_rayservice(ns, serve=serve or serve_config(GREETER), workers=0,
                                     revision=revision))


@dataclass
class InCluster:
    env: TestEnv
    gitea: Gitea
    repo: str
    work: GitOpsRepo
    unbound: str
    figures: dict[str, Any] = field(default_factory=dict)
    watch: ClusterWatch | None = None
    first: Record | None = None
    kz: Path | None = None  # the kustomization applied (the testenv overlay and Gitea's URL)

    # ---- Git ---------------------------------------------------------------------------------

    def push(self, message: str, files: dict[str, str | None]) -> str:
        sha = self.work.commit(message, files)
        self.work.git("push", "-q", "origin", "main")
        return sha

    def statuses(self, sha: str) -> list[dict[str, Any]]:
        got = self.gitea.api("GET", f"/repos/{ADMIN}/{self.repo}/commits/{sha}/statuses")
        return list(got or [])

    # ---- the Deployment ------------------------------------------------------------------------

    def pods(self) -> list[Any]:
        return [p for p in self.env.core.list_namespaced_pod(NS, label_selector=SELECTOR).items
                if not p.metadata.deletion_timestamp]

    def ready_pods(self) -> list[str]:
        return sorted(p.metadata.name for p in self.pods()
                      if p.status.phase == "Running" and all(
                          c.ready for c in (p.status.container_statuses or [])))

    def leader(self) -> str:
        """The pod holding the Lease (a default identity is ``<hostname>_<pid>_<random>``)."""
        holder, _ = lease_holder(self.env, NS)
        return holder.rsplit("_", 2)[0] if holder.count("_") >= 2 else ""

    def logs(self, tail: int = 60) -> str:
        out = []
        for p in self.pods():
            try:
                text = self.env.kubectl("-n", NS, "logs", p.metadata.name, f"--tail={tail}")
            except Exception as exc:  # a pod that is starting or gone
                text = f"(no logs: {exc})"
            out.append(f"--- {p.metadata.name}\n{text}")
        return "\n".join(out)

    def record(self) -> Record | None:
        return load_record(self.env.kubeconfig, NS, ObjectKey("RayService", WORKLOADS, SVC))

    def in_flight(self, sha: str) -> Record:
        """The run record of ``sha`` once a step of it is done and it is still running."""
        def running() -> Record | None:
            rec = self.record()
            if rec is None or rec.revision != sha:
                return None
            assert rec.state is not RunState.FAILED, (rec.reason, self.logs())
            done = [s for s in rec.steps if s.status.value == "ok"]
            return rec if done and rec.state is RunState.RUNNING else None
        return wait_for(running, timeout=300, interval=0.2, what="the upgrade in flight")

    def selected(self, svc: str) -> str | None:
        return selected_cluster(self.env, WORKLOADS, svc)

    def converged(self, sha: str, timeout: float = 600, new: str | None = None) -> Record:
        return wait_converged(self.record, sha, self.selected, [f"{SVC}-serve-svc"], self.logs,
                              timeout, interval=1, new=new)

    def status_for(self, sha: str, state: str, timeout: float = 120,
                   says: str = "") -> dict[str, Any]:
        """The first commit status on ``sha`` in ``state`` whose description holds ``says``."""
        def found() -> dict[str, Any] | None:
            for st in self.statuses(sha):
                if (st.get("status") or st.get("state")) == state \
                        and says in str(st.get("description")):
                    return st
            return None
        return wait_for(found, timeout=timeout, interval=1,
                        what=f"a {state} commit status on {sha[:7]}")

    def serve_url(self, path: str = "/greet?name=Ada") -> str:
        svc = self.env.core.read_namespaced_service(f"{SVC}-serve-svc", WORKLOADS)
        return f"http://{svc.spec.cluster_ip}:8000{path}"


def kustomization(tmp: Path, gitea: Gitea, repo: str) -> Path:
    """The test's own kustomization on top of deploy/overlays/testenv: Gitea's address (known
    only now)."""
    (tmp / "kustomization.yaml").write_text(f"""\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {os.path.relpath(OVERLAY, tmp)}
images:
  - name: gitray
    newName: localhost/gitray
    newTag: "{gi.gitray_version()}"
patches:
  - patch: |-
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: gitray-config
        namespace: gitray
      data:
        GITRAY_REPO: "{gitea.url}/{ADMIN}/{repo}.git"
        GITRAY_STATUS_URL: "{gitea.url}/api/v1"
        GITRAY_STATUS_REPOSITORY: "{ADMIN}/{repo}"
""")
    return tmp


def wait_namespace_gone(env: TestEnv, name: str) -> None:
    from kubernetes.client.rest import ApiException

    def gone() -> bool | None:
        try:
            env.core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return None
    wait_for(gone, timeout=240, interval=1, what=f"namespace {name} gone")


@pytest.fixture(scope="module")
def incluster(testenv: TestEnv) -> Iterator[InCluster]:
    from kubernetes import client

    assert testenv.real_node, "the in-cluster tests need the real node"
    wait_namespace_gone(testenv, NS)  # test_deploy's objects (kwok-scheduled) are gone

    t = time.monotonic()
    gi.install_packages()
    lines: list[str] = []
    archive = gi.build_gitray_image(say=lines.append)
    FIGURES["image build (or cached) s"] = round(time.monotonic() - t, 1)
    FIGURES["image archive MB"] = round(archive.stat().st_size / 1e6)
    print("\n".join(lines))
    t = time.monotonic()
    node.ctr(Path(testenv.state.dir) / "node", "images", "import", str(archive), timeout=600)
    FIGURES["image import s"] = round(time.monotonic() - t, 1)

    version, binary = build_any()
    workdir = Path(tempfile.mkdtemp(prefix="gitray-incluster-"))
    gitea = Gitea.start(binary, static_dir(version), workdir / "gitea", host=node.NODE_IP)
    repo = "ray-gitops"
    unbound = f"t-unbound-{uuid.uuid4().hex[:6]}"
    work = GitOpsRepo(workdir / "work")
    f = InCluster(testenv, gitea, repo, work, unbound, FIGURES)
    try:
        gitea.api("POST", "/user/repos", json={"name": repo, "private": True,
                                                "auto_init": False, "default_branch": "main"})
        work.git("remote", "add", "origin", gitea.clone_url(repo))
        make_namespace(testenv, name=unbound)
        # The namespace and the Secret first, as deploy/README.md says: a replica never starts
        # without its repository (and never with the base's placeholder URL).
        make_namespace(testenv, name=NS)
        testenv.core.create_namespaced_secret(NS, client.V1Secret(
            metadata=client.V1ObjectMeta(name="gitray-credentials"),
            string_data={"repo-url": gitea.clone_url(repo), "status-token": gitea.token}))
        first = f.push("serve-demo", {"serve.yaml": service(WORKLOADS, 0)})
        (workdir / "kz").mkdir()
        kz = f.kz = kustomization(workdir / "kz", gitea, repo)
        t = time.monotonic()
        testenv.kubectl("apply", "--server-side", "-k", str(kz))
        wait_for(lambda: len(f.ready_pods()) == 2 or None, timeout=300, interval=1,
                 what="two gitray replicas Ready")
        FIGURES["apply -k to 2 replicas Ready s"] = round(time.monotonic() - t, 1)
        wait_for(lambda: f.leader() in f.ready_pods() or None, timeout=120, interval=0.5,
                 what="a replica holding the Lease")
        with ClusterWatch(testenv, WORKLOADS) as watch:
            f.watch = watch
            f.first = f.converged(first)
            FIGURES["apply -k to first commit converged s"] = round(time.monotonic() - t, 1)
            yield f
    finally:
        print(f"\nin-cluster figures: {FIGURES}")
        try:
            (workdir / "gitray-pods.log").write_text(f.logs(tail=400))
            # what the replicas made in `default` (gitray runs a RayService as its own
            # RayClusters and Services: there is no RayService object to delete)
            testenv.kubectl("delete", "--ignore-not-found", "--wait=false", "-n", WORKLOADS,
                            "rayclusters,services", "-l", "gitray.io/instance=gitray")
            testenv.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
            drop_namespace(testenv, unbound)

            def ray_pods_gone() -> bool | None:
                # a replica still stopping (its namespace goes with --wait=false) may have
                # created a RayCluster after the delete above, and KubeRay makes the pods of
                # one again (the CI run of 30edeed: pods still there after 240 s)
                clusters = testenv.custom.list_namespaced_custom_object(
                    "ray.io", "v1", WORKLOADS, "rayclusters",
                    label_selector="gitray.io/instance=gitray")["items"]
                for c in clusters:
                    testenv.custom.delete_namespaced_custom_object(
                        "ray.io", "v1", WORKLOADS, "rayclusters", c["metadata"]["name"])
                pods = testenv.core.list_namespaced_pod(
                    WORKLOADS, label_selector="ray.io/cluster").items
                for p in pods:  # the test is over: no 30 s Ray grace period
                    testenv.core.delete_namespaced_pod(p.metadata.name, WORKLOADS,
                                                       grace_period_seconds=0)
                return (not pods and not clusters) or None
            wait_for(ray_pods_gone, timeout=240, interval=2, what="the RayService's pods gone")
            wait_namespace_gone(testenv, NS)
        finally:
            gitea.stop()
            shutil.rmtree(workdir, ignore_errors=True)


# ---- tests ------------------------------------------------------------------------------------


def takeover(f: InCluster, before: str, timeout: float = 180) -> tuple[str, float]:
    """Wait for a Ready pod other than ``before`` to hold the Lease; (its name, seconds)."""
    t = time.monotonic()

    def other() -> str | None:
        name = f.leader()
        return name if name and name != before and name in f.ready_pods() else None
    got = wait_for(other, timeout=timeout, interval=0.1,
                   what=f"a replica other than {before} leads")
    return got, round(time.monotonic() - t, 2)


def check_requests(name: str, result: LoadResult) -> None:
    FIGURES[f"{name}: requests"] = result.summary()
    print(f"{name}: {result.summary()}")
    all_answered(name, result)


def test_a_push_converges_through_the_in_cluster_replicas(incluster: InCluster) -> None:
    f = incluster
    assert f.first is not None and f.first.state is RunState.SUCCEEDED
    sha = f.first.revision
    # in sync, said on the commit by the replica (the status token from the Secret)
    ok = f.status_for(sha, "success", says="in sync at")
    print(f"status on {sha[:7]}: {ok['context']}: {ok['description']}")
    # the serve Service answers, through kube-proxy
    with LoadGenerator(f.serve_url(), rate=5, count=10, timeout=10) as load:
        pass
    check_requests("first commit", load.result())
    # the replicas run with what deploy/ ships: the projected ServiceAccount token of `gitray`
    # (admission), the image built here, the default dashboard mode `service`
    for pod in f.pods():
        spec = pod.spec
        assert spec.service_account_name == "gitray"
        assert spec.containers[0].image == f"localhost/gitray:{gi.gitray_version()}"
        projected = [v for v in spec.volumes if v.projected and any(
            s.service_account_token for s in v.projected.sources)]
        assert projected, f"no projected ServiceAccount token in {pod.metadata.name}"
    config = f.env.core.read_namespaced_config_map("gitray-config", NS).data
    assert config["GITRAY_DASHBOARD"] == "service"
    # ... so the Serve config went to the head's dashboard by its cluster DNS name (the
    # daemon reads GITRAY_DASHBOARD; `service` is also its default in a pod)
    leader_logs = f.env.kubectl("-n", NS, "logs", f.leader())
    assert "step 3/6 deploy-serve" in leader_logs, leader_logs[-3000:]
    # no secret in any replica's log: the token of the repository URL and of the statuses
    assert f.gitea.token not in f.logs(tail=2000)


def test_deleting_the_leader_pod_hands_over_and_the_next_push_converges(
        incluster: InCluster) -> None:
    f = incluster
    leader = f.leader()
    others = [p for p in f.ready_pods() if p != leader]
    assert leader and others, (leader, f.ready_pods())
    with LoadGenerator(f.serve_url(), rate=10, count=3000, timeout=10) as load:
        f.env.core.delete_namespaced_pod(leader, NS)  # default grace: SIGTERM, hand-over
        new, seconds = takeover(f, leader)
        FIGURES["leader pod deleted -> other replica leads s"] = seconds
        assert new in others, (new, others)  # the standby, not the replacement pod
        t = time.monotonic()
        sha = f.push("add calc", {"serve.yaml": service(WORKLOADS, 0,
                                                       serve_config(GREETER, CALC))})
        f.converged(sha)
        FIGURES["push after hand-over -> converged s"] = round(time.monotonic() - t, 1)
        f.status_for(sha, "success")
        wait_for(lambda: len(f.ready_pods()) == 2 or None, timeout=300, interval=1,
                 what="the Deployment back at 2 Ready replicas")
        load.stop()
    check_requests("leader pod deleted", load.result())


def test_rollout_restart_mid_upgrade_resumes_at_the_recorded_step(incluster: InCluster) -> None:
    f = incluster
    assert f.watch is not None
    before = set(f.watch.uids_named(SVC))
    t_push = time.time()
    with LoadGenerator(f.serve_url(), rate=10, count=6000, timeout=10) as load:
        sha = f.push("upgrade: revision 1", {"serve.yaml": service(
            WORKLOADS, 1, serve_config(GREETER, CALC))})
        snapshot = f.in_flight(sha)
        leader = f.leader()
        old_pods = set(f.ready_pods())
        done_before = [s.type for s in snapshot.steps if s.status.value == "ok"]
        new = new_cluster(snapshot)
        assert new, snapshot.plan.steps
        t = time.monotonic()
        f.env.kubectl("-n", NS, "rollout", "restart", "deployment/gitray")
        _, first_takeover = takeover(f, leader, timeout=300)
        FIGURES["rollout restart -> first take-over s"] = first_takeover
        FIGURES["steps done before the restart"] = done_before
        f.env.kubectl("-n", NS, "rollout", "status", "deployment/gitray", "--timeout=300s",
                      timeout=330)
        FIGURES["rollout restart -> rollout complete s"] = round(time.monotonic() - t, 1)
        # (by then the record may be the later run that deleted the old cluster at its deadline)
        rec = f.converged(sha, new=new)
        FIGURES["rollout restart -> upgrade converged s"] = round(time.monotonic() - t, 1)
        assert not old_pods & set(f.ready_pods()), "every replica was replaced"
        assert f.leader() not in old_pods
        load.stop()
    check_requests("rollout restart mid-upgrade", load.result())
    # resumed, not restarted: one new cluster for the one upgrade (no third), its steps in
    # the order of the plan, the ones done before the restart not redone
    created = [name for uid, name in f.watch.since(t_push) if uid not in before]
    assert created == [new], (created, snapshot.plan.steps)
    assert all(s.status.value == "ok" for s in rec.steps), rec.steps
    f.status_for(sha, "success")


def test_a_namespace_not_bound_by_the_rbac_fails_with_a_clear_status(
        incluster: InCluster) -> None:
    f = incluster
    from testenv.helpers import real_raycluster_manifest

    # gitray's settings allow the namespace (a user's mistake: the RBAC does not bind it)
    allowed = f.env.core.read_namespaced_config_map("gitray-config", NS).data[
        "GITRAY_ALLOWED_NAMESPACES"]
    f.env.kubectl("-n", NS, "patch", "configmap", "gitray-config", "--type=merge", "-p",
                  json.dumps({"data": {"GITRAY_ALLOWED_NAMESPACES": f"{allowed},{f.unbound}"}}))
    f.env.kubectl("-n", NS, "rollout", "restart", "deployment/gitray")
    f.env.kubectl("-n", NS, "rollout", "status", "deployment/gitray", "--timeout=300s",
                  timeout=330)
    cluster = real_raycluster_manifest("not-allowed", workers=0)
    cluster["metadata"]["namespace"] = f.unbound
    sha = f.push("a cluster where gitray has no rights", {"unbound.yaml": dump(cluster)})
    failed = f.status_for(sha, "error", timeout=180)
    print(f"status on {sha[:7]}: {failed['context']}: {failed['description']}")
    FIGURES["unbound namespace status"] = f"{failed['context']}: {failed['description']}"
    text = failed["description"]
    assert f.unbound in text and ("forbidden" in text.lower() or "rbac" in text.lower()), text
    assert f.gitea.token not in text
    # nothing was created there
    items = f.env.custom.list_namespaced_custom_object("ray.io", "v1", f.unbound,
                                                       "rayclusters")["items"]
    assert items == []
    # nothing else is applied meanwhile: gitray never plans (nor prunes) on a partial view of
    # the namespaces it is told to own


# ---- sharded (issue 28): last, as it leaves the Deployment sharded -------------------------

SHARDS = 6


def pod_of(holder: str) -> str:
    """The pod of a holder identity (``<hostname>_<pid>_<random>``)."""
    return holder.rsplit("_", 2)[0] if holder.count("_") >= 2 else holder


def hand_overs(changes: list[tuple[float, str, int, str]], since: float
               ) -> list[tuple[str, str, float, str]]:
    """(from pod, to pod, seconds, how) for each change of a shard Lease's holder at or after
    ``since``, from the sampler's ``history``: "released" when the Lease was seen free (the
    seconds from then until taken), else "taken" (the seconds since the old holder's last
    renewal: a Lease that lapsed shows its whole lapse)."""
    out: list[tuple[str, str, float, str]] = []
    holder, freed = "", None
    for t, who, _, renewed in changes:
        if not who:
            freed = t if holder and t >= since else None
            continue
        if holder and who != holder and t >= since:
            if freed is not None:
                out.append((pod_of(holder), pod_of(who), t - freed, "released"))
            else:
                last = parse_timestamp(renewed)
                out.append((pod_of(holder), pod_of(who),
                            t - last.timestamp() if last else float("inf"), "taken"))
        holder, freed = who, None
    return out


def balanced(f: InCluster, leases: Cluster) -> dict[str, list[int]] | None:
    """Pod -> its shards, once every shard Lease names a Ready pod, two shards each."""
    holders = leases.holders(SHARDS)
    ready = f.ready_pods()
    by_pod: dict[str, list[int]] = {p: [] for p in ready}
    for s, rec in sorted(holders.items()):
        if pod_of(rec.holder) not in by_pod:
            return None
        by_pod[pod_of(rec.holder)].append(s)
    sizes = sorted(len(v) for v in by_pod.values())
    return by_pod if len(holders) == SHARDS and sizes == [2, 2, 2] else None


def test_sharded_replicas_hand_over_shard_by_shard_on_a_rollout_restart(
        incluster: InCluster) -> None:
    """deploy/ with components/sharding (``GITRAY_SHARDS=6``, three replicas, the Leases'
    RBAC; resharded from 1 by a rollout, as docs/sharding.md says), an upgrade in flight,
    then ``kubectl rollout restart``: each
    shard moves from pod to pod as the old pods stop (released, never lapsed), the upgrade
    resumes at its recorded step on the new holder of its shard and converges, 0 failed
    requests. Each shard's hand-overs and their seconds go to FIGURES."""
    f = incluster
    assert f.watch is not None
    key = ObjectKey("RayService", WORKLOADS, SVC)
    shard = shard_of(key, SHARDS)
    assert f.kz is not None
    sharded = f.kz.parent / "sharded"  # what a user adds: components/sharding
    sharded.mkdir()
    (sharded / "kustomization.yaml").write_text(f"""\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {os.path.relpath(f.kz, sharded)}
components:
  - {os.path.relpath(REPO / "deploy" / "components" / "sharding", sharded)}
""")
    leases = Cluster(f.env, NS)  # the shard Leases, sampled every 50 ms
    try:
        # (forced: the ConfigMap's allowed namespaces go back to the overlay's, from the
        # test before's `kubectl patch`)
        t = time.monotonic()
        f.env.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(sharded))
        f.env.kubectl("-n", NS, "rollout", "restart", "deployment/gitray")
        f.env.kubectl("-n", NS, "rollout", "status", "deployment/gitray", "--timeout=300s",
                      timeout=330)
        wait_for(lambda: balanced(f, leases), timeout=180, interval=0.5,
                 what=f"{SHARDS} shards over three Ready pods, two each")
        FIGURES["1 -> 6 shards by a rollout: balanced s"] = round(time.monotonic() - t, 1)
        before = set(f.watch.uids_named(SVC))
        t_push = time.time()
        with LoadGenerator(f.serve_url(), rate=10, count=6000, timeout=10) as load:
            sha = f.push("upgrade: revision 2", {"serve.yaml": service(WORKLOADS, 2),
                                                 "unbound.yaml": None})
            snapshot = f.in_flight(sha)
            new = new_cluster(snapshot)
            old_pods = set(f.ready_pods())
            mark, t = time.time(), time.monotonic()
            f.env.kubectl("-n", NS, "rollout", "restart", "deployment/gitray")
            f.env.kubectl("-n", NS, "rollout", "status", "deployment/gitray", "--timeout=300s",
                          timeout=330)
            FIGURES["sharded: rollout restart -> rollout complete s"] = round(
                time.monotonic() - t, 1)
            wait_for(lambda: balanced(f, leases), timeout=180, interval=0.5,
                     what="the shards balanced over the new pods")
            rec = f.converged(sha, new=new)
            FIGURES["sharded: rollout restart -> upgrade converged s"] = round(
                time.monotonic() - t, 1)
            load.stop()
        check_requests("sharded rollout restart mid-upgrade", load.result())

        moves = {s: hand_overs(leases.sampler.history.get(
            shard_lease_name("gitray", s, SHARDS), []), mark) for s in range(SHARDS)}
        FIGURES["sharded: hand-overs per shard (s, how)"] = {
            s: [(round(sec, 2), how) for _, _, sec, how in m] for s, m in moves.items()}
        print(f"hand-overs per shard: {FIGURES['sharded: hand-overs per shard (s, how)']}")
        final = leases.holders(SHARDS)
        assert not {pod_of(r.holder) for r in final.values()} & old_pods, final
        for s, m in moves.items():
            assert m, f"shard {s} never moved: {leases.sampler.history}"
            # released as each old pod stopped: none waited for a Lease to lapse (15 s)
            assert all(sec < 15 for _, _, sec, _ in m), (s, m)
        assert leases.sampler.violations == [], leases.sampler.violations[:5]
        # resumed on its shard's holder: one new cluster, the steps done before kept
        created = [name for uid, name in f.watch.since(t_push) if uid not in before]
        assert created == [new], (created, snapshot.plan.steps)
        assert all(s.status.value == "ok" for s in rec.steps), rec.steps
        assert rec.shard == shard_label(shard, SHARDS), rec
        # (written in an epoch of its shard's Lease; the shard may have moved again after)
        assert 0 <= rec.epoch <= final[shard].transitions, (rec.epoch, final[shard])
        f.status_for(sha, "success")
    finally:
        leases.close()
