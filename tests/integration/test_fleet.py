"""`gitray sync` as a fleet controller (issue 26): each workload's run goes on on its own, so
one workload's long wait holds no other. A real process, a real bare Git remote, real pods.

The ten-minute job is the issue's acceptance taken literally (a RayJob that runs for 400 s;
a deletion on time while another workload waits for 10 minutes); it mostly sleeps, beside the
other lane's tests."""

from __future__ import annotations

import json
import time
from typing import Any

from testenv.helpers import TestEnv, WaitTimeout, drop_namespace, make_namespace, wait_for
from testenv.manifests import cluster_spec, dump, gitray_config
from testenv.rayservices import NEW_IMAGE
from tests.integration.chaos import start_replica
from tests.integration.gitops import GitOpsRepo
from tests.integration.harness import ray_clusters
from tests.integration.test_daemon import notes, push, rs, start_sync

IMAGE = "rayproject/ray:2.60.0"
JOB_S = 600  # the training job's run: 10 minutes once RUNNING


def rayjob(ns: str, seconds: int) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "train", "namespace": ns},
            "spec": {"entrypoint": f"python -c 'import time; time.sleep({seconds})'",
                     "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": {
                         "spec": {"containers": [{"name": "ray-head", "image": IMAGE}]}}}}}}


def job_status(testenv: TestEnv, ns: str, field: str = "jobStatus") -> str | None:
    items = testenv.custom.list_namespaced_custom_object("ray.io", "v1", ns,
                                                         "rayjobs")["items"]
    return str(items[0].get("status", {}).get(field) or "") if items else None


def push_other_teams_cluster(testenv: TestEnv, work: GitOpsRepo, other: str,
                             timeout: float) -> str:
    """Another team's (suspended) RayCluster pushed in a later commit: its sha, once gitray
    created it within ``timeout`` s."""
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
               "metadata": {"name": "team-b", "namespace": other},
               "spec": cluster_spec(IMAGE, suspend=True)}
    sha = push(work, "another team's cluster", {"cluster.yaml": dump(cluster)})
    wait_for(lambda: testenv.custom.list_namespaced_custom_object(
        "ray.io", "v1", other, "rayclusters")["items"] or None, timeout=timeout,
        what=f"the RayCluster of the later commit created within {timeout:.0f} s")
    return sha


def test_a_ten_minute_rayjob_holds_no_other_workload(
        testenv: TestEnv, namespace: str, remote: tuple[Any, GitOpsRepo],
        tmp_path: Any) -> None:
    """A RayJob that runs for 10 minutes (real pods) and a blue-green upgrade in one commit:
    the upgrade's old cluster is deleted at its deadline (deletionDelay 5 s), not when the
    job's wait ends; another team's RayCluster, pushed in a later commit while the job runs,
    is created within 60 s of its push. The job's commit stays pending all along and turns
    success when the job ends; then the later commit's does."""
    bare, work = remote
    other, third = make_namespace(testenv), make_namespace(testenv)
    sync = start_sync(testenv, namespace, bare, tmp_path)
    try:
        config = gitray_config("5s", allowed=[namespace, other, third],
                               status={"provider": "git-notes"})
        first = push(work, "a service", {"gitray.yaml": config, "svc.yaml": rs(namespace)})
        wait_for(lambda: sync.metric("gitray_last_synced_revision_info",
                                     f'revision="{first}"') == 1 or None, timeout=240)
        (blue,) = ray_clusters(testenv, namespace)
        second = push(work, "upgrade, and a training job", {
            "svc.yaml": rs(namespace, image=NEW_IMAGE),
            "job.yaml": dump(rayjob(other, JOB_S))})
        try:
            wait_for(lambda: ((clusters := ray_clusters(testenv, namespace))
                              and blue not in clusters) or None,
                     timeout=300, what="the old cluster deleted")
        except WaitTimeout as e:  # (what the daemon did meanwhile: its runs' steps, the Lease)
            raise AssertionError(f"{e}; gitray sync's log ends:\n{sync.logs()[-6000:]}") \
                from None
        assert len(ray_clusters(testenv, namespace)) == 1
        # deleted while the job's run waits (on a loaded machine the job's cluster may still
        # be starting: no job status yet). Whether it ended is KubeRay's jobDeploymentStatus:
        # its jobStatus read "Failure" in a clean-clone run, right after the job's cluster was
        # ready (KubeRay reached the head's dashboard, not yet listening, through the API
        # server's proxy and stored the proxy's error Status as the job's), and RUNNING after
        assert job_status(testenv, other, "jobDeploymentStatus") in {
            "", "Initializing", "Waiting", "Running"}

        # the deletion's own run ends a moment after the object is gone; the job's run stays
        def only_the_job() -> list[dict[str, Any]] | None:
            flying = json.loads(sync.get("/readyz")[1])["inFlight"]
            others = [f for f in flying if f["workload"] != f"{other}/RayJob/train"]
            return None if others else flying
        flying = wait_for(only_the_job, timeout=60, what="the deletion's run ended")
        assert [f["workload"] for f in flying] == [f"{other}/RayJob/train"], flying
        assert flying[0]["step"].startswith("2/2 wait-job"), flying

        # the job runs (its commit pending); another team's cluster lands meanwhile
        wait_for(lambda: job_status(testenv, other) == "RUNNING" or None, timeout=240,
                 what="the RayJob RUNNING")
        running = time.monotonic()
        assert notes(bare, second)["gitray"]["state"] == "pending"
        third_sha = push_other_teams_cluster(testenv, work, third, 60)
        assert job_status(testenv, other) == "RUNNING"
        (created,) = testenv.custom.list_namespaced_custom_object(
            "ray.io", "v1", third, "rayclusters")["items"]
        assert created["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "gitray", \
            created["metadata"]
        assert notes(bare, second)["gitray"]["state"] == "pending"

        # the job ends after its 10 minutes: its commit's verdict, then the later commit's
        wait_for(lambda: notes(bare, second).get("gitray", {}).get("state") == "success"
                 or None, timeout=JOB_S + 300, what="the job's commit success")
        assert time.monotonic() - running > JOB_S - 60  # (it was not cut short)
        assert job_status(testenv, other) == "SUCCEEDED"
        assert notes(bare, second)[f"gitray/{other}/RayJob/train"]["state"] == "success"
        wait_for(lambda: sync.metric("gitray_last_synced_revision_info",
                                     f'revision="{third_sha}"') == 1 or None, timeout=60)
        # (the metric moves first; the success status follows once each workload's health
        # line was read)
        wait_for(lambda: notes(bare, third_sha).get("gitray", {}).get("state") == "success"
                 or None, timeout=60, what="the later commit's success")
        assert "Traceback" not in sync.logs()
    finally:
        sync.terminate()
        drop_namespace(testenv, other)
        drop_namespace(testenv, third)


def test_more_long_waits_than_workers_hold_no_worker(
        testenv: TestEnv, namespace: str, remote: tuple[Any, GitOpsRepo],
        tmp_path: Any) -> None:
    """Two RayJob runs that never end (suspended) with one worker: each waits parked, so a
    later commit's RayCluster is still created at once; the persisted rayJob.timeout then
    fails both runs, their commit's status going from pending to failure."""
    bare, work = remote
    other = make_namespace(testenv)
    sync = start_replica(testenv.kubeconfig, namespace, bare, tmp_path, "one-worker",
                         extra=("--workers", "1"))
    try:
        config = gitray_config(allowed=[namespace, other], status={"provider": "git-notes"},
                               rayJob={"timeout": "150s"})
        jobs = {}
        for name in ("train-a", "train-b"):
            job = rayjob(namespace, 1)
            job["metadata"]["name"] = name
            job["spec"]["suspend"] = True  # KubeRay starts nothing: its run never ends
            jobs[f"{name}.yaml"] = dump(job)
        first = push(work, "two jobs that never end", {"gitray.yaml": config, **jobs})

        def parked() -> list[dict[str, Any]] | None:
            flying = json.loads(sync.get("/readyz")[1])["inFlight"]
            waiting = [f for f in flying if f.get("state") == "waiting"]
            return waiting if len(waiting) == 2 else None

        waiting = wait_for(parked, timeout=90, what="both job runs waiting parked")
        assert sorted(f["workload"] for f in waiting) == [
            f"{namespace}/RayJob/train-a", f"{namespace}/RayJob/train-b"], waiting
        assert all(f["step"].startswith("2/2 wait-job") for f in waiting), waiting
        assert notes(bare, first)["gitray"]["state"] == "pending"

        second = push_other_teams_cluster(testenv, work, other, 60)
        assert parked() is not None  # (they still wait: their timeout is 150 s)
        assert notes(bare, first)["gitray"]["state"] == "pending"

        # the timeout, persisted with each wait's start, fails both runs while parked
        for name in ("train-a", "train-b"):
            context = f"gitray/{namespace}/RayJob/{name}"

            def failed(c: str = context) -> bool | None:
                return notes(bare, first).get(c, {}).get("state") == "failure" or None

            wait_for(failed, timeout=240, what=f"{name}'s run failed at its timeout")
            assert "not finished after 150 s" in notes(bare, first)[context]["description"]
        assert notes(bare, first)["gitray"]["state"] == "failure"

        # no run of the first commit is left in flight. (A failed workload is retried by a
        # later commit, README "Failures": the pass after a failure plans the branch's newest
        # commit, `second` here, which may wait for the same job runs again, for itself.)
        def first_ended() -> tuple[list[dict[str, Any]]] | None:
            flying = json.loads(sync.get("/readyz")[1])["inFlight"]
            return (flying,) if all(f["revision"] == second[:12] for f in flying) else None

        [retried] = wait_for(first_ended, timeout=60,
                             what="no run of the first commit in flight")
        assert {f["workload"] for f in retried} <= {f"{namespace}/RayJob/train-a",
                                                    f"{namespace}/RayJob/train-b"}, retried
        assert "Traceback" not in sync.logs()
    finally:
        sync.terminate()
        drop_namespace(testenv, other)
