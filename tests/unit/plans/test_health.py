"""Health lines per kind (gitray.plans.health), from status as KubeRay and Serve report it."""

from __future__ import annotations

from typing import Any

import pytest

from gitray.core.model import Kind
from gitray.engine.notices import healthy
from gitray.plans.health import (
    cluster_health,
    cronjob_health,
    job_health,
    serve_health,
    workload_health,
)
from gitray.plans.materialize import as_live
from testenv.manifests import cluster_spec

READY = {"state": "ready", "readyWorkerReplicas": 1, "desiredWorkerReplicas": 1,
         "conditions": [{"type": "HeadPodReady", "status": "True"}]}


@pytest.mark.parametrize(("status", "expected"), [
    (READY, "ready, head ready, 1/1 workers ready"),
    ({}, "starting, head pending, 0/1 workers ready"),
    ({"state": "ready", "desiredWorkerReplicas": 2, "readyWorkerReplicas": 1,
      "conditions": [{"type": "HeadPodReady", "status": "True"}]},
     "ready, head ready, 1/2 workers ready"),
], ids=["ready", "just created", "a worker missing"])
def test_raycluster_health(status: dict[str, Any], expected: str) -> None:
    assert cluster_health({"spec": cluster_spec(), "status": status}) == expected


SUSPENDED = {"state": "suspended", "desiredWorkerReplicas": 0,
             "conditions": [{"type": "HeadPodReady", "status": "False"},
                            {"type": "RayClusterSuspended", "status": "True"}]}
SUSPENDING = {"state": "ready", "desiredWorkerReplicas": 1, "readyWorkerReplicas": 1,
              "conditions": [{"type": "HeadPodReady", "status": "False"},
                             {"type": "RayClusterSuspending", "status": "True"}]}


@pytest.mark.parametrize(("suspend", "status", "expected"), [
    (True, SUSPENDED, "suspended as asked (spec.suspend: true), no Ray pods wanted"),
    (True, SUSPENDING, "suspending as asked (spec.suspend: true), no Ray pods wanted"),
    (False, SUSPENDED, "suspended, resuming (spec.suspend: false)"),
    (True, {}, "starting, head pending, 0/1 workers ready"),
], ids=["suspended", "suspending", "resuming", "suspend not yet seen by KubeRay"])
def test_a_suspended_raycluster_is_healthy_as_its_spec_asks(
        suspend: bool, status: dict[str, Any], expected: str) -> None:
    """As KubeRay v1.7 reports a suspended cluster: state ``suspended``, HeadPodReady False.
    Read as "head not ready", such a cluster was unhealthy to the health watch (its gauge at
    0, health-degraded notified, its status flipped when the suspension followed convergence)."""
    line = cluster_health({"spec": cluster_spec(suspend=suspend), "status": status})
    assert line == expected
    assert healthy(line) is True


@pytest.mark.parametrize(("status", "expected"), [
    ({"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}, "SUCCEEDED (Complete)"),
    ({"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}, "RUNNING (Running)"),
    ({}, "PENDING (New)"),
    ({"jobDeploymentStatus": "Initializing"}, "PENDING (Initializing)"),
    ({"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "message": "exit code 1"},
     "FAILED (Failed): exit code 1"),
    ({"jobDeploymentStatus": "Failed", "message": "submitter never ran"},
     "PENDING (Failed): submitter never ran"),
], ids=["succeeded", "running", "not started", "cluster starting", "failed", "never ran"])
def test_rayjob_health(status: dict[str, Any], expected: str) -> None:
    assert job_health({"status": status}) == expected


def _run(cron: str, job_status: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": {"ray.io/cronjob-name": cron}},
            "status": {"jobStatus": job_status} if job_status else {}}


CRON = {"metadata": {"name": "nightly"}, "spec": {"schedule": "0 3 * * *"}}


@pytest.mark.parametrize(("cron", "runs", "expected"), [
    (CRON, [], "not run yet (schedule '0 3 * * *')"),
    ({**CRON, "status": {"lastScheduleTime": "2026-12-01T03:00:00Z"}},
     [_run("nightly", "SUCCEEDED"), _run("nightly", "RUNNING"), _run("other", "FAILED"),
      _run("nightly", "SUCCEEDED")],
     "last run 2026-12-01T03:00:00Z, 3 run(s): 1 RUNNING, 2 SUCCEEDED"),
    ({**CRON, "status": {"lastScheduleTime": "2026-12-01T03:00:00Z"}}, [],
     "last run 2026-12-01T03:00:00Z, 0 run(s)"),
    ({**CRON, "spec": {**CRON["spec"], "suspend": True}}, [],
     "suspended, not run yet (schedule '0 3 * * *')"),
    ({**CRON, "status": {"lastScheduleTime": "2026-12-01T03:00:00Z"}},
     [_run("nightly", None)], "last run 2026-12-01T03:00:00Z, 1 run(s): 1 PENDING"),
], ids=["never scheduled", "runs by outcome, other cronjobs' not counted",
        "runs cleaned up", "suspended", "a run not started yet"])
def test_raycronjob_health(cron: dict[str, Any], runs: list[dict[str, Any]],
                           expected: str) -> None:
    assert cronjob_health(cron, runs) == expected


def test_rayservice_health_is_per_application() -> None:
    apps = {"greeter": {"status": "RUNNING"}, "calc": {"status": "DEPLOYING"}}
    assert serve_health(apps) == "calc DEPLOYING, greeter RUNNING"
    assert serve_health({}) == "no Serve application"


def _live(kind: str, name: str, created: str, status: dict[str, Any]) -> Any:
    return as_live({"apiVersion": "ray.io/v1", "kind": kind,
                    "metadata": {"name": name, "namespace": "ray",
                                 "creationTimestamp": created},
                    "spec": cluster_spec() if kind == Kind.RAY_CLUSTER else {}}, status)


def test_a_rayjobs_health_is_its_newest_runs() -> None:
    old = _live("RayJob", "job-aaaaa", "2026-12-01T10:00:00Z", {"jobStatus": "FAILED"})
    new = _live("RayJob", "job-bbbbb", "2026-12-01T11:00:00Z",
                {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    assert workload_health("RayJob", [new, old]) == "job-bbbbb: SUCCEEDED (Complete)"
    assert workload_health("RayJob", []) == "-"


def test_health_of_clusters_and_cronjobs_from_what_gitray_owns() -> None:
    cluster = _live("RayCluster", "cl", "2026-12-01T10:00:00Z", READY)
    assert workload_health("RayCluster", [cluster]) == "ready, head ready, 1/1 workers ready"
    cron = _live("RayCronJob", "nightly", "2026-12-01T10:00:00Z",
                 {"lastScheduleTime": "2026-12-01T10:01:00Z"})
    assert workload_health("RayCronJob", [cron], [_run("nightly", "RUNNING")]) == \
        "last run 2026-12-01T10:01:00Z, 1 run(s): 1 RUNNING"
    assert workload_health("ConfigMap", []) == "-"
