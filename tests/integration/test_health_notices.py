"""Signals after convergence and for a failing RayJob (issue 30), against a real ``gitray sync``,
real Ray pods and two notification receivers on 127.0.0.1: one that answers and one that
hangs (it takes the connection and never answers, the hardest way for a receiver to be down).

A RayService converges; then its Serve application is made unhealthy on purpose (the test app's
``?unhealthy=1``: from then on Serve's health check of its replica fails). The health watch
(every poll interval once in sync) flips the workload's commit status to failure and notifies
health-degraded within two poll intervals of Serve reporting it. A later commit adds a RayJob
whose entrypoint fails: its run fails, and run-failed carries Ray's own message. The answering
receiver hears every event in order, all while the hanging one still holds its first post.

And a RayCronJob whose first scheduled run fails after it converged, in a commit that waits for
its verdict (a RayService beside it failed): the watch flips its status, notifies, and
GitrayHealthDegraded fires in a real Prometheus (Debian's ``prometheus``)
scraping that ``gitray sync`` with ``deploy/monitoring/rules.yaml`` loaded.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testenv.helpers import TestEnv, get_text, wait_for
from testenv.manifests import cluster_spec, dump, gitray_config, serve_config
from testenv.rayservices import HELLO, real_node_rayservice
from tests.integration.chaos import isolated, start_replica
from tests.integration.gitops import GitOpsRepo
from tests.integration.test_daemon import notes
from tests.integration.test_monitoring import (  # noqa: F401
    MONITORING,
    Prometheus,
    Receiver,
    _push,
    receiver,
)
from tests.integration.test_sync_controls import unschedulable_rayservice

INTERVAL_S = 10  # gitray sync --interval: the health watch reads every workload this often
SVC = "watched"


@pytest.fixture
def hung() -> Iterator[str]:
    """A receiver that is down the hard way: it listens, the kernel takes the connection, and
    no one ever reads or answers. Its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/hook"


def _failing_job(ns: str) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "broken", "namespace": ns},
            "spec": {"entrypoint": "python -c \"raise SystemExit('no data in /datasets/x')\"",
                     "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": real_node_rayservice(ns, workers=0)["spec"][
                         "rayClusterConfig"]}}


def _serve_status(head_ip: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://{head_ip}:8265/api/serve/applications/",
                                    timeout=5) as r:
            apps = json.load(r).get("applications") or {}
    except OSError:
        return None
    return str((apps.get("hello") or {}).get("status") or "") or None


def test_a_serve_app_gone_bad_and_a_failing_rayjob_are_notified_and_a_hung_receiver_delays_nothing(
        testenv: TestEnv, namespace: str, tmp_path: Path, remote: tuple[Path, GitOpsRepo],
        receiver: Receiver, hung: str) -> None:  # noqa: F811
    ns = namespace
    bare, repo = remote
    hung_url = hung
    config = isolated(gitray_config("5s", ns, status={"provider": "git-notes"},
                                    notifications={"receivers": [
                                        {"name": "hangs", "url": hung_url},
                                        {"name": "test", "url": receiver.url}]}), ns)
    serve = serve_config(HELLO, deployments=[{"name": "Hello", "health_check_period_s": 2,
                                              "health_check_timeout_s": 5}])
    first = _push(repo, "a service", {"gitray.yaml": config, "svc.yaml": dump(
        real_node_rayservice(ns, name=SVC, serve=serve, workers=0))})
    sync = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "daemon",
                         interval=f"{INTERVAL_S}s")
    context = f"gitray/{ns}/RayService/{SVC}"
    try:
        wait_for(lambda: notes(bare, first).get(context, {}).get("state") == "success" or None,
                 timeout=600, what="the RayService in sync")
        # (the status says "converged at"; the health watch's next read adds Serve's line)
        wait_for(lambda: "hello RUNNING" in notes(bare, first)[context]["description"] or None,
                 timeout=3 * INTERVAL_S, what="the health line of the status")
        wait_for(lambda: "converged" in receiver.events() or None, timeout=30,
                 what="the converged notification")

        # the Serve application goes bad after convergence
        [head] = [p for p in testenv.core.list_namespaced_pod(
            ns, label_selector="ray.io/node-type=head").items]
        ip = str(head.status.pod_ip)
        assert get_text(f"http://{ip}:8000/hello?unhealthy=1") == "unhealthy from now on"
        wait_for(lambda: _serve_status(ip) == "UNHEALTHY" or None, timeout=120,
                 what="Serve reporting the application UNHEALTHY")
        unhealthy_at = time.monotonic()
        flipped = wait_for(lambda: (notes(bare, first)[context]["state"] == "failure"
                                    and time.monotonic()) or None,
                           timeout=6 * INTERVAL_S, what="the commit status flipped")
        description = notes(bare, first)[context]["description"]
        assert re.fullmatch(rf"in sync at {first[:7]}: hello UNHEALTHY since \d\d:\d\d UTC",
                            description), description
        degraded = wait_for(lambda: [b for b in receiver.got if b["event"] == "health-degraded"]
                            or None, timeout=30, what="the health-degraded notification")
        noticed = time.monotonic()
        print(f"status flipped {flipped - unhealthy_at:.1f} s, notified "
              f"{noticed - unhealthy_at:.1f} s after Serve said UNHEALTHY "
              f"(poll interval {INTERVAL_S} s)")
        assert flipped - unhealthy_at <= 2 * INTERVAL_S, "within two poll intervals"
        assert noticed - unhealthy_at <= 2 * INTERVAL_S + 5, "notified with the flip"
        assert degraded[0]["workload"] == {"kind": "RayService", "namespace": ns, "name": SVC}
        assert "hello UNHEALTHY" in degraded[0]["summary"]

        # a later commit: a RayJob whose entrypoint fails in Ray
        second = _push(repo, "a broken job", {"job.yaml": dump(_failing_job(ns))})
        job = f"gitray/{ns}/RayJob/broken"
        wait_for(lambda: notes(bare, second).get(job, {}).get("state") == "failure" or None,
                 timeout=600, what="the RayJob's run failed")
        failed = wait_for(lambda: [b for b in receiver.got if b["event"] == "run-failed"]
                          or None, timeout=30, what="the run-failed notification")
        assert failed[0]["workload"] == {"kind": "RayJob", "namespace": ns, "name": "broken"}
        assert "no data in /datasets/x" in failed[0]["fields"]["reason"], failed[0]
        # the failure stands at that commit: the passes after the run (its end asks for one at
        # once, then every poll) find nothing to do, and must not say it in sync (they did)
        time.sleep(2 * INTERVAL_S)
        said = notes(bare, second)
        assert said[job]["state"] == "failure", said[job]
        assert said["gitray"]["state"] == "failure", said["gitray"]

        # every event in order, heard while the hanging receiver still holds its first post
        events = [(b["revision"], b["event"]) for b in receiver.got]
        assert events.index((first, "converged")) < events.index((first, "health-degraded")) \
            < events.index((second, "run-failed")), events
        # (its first post is upgrade-started, and the later ones queue behind that post's five
        # attempts: which event has timed out by now depends on how fast the cluster came up)
        assert re.search(r"notification [a-z-]+ to hangs: ReadTimeout.*retrying in",
                         sync.logs()), "the hanging receiver's posts waited for its timeout"
        assert hung_url.split("/hook")[0] not in sync.logs()  # (a receiver's URL is never said)
        assert "Traceback" not in sync.logs()
    finally:
        sync.terminate()


def _failing_cron(ns: str) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCronJob",
            "metadata": {"name": "nightly", "namespace": ns},
            "spec": {"schedule": "* * * * *", "jobTemplate": {
                "entrypoint": "python -c 'import sys; sys.exit(3)'",
                "shutdownAfterJobFinishes": True,
                "rayClusterSpec": cluster_spec(replicas=0, min_replicas=0)}}}


def test_a_run_failing_after_convergence_is_watched(
        testenv: TestEnv, namespace: str, tmp_path: Path, remote: tuple[Path, GitOpsRepo],
        receiver: Receiver) -> None:  # noqa: F811
    """A RayCronJob converges (healthy: not run yet) in a commit whose other workload, a
    RayService that can never be ready, failed: the commit waits for its verdict (the failure
    stands until a new commit or `gitray retry`). The RayCronJob's first scheduled run, a
    minute later, fails in Ray. The health watch (every poll interval, of the workloads in
    sync at the commit) flips the RayCronJob's commit status to failure, notifies
    health-degraded, the gauge drops, and GitrayHealthDegraded fires in a real Prometheus.
    Before, the watch read nothing until the whole commit was in sync: one failed workload
    left every other one unwatched. (The first test watches a commit in sync.)"""
    ns = namespace
    bare, repo = remote
    config = isolated(gitray_config("10s", ns, ready_timeout="8s",
                                    status={"provider": "git-notes"},
                                    notifications={"receivers": [
                                        {"name": "test", "url": receiver.url,
                                         "events": ["health-degraded", "converged"]}]}), ns)
    sha = _push(repo, "nightly", {"gitray.yaml": config, "cron.yaml": dump(_failing_cron(ns)),
                                  "svc.yaml": unschedulable_rayservice(ns)})
    sync = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "daemon", interval="2s")
    # every 5 s, each scrape given 5 s: a failed scrape marks the series stale and starts the
    # alert's 2 minutes over (a clean-clone run of 7750636: two scrapes of 1 s failed on the
    # loaded machine in 300 s, and the alert had not fired by the end of the 240-s wait)
    prometheus = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{sync.port}",
                            MONITORING / "rules.yaml", scrape_s=5)
    context = f"gitray/{ns}/RayCronJob/nightly"
    labels = f'kind="RayCronJob",name="nightly",namespace="{ns}"'
    try:
        wait_for(lambda: sync.metric("gitray_workload_healthy", labels) == 1 or None,
                 timeout=300, what="the RayCronJob in sync and healthy")
        assert notes(bare, sha)[context]["state"] == "success"
        failed = f"gitray/{ns}/RayService/serve-demo"
        wait_for(lambda: notes(bare, sha).get(failed, {}).get("state") == "failure" or None,
                 timeout=120, what="the RayService's failure")
        degraded = wait_for(lambda: notes(bare, sha)[context]["state"] == "failure" or None,
                            timeout=300, what="the status flipped by the failed run")
        assert degraded
        description = notes(bare, sha)[context]["description"]
        assert re.fullmatch(rf"in sync at {sha[:7]}: last run .* FAILED.* since "
                            r"\d\d:\d\d UTC", description), description
        assert sync.metric("gitray_workload_healthy", labels) == 0
        wait_for(lambda: "health-degraded" in [b["event"] for b in receiver.got] or None,
                 timeout=30, what="the health-degraded notification")
        [notice] = [b for b in receiver.got if b["event"] == "health-degraded"]
        assert notice["workload"] == {"kind": "RayCronJob", "namespace": ns, "name": "nightly"}
        assert "FAILED" in notice["summary"]

        def firing() -> list[dict[str, Any]] | None:
            alerts = prometheus.api("alerts")["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "GitrayHealthDegraded"
                    and a["state"] == "firing"] or None
        [alert] = wait_for(firing, timeout=240, what="GitrayHealthDegraded firing (for: 2m)")
        assert (alert["labels"]["namespace"], alert["labels"]["name"]) == (ns, "nightly")
        said = notes(bare, sha)  # the failure stood throughout: the commit never in sync
        assert said[failed]["state"] == "failure" and said["gitray"]["state"] == "failure"
    finally:
        prometheus.stop()
        sync.terminate()


def test_a_raycluster_suspended_on_purpose_stays_healthy_and_in_sync(
        testenv: TestEnv, namespace: str, tmp_path: Path,
        remote: tuple[Path, GitOpsRepo]) -> None:
    """A RayCluster with ``suspend: true`` (no Ray pods): once KubeRay reports it suspended
    (state ``suspended``, HeadPodReady False), the health watch's reads, one every poll
    interval, keep its commit status success and the gauge at 1. They read it as a head not
    ready: the gauge fell to 0 (GitrayHealthDegraded), health-degraded was notified, and the
    status flipped to failure when KubeRay's suspension came after the convergence."""
    ns = namespace
    bare, repo = remote
    config = isolated(gitray_config("10s", ns, status={"provider": "git-notes"}), ns)
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
               "metadata": {"name": "parked", "namespace": ns},
               "spec": cluster_spec(suspend=True)}
    sha = _push(repo, "a parked cluster", {"gitray.yaml": config, "lab.yaml": dump(cluster)})
    sync = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "daemon", interval="2s")
    context = f"gitray/{ns}/RayCluster/parked"
    labels = f'kind="RayCluster",name="parked",namespace="{ns}"'
    try:
        wait_for(lambda: notes(bare, sha).get(context, {}).get("state") == "success" or None,
                 timeout=120, what="the RayCluster in sync")
        wait_for(lambda: testenv.custom.get_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters", "parked").get("status", {}).get("state")
            == "suspended" or None, timeout=120, what="KubeRay reporting it suspended")
        time.sleep(5 * 2)  # the watch reads it about five times (each read rests as long)
        said = notes(bare, sha)
        assert said[context]["state"] == "success", said[context]
        assert said["gitray"]["state"] == "success", said["gitray"]
        assert sync.metric("gitray_workload_healthy", labels) == 1
        assert "Traceback" not in sync.logs()
    finally:
        sync.terminate()
