"""gitray's side of the behavioural differences measured against KubeRay's own RayService
controller (``bench/run --only kuberay``, issue 14), on the real node with real requests to
the serve Service's ClusterIP.

Covered elsewhere, not repeated here: a bad ``import_path`` fails the upgrade with the Serve
message, reports it and removes the pending cluster (test_apply_rayservice.py,
test_daemon.py); with an image and a Serve change together the new config lands only on the
new cluster (test_apply_rayservice.py); a revert during ``gitray apply`` cancels the upgrade
without a third cluster (test_apply_rayservice.py); SIGKILL mid-upgrade resumes on the same
pending cluster (test_apply_rayservice.py, test_failover.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from testenv.helpers import RAY_IMAGE, TestEnv, get_text, wait_for
from testenv.load import LoadGenerator
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import real_node_rayservice
from tests.integration.chaos import ClusterWatch, isolated, start_replica
from tests.integration.gitops import GitOpsRepo, Gitray, output
from tests.integration.harness import ray_clusters

# Counts failed requests (0 allowed) through an upgrade: run alone, not beside a lane.
pytestmark = pytest.mark.alone

SVC = "serve-demo"
GREETING = "hello from gitray testenv"


def _rayservice(ns: str, *, image: str = RAY_IMAGE, workers: int = 0,
                head_cpu: str | None = None) -> dict[str, Any]:
    """The examples' RayService sized for the real node, serving the hello app."""
    return real_node_rayservice(ns, image, serve_config(("hello", "/hello", "hello:app")),
                                workers=workers, head_cpu=head_cpu)


def _serving(env: TestEnv, ns: str) -> str:
    svc = env.core.read_namespaced_service(f"{SVC}-serve-svc", ns)
    return str(svc.spec.selector["ray.io/cluster"])


def _url(env: TestEnv, ns: str) -> str:
    svc = env.core.read_namespaced_service(f"{SVC}-serve-svc", ns)
    url = f"http://{svc.spec.cluster_ip}:8000/hello"
    assert wait_for(lambda: get_text(url), 60, what="an answer") == GREETING
    return url


def test_a_pending_cluster_that_never_becomes_ready_is_given_up_and_removed(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """KubeRay waits forever for a pending cluster that cannot start (#5088), holding what its
    scheduled pods request. gitray gives up after ``clusterReadyTimeout``, reports why, deletes
    the pending cluster and never moves traffic: requests keep being answered."""
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    config = isolated(gitray_config("10s", ns, ready_timeout="3m"), ns)
    repo.commit("first rollout", {"gitray.yaml": config,
                                  "svc.yaml": dump(_rayservice(ns, workers=1))})
    first = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert first.returncode == 0, output(first)
    (blue,) = ray_clusters(testenv, ns)
    url = _url(testenv, ns)

    repo.commit("the head asks for more CPUs than the node has", {
        "gitray.yaml": isolated(gitray_config("10s", ns, ready_timeout="20s"), ns),
        "svc.yaml": dump(_rayservice(ns, workers=1, head_cpu="64"))})
    with LoadGenerator(url, rate=5, count=1000, timeout=10) as load:
        result = gitray.run("apply", "--repo", str(repo.path), "--yes")
        wait_for(lambda: ray_clusters(testenv, ns) == [blue] or None, 120,
                 what="the pending cluster deleted")
        load.stop()
    assert result.returncode == 1, output(result)
    assert "not ready after 20 s" in result.stderr, output(result)
    assert "deleted failed pending cluster" in result.stdout + result.stderr, output(result)
    assert _serving(testenv, ns) == blue
    r = load.result()
    assert r.sent > 0 and r.failed == 0, r.summary()
    assert set(r.bodies) == {GREETING}


def test_a_revert_pushed_mid_upgrade_ends_on_the_original_cluster_without_a_third(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """KubeRay's controller, reading the reverted spec mid-upgrade, built a third cluster in
    benchmark 6. ``gitray sync`` notices the revert while it waits for the new cluster, ends
    that run ("superseded") and syncs the revert at once: it cancels the upgrade. Two
    clusters in all, traffic never on the new one, the original one serving at the end, no
    request failed."""
    ns = namespace
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))

    def push(message: str, files: dict[str, str | None]) -> str:
        sha = work.commit(message, files)
        work.git("push", "-q", "origin", "main")
        return sha

    first = push("first rollout", {"gitray.yaml": isolated(gitray_config("15s", ns), ns),
                                   "svc.yaml": dump(_rayservice(ns))})
    sync = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "vs-kuberay")
    try:
        def synced(sha: str) -> bool | None:
            return sync.metric("gitray_last_synced_revision_info", f'revision="{sha}"') == 1 \
                or None
        wait_for(lambda: synced(first), 600, what="the first rollout")
        (blue,) = ray_clusters(testenv, ns)
        url = _url(testenv, ns)
        with ClusterWatch(testenv, ns) as watch, \
                LoadGenerator(url, rate=5, count=3000, timeout=10) as load:
            push("new image", {"svc.yaml": dump(_rayservice(
                ns, image="localhost/gitray-ray:2.60.0"))})
            wait_for(lambda: len(ray_clusters(testenv, ns)) == 2 or None, 120,
                     what="the pending cluster")
            reverted = push("revert", {"svc.yaml": dump(_rayservice(ns))})
            selected: set[str] = set()

            def revert_synced() -> bool | None:
                selected.add(_serving(testenv, ns))
                return synced(reverted)
            wait_for(revert_synced, 600, what="the revert synced")
            wait_for(lambda: ray_clusters(testenv, ns) == [blue] or None, 180,
                     what="the abandoned cluster deleted")
            load.stop()
            # blue too is "first seen" once the watch has started: count the others by uid
            created = [name for name in watch.uids_named().values() if name != blue]
        assert len(created) == 1, created  # one new cluster in all: no third
        assert selected == {blue}  # the serve Service never selected the new cluster
        assert _serving(testenv, ns) == blue
        log = sync.log.read_text()
        assert "stopped: Git moved on to " + reverted[:7] in log, log[-3000:]
        assert "cancel-upgrade" in log, log[-3000:]
        r = load.result()
        assert r.sent > 0 and r.failed == 0, r.summary()
    finally:
        sync.terminate()
