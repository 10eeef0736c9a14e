"""Freeze windows, suspend/resume and retry through `gitray sync` (issue 29): a real daemon
process, a real bare Git remote with statuses as git notes, the real API server. Cheap
workloads (ConfigMaps; a RayService whose head can never be scheduled), no Ray pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump, gitray_config
from testenv.rayservices import example_rayservice
from tests.integration.chaos import Replica
from tests.integration.gitops import GitOpsRepo, Gitray, output
from tests.integration.test_daemon import note_lines, notes, push


def configmap(ns: str, name: str, value: str) -> str:
    return dump({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": name, "namespace": ns}, "data": {"value": value}})


def cm_value(env: TestEnv, ns: str, name: str) -> str | None:
    items = env.core.list_namespaced_config_map(ns, field_selector=f"metadata.name={name}").items
    return items[0].data["value"] if items else None


def polls(sync: Replica) -> float:
    return sync.metric("gitray_polls_total") or 0.0


def status_of(bare: Path, sha: str, context: str) -> dict[str, Any]:
    return notes(bare, sha).get(context) or {}


def config(ns: str, **extra: Any) -> str:
    return gitray_config("4s", ns, status={"provider": "git-notes"}, **extra)


def test_a_freeze_window_holds_sync_and_a_suspended_workload_waits_for_resume(
        testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo],
        sync_proc: Replica) -> None:
    bare, work = remote
    always = {"name": "always", "schedule": "* * * * *", "duration": "1h"}
    frozen = push(work, "frozen", {"gitray.yaml": config(namespace, freezeWindows=[always]),
                                   "a.yaml": configmap(namespace, "a", "v1")})
    context = f"gitray/{namespace}/ConfigMap/a"
    def held_by_the_window() -> bool:
        status = status_of(bare, frozen, context)
        return status.get("state") == "pending" and \
            "held: freeze window always" in status.get("description", "")

    wait_for(lambda: held_by_the_window() or None, timeout=120)
    wait_for(lambda: polls(sync_proc) >= 3 or None, timeout=60)
    assert cm_value(testenv, namespace, "a") is None  # held, poll after poll
    assert notes(bare, frozen)["gitray"]["state"] == "pending"  # the commit is not in sync

    # the window leaves gitray.yaml: applied at the next poll, the commit in sync
    thawed = push(work, "thawed", {"gitray.yaml": config(namespace)})
    wait_for(lambda: cm_value(testenv, namespace, "a"), timeout=120)
    wait_for(lambda: notes(bare, thawed).get("gitray", {}).get("state") == "success" or None,
             timeout=60)

    # suspend b before it is pushed: pending, saying who; resumed, it is applied
    gitray = Gitray(testenv.kubeconfig, namespace)
    workload = f"{namespace}/ConfigMap/b"
    r = gitray.run("suspend", workload)
    assert r.returncode == 0, output(r)
    held = push(work, "b", {"b.yaml": configmap(namespace, "b", "v1")})
    wait_for(lambda: "suspended by " in status_of(bare, held, f"gitray/{workload}")
             .get("description", "") or None, timeout=120)
    assert status_of(bare, held, f"gitray/{workload}")["state"] == "pending"
    assert cm_value(testenv, namespace, "b") is None
    r = gitray.run("resume", workload)
    assert r.returncode == 0, output(r)
    wait_for(lambda: cm_value(testenv, namespace, "b"), timeout=120)
    wait_for(lambda: notes(bare, held).get("gitray", {}).get("state") == "success" or None,
             timeout=60)


def unschedulable_rayservice(ns: str) -> str:
    doc = example_rayservice(ns, workers=0)  # (a worker would loop on its head's GCS)
    head = doc["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    head["nodeSelector"] = {"gitray.io/test": "nowhere"}  # never ready
    return dump(doc)


def test_retry_runs_a_failed_run_once_more_at_the_same_revision(
        testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo],
        sync_proc: Replica) -> None:
    bare, work = remote
    sha = push(work, "never ready", {
        "gitray.yaml": gitray_config("4s", namespace, ready_timeout="8s",
                                     status={"provider": "git-notes"}),
        "svc.yaml": unschedulable_rayservice(namespace)})
    workload = f"{namespace}/RayService/serve-demo"
    context = f"gitray/{workload}"

    def failures() -> int:
        return sum(1 for r in note_lines(bare, sha)
                   if r["context"] == context and r["state"] == "failure")

    wait_for(lambda: failures() >= 1 or None, timeout=180)
    seen = polls(sync_proc)
    wait_for(lambda: polls(sync_proc) >= seen + 5 or None, timeout=60)
    assert failures() == 1  # not retried at the same revision by itself

    r = Gitray(testenv.kubeconfig, namespace).run("retry", workload)
    assert r.returncode == 0 and "runs again" in r.stdout, output(r)
    wait_for(lambda: failures() >= 2 or None, timeout=180)  # ran again (and failed again)
    seen = polls(sync_proc)
    wait_for(lambda: polls(sync_proc) >= seen + 5 or None, timeout=60)
    assert failures() == 2  # once per request


def test_drift_is_healed_while_a_workload_failed_at_the_newest_commit_stands(
        testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo],
        sync_proc: Replica) -> None:
    """The newest commit waits for its verdict while one of its workloads failed (or a RayJob
    runs, or an upgrade is paused): the other workloads' drift is healed meanwhile, by the
    default drift check (every 10 polls), and the failed one is not retried by it. Before:
    drift passes ran only in sync, so one failure stopped drift healing for every workload
    until the next commit."""
    bare, work = remote
    sha = push(work, "one never ready, one ConfigMap", {
        "gitray.yaml": gitray_config("4s", namespace, ready_timeout="8s",
                                     status={"provider": "git-notes"}),
        "svc.yaml": unschedulable_rayservice(namespace),
        "cm.yaml": configmap(namespace, "settings", "from-git")})
    failed = f"gitray/{namespace}/RayService/serve-demo"

    def failures() -> int:
        return sum(1 for r in note_lines(bare, sha)
                   if r["context"] == failed and r["state"] == "failure")

    wait_for(lambda: failures() >= 1 or None, timeout=180, what="the RayService's failure")
    seen = polls(sync_proc)  # (the pass that follows a run's end is over by then)
    wait_for(lambda: polls(sync_proc) >= seen + 3 or None, timeout=60, what="3 more polls")
    assert cm_value(testenv, namespace, "settings") == "from-git"
    drift = 'trigger="drift"'
    passes = sync_proc.metric("gitray_sync_duration_seconds_count", drift) or 0.0
    testenv.core.patch_namespaced_config_map("settings", namespace,
                                             {"data": {"value": "by hand"}})
    wait_for(lambda: cm_value(testenv, namespace, "settings") == "from-git" or None,
             timeout=120, what="the ConfigMap's drift healed")
    assert (sync_proc.metric("gitray_sync_duration_seconds_count", drift) or 0.0) > passes
    assert failures() == 1  # the failure stands: a drift pass does not retry it
    assert status_of(bare, sha, "gitray")["state"] == "failure"
