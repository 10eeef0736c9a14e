"""`gitray apply` of RayClusters, RayJobs and supporting objects; saved plans; pruning;
fencing of a stale executor — against the real API server and KubeRay operator."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from gitray.core.config import Config, DashboardMode
from gitray.core.errors import LeaseLostError
from gitray.core.model import ObjectKey, SourceLocation, Workload
from gitray.engine.actions import Actions
from gitray.engine.executor import Executor
from gitray.engine.progress import ProgressStore
from gitray.k8s.client import Kube
from gitray.k8s.election import LeaseSettings
from gitray.k8s.lease import Lease
from gitray.k8s.live import read_live_state
from gitray.k8s.settings import KubeSettings
from gitray.plans.materialize import materialize
from gitray.plans.planner import compute_plan
from gitray.ray.dashboard import Resolver
from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump, gitray_config
from testenv.rayservices import NEW_IMAGE
from tests.integration.gitops import REPO_ROOT, GitOpsRepo, Gitray, output
from tests.integration.harness import load_record

EXAMPLE_CLUSTER = REPO_ROOT / "examples-repo" / "ray-cluster" / "raycluster.yaml"


def configmap(ns: str, name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": {"value": value}}


@pytest.fixture
def tools(testenv: TestEnv, namespace: str, tmp_path: Path) -> tuple[GitOpsRepo, Gitray]:
    return GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, namespace)


def cm_value(env: TestEnv, ns: str, name: str) -> str | None:
    items = env.core.list_namespaced_config_map(ns, field_selector=f"metadata.name={name}").items
    return items[0].data["value"] if items else None


def test_a_saved_plan_applies_exactly_or_is_refused_as_stale(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray],
        tmp_path: Path) -> None:
    repo, gitray = tools
    files = {"gitray.yaml": gitray_config(namespace=namespace)}
    repo.commit("v1", {**files, "cfg.yaml": dump(configmap(namespace, "cfg", "v1"))})
    p1 = tmp_path / "p1.json"
    r = gitray.run("plan", "--repo", str(repo.path), "--out", str(p1))
    assert r.returncode == 0, output(r)
    r = gitray.run("apply", str(p1), "--repo", str(repo.path))
    assert r.returncode == 0 and "is current" in r.stdout, output(r)
    assert cm_value(testenv, namespace, "cfg") == "v1"

    repo.commit("v2", {"cfg.yaml": dump(configmap(namespace, "cfg", "v2"))})
    p2 = tmp_path / "p2.json"
    assert gitray.run("plan", "--repo", str(repo.path), "--out", str(p2)).returncode == 0
    testenv.core.patch_namespaced_config_map("cfg", namespace,
                                             {"metadata": {"labels": {"touched": "yes"}}})
    r = gitray.run("apply", str(p2), "--repo", str(repo.path))
    assert r.returncode == 1, output(r)
    assert "stale plan" in r.stderr and f"ConfigMap {namespace}/cfg" in r.stderr
    assert "Traceback" not in r.stderr
    assert cm_value(testenv, namespace, "cfg") == "v1"  # nothing applied

    p3 = tmp_path / "p3.json"
    assert gitray.run("plan", "--repo", str(repo.path), "--out", str(p3)).returncode == 0
    repo.commit("v3", {"cfg.yaml": dump(configmap(namespace, "cfg", "v3"))})
    r = gitray.run("apply", str(p3), "--repo", str(repo.path))
    assert r.returncode == 1 and "the plan is for revision" in r.stderr, output(r)
    repo.git("reset", "-q", "--hard", "HEAD~1")
    r = gitray.run("apply", str(p3), "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    assert cm_value(testenv, namespace, "cfg") == "v2"


def test_a_corrupt_plan_file_is_a_clear_error(tools: tuple[GitOpsRepo, Gitray],
                                              tmp_path: Path, namespace: str) -> None:
    repo, gitray = tools
    repo.commit("v1", {"cfg.yaml": dump(configmap(namespace, "cfg", "v1"))})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"formatVersion": 1, "revision": "x"}))
    r = gitray.run("apply", str(bad), "--repo", str(repo.path))
    assert r.returncode == 1 and "is not a valid gitray plan" in r.stderr, output(r)


def test_pruning_and_an_empty_revision(testenv: TestEnv, namespace: str,
                                       tools: tuple[GitOpsRepo, Gitray]) -> None:
    repo, gitray = tools
    repo.commit("two", {"gitray.yaml": gitray_config(namespace=namespace),
                        "a.yaml": dump(configmap(namespace, "a", "1")),
                        "b.yaml": dump(configmap(namespace, "b", "1"))})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    repo.commit("drop b", {"b.yaml": None})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0 and "delete-object b" in r.stdout, output(r)
    assert cm_value(testenv, namespace, "b") is None
    assert cm_value(testenv, namespace, "a") == "1"

    repo.commit("empty", {"a.yaml": None})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0 and "no workloads: nothing is pruned" in r.stdout, output(r)
    assert cm_value(testenv, namespace, "a") == "1"
    r = gitray.run("apply", "--repo", str(repo.path), "--yes", "--set", "allowEmpty=true")
    assert r.returncode == 0, output(r)
    assert cm_value(testenv, namespace, "a") is None


def test_raycluster_create_autoscaler_replicas_update_and_prune(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    from ruamel.yaml import YAML

    repo, gitray = tools
    doc = YAML(typ="safe", pure=True).load(EXAMPLE_CLUSTER.read_text())
    doc["metadata"]["namespace"] = namespace
    repo.commit("cluster", {"gitray.yaml": gitray_config(namespace=namespace),
                            "cluster.yaml": dump(doc)})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    name = doc["metadata"]["name"]

    def live() -> dict[str, Any]:
        return dict(testenv.custom.get_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayclusters", name))

    assert live()["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gitray"
    # The autoscaler (here: another writer) changes replicas: not a diff for gitray.
    spec = live()["spec"]
    spec["workerGroupSpecs"][0]["replicas"] = 2
    testenv.custom.patch_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", name,
        {"spec": {"workerGroupSpecs": spec["workerGroupSpecs"]}})
    r = gitray.run("plan", "--repo", str(repo.path), "--detailed-exitcode")
    assert r.returncode == 0 and "No changes." in r.stdout, output(r)

    head = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["image"] = NEW_IMAGE
    repo.commit("image", {"cluster.yaml": dump(doc)})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0 and "update-cluster" in r.stdout, output(r)
    after = live()["spec"]
    assert after["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == \
        NEW_IMAGE
    assert after["workerGroupSpecs"][0]["replicas"] == 2  # the autoscaler's value is kept

    repo.commit("remove", {"cluster.yaml": None,
                           "keep.yaml": dump(configmap(namespace, "keep", "1"))})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0 and f"delete-cluster {name}" in r.stdout, output(r)
    wait_for(lambda: not testenv.custom.list_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters")["items"] or None, timeout=60)


def test_a_rayjob_spec_runs_once(testenv: TestEnv, namespace: str,
                                 tools: tuple[GitOpsRepo, Gitray]) -> None:
    """Create the run and wait for it (bounded): a wait that runs out ends with a clear
    timeout; the next apply waits for the same run (never a second one) until KubeRay reports
    it SUCCEEDED — a real Ray job, in real pods, submitted by KubeRay's submitter."""
    repo, gitray = tools
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "pi", "namespace": namespace},
           "spec": {"entrypoint": "python -c 'print(6 * 7)'",
                    "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": {
                        "spec": {"containers": [{"name": "ray-head",
                                                 "image": "rayproject/ray:2.60.0"}]}}}}}}
    repo.commit("job", {"gitray.yaml": gitray_config(namespace=namespace, rayJob={"timeout": "5s"}),
                        "job.yaml": dump(job)})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 1 and "not finished after 5 s" in r.stderr, output(r)
    runs = testenv.custom.list_namespaced_custom_object("ray.io", "v1", namespace,
                                                        "rayjobs")["items"]
    assert [j["metadata"]["name"].startswith("pi-") for j in runs] == [True]
    run = runs[0]["metadata"]["name"]
    r = gitray.run("plan", "--repo", str(repo.path))
    assert "create-job" not in r.stdout and "is in progress" not in r.stderr
    assert f"wait for run {run}" in r.stdout, output(r)

    repo.commit("longer wait", {"gitray.yaml": gitray_config(namespace=namespace,
                                                             rayJob={"timeout": "10m"})})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0 and "create-job" not in r.stdout, output(r)
    (done,) = testenv.custom.list_namespaced_custom_object("ray.io", "v1", namespace,
                                                           "rayjobs")["items"]
    assert done["metadata"]["name"] == run
    assert done["status"]["jobStatus"] == "SUCCEEDED", done["status"]


def test_live_state_is_read_with_a_constant_number_of_requests(
        testenv: TestEnv, namespace: str) -> None:
    kube = Kube.connect(KubeSettings(kubeconfig=testenv.kubeconfig))
    config = Config()

    def cost(n: int) -> int:
        workloads = [Workload(ObjectKey("ConfigMap", namespace, f"c{i}"), "v1",
                              configmap(namespace, f"c{i}", "x"), SourceLocation("f"))
                     for i in range(n)]
        for obj in materialize(workloads, config).objects:
            kube.apply(obj.body)
        before = kube.requests
        state = read_live_state(kube, config)
        assert len([o for o in state.objects if o.namespace == namespace]) == n
        return kube.requests - before

    try:
        assert cost(2) == cost(12)
    finally:
        kube.close()


def test_an_executor_with_an_old_epoch_cannot_act(testenv: TestEnv, namespace: str) -> None:
    old_kube = Kube.connect(KubeSettings(kubeconfig=testenv.kubeconfig))
    new_kube = Kube.connect(KubeSettings(kubeconfig=testenv.kubeconfig))
    fast = {"namespace": namespace, "lease_duration_s": 2, "renew_deadline_s": 1.5,
            "retry_period_s": 0.5}
    old = Lease(old_kube, LeaseSettings(identity="old", **fast))  # type: ignore[arg-type]
    new = Lease(new_kube, LeaseSettings(identity="new", **fast))  # type: ignore[arg-type]
    try:
        old.acquire(5)
        time.sleep(2.5)  # the old leader stops renewing (as if paused)
        new.acquire(10)
        assert new.epoch == old.epoch + 1
        workload = Workload(ObjectKey("ConfigMap", namespace, "fenced"), "v1",
                            configmap(namespace, "fenced", "x"), SourceLocation("f"))
        plan = compute_plan([workload], materialize([], Config()), Config(), revision="r",
                            against="live", now=__import__("datetime").datetime.now())
        executor = Executor(Actions(old_kube, Resolver(old_kube, DashboardMode.POD_IP), old), old,
                            Config(), ProgressStore(old_kube, namespace, "gitray", old))
        with pytest.raises(LeaseLostError):
            executor.run_workload(plan.workloads[0], "r")
        assert cm_value(testenv, namespace, "fenced") is None
        records = testenv.core.list_namespaced_config_map(
            namespace, label_selector="gitray.io/role=progress").items
        assert records == []
    finally:
        old_kube.close()
        new_kube.close()


def test_a_freeze_window_holds_apply_an_override_is_recorded_and_status_watches(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    repo, gitray = tools
    always = {"name": "always", "schedule": "* * * * *", "duration": "1h"}
    repo.commit("frozen", {"gitray.yaml": gitray_config(namespace=namespace,
                                                        freezeWindows=[always]),
                           "cfg.yaml": dump(configmap(namespace, "cfg", "v1"))})
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    assert "note: held: freeze window always (all changes) until " in r.stdout, output(r)
    r = gitray.run("apply", "--yes", "--repo", str(repo.path))
    assert r.returncode == 1, output(r)
    assert f"{namespace}/ConfigMap/cfg not run: held: freeze window always" in r.stderr, output(r)
    assert "--override-freeze REASON" in r.stderr and "Traceback" not in r.stderr
    assert cm_value(testenv, namespace, "cfg") is None  # nothing applied

    r = gitray.run("apply", "--yes", "--repo", str(repo.path), "--override-freeze",
                   "hotfix for incident 42")
    assert r.returncode == 0, output(r)
    assert cm_value(testenv, namespace, "cfg") == "v1"
    record = load_record(testenv.kubeconfig, namespace, ObjectKey("ConfigMap", namespace, "cfg"))
    assert record is not None and record.state.value == "succeeded"
    assert "freeze window always overridden: hotfix for incident 42" in record.plan.notes

    # gitray status --watch: a table again and again (no terminal: one block after another)
    # until Ctrl-C, which ends it cleanly
    watching = gitray.popen("status", "--repo", str(repo.path), "--watch", "0.5")
    seen: list[str] = []
    try:
        assert watching.stdout is not None
        deadline = time.monotonic() + 120
        while sum("gitray status" in line for line in seen) < 2 and time.monotonic() < deadline:
            line = watching.stdout.readline()
            if not line:
                break
            seen.append(line)
    finally:
        watching.send_signal(signal.SIGINT)
        rest, _ = watching.communicate(timeout=30)
    text = "".join(seen) + rest
    assert sum(line.startswith("every 0.5 s: gitray status") for line in text.splitlines()) \
        >= 2, text
    assert any(line.startswith(f"{namespace}/ConfigMap/cfg") and "succeeded" in line
               for line in text.splitlines()), text
    assert watching.returncode == 0 and "Traceback" not in text, text


def test_a_suspended_workload_is_not_applied_until_resumed(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    repo, gitray = tools
    repo.commit("v1", {"gitray.yaml": gitray_config(namespace=namespace),
                       "cfg.yaml": dump(configmap(namespace, "cfg", "v1")),
                       "other.yaml": dump(configmap(namespace, "other", "v1"))})
    workload = f"{namespace}/ConfigMap/cfg"
    r = gitray.run("suspend", workload)
    assert r.returncode == 0 and f"{workload} suspended" in r.stdout, output(r)
    r = gitray.run("suspend", workload)
    assert r.returncode == 0 and "was already suspended" in r.stdout, output(r)
    r = gitray.run("apply", "--yes", "--repo", str(repo.path))
    assert r.returncode == 1, output(r)
    assert f"{workload} not run: suspended by " in r.stderr, output(r)
    assert cm_value(testenv, namespace, "cfg") is None  # held
    assert cm_value(testenv, namespace, "other") == "v1"  # the rest is applied
    r = gitray.run("status", "--repo", str(repo.path))
    assert r.returncode == 0 and f"{workload}: suspended by " in r.stdout, output(r)
    # the control is no live object: it never shows up in a plan
    r = gitray.run("plan", "--repo", str(repo.path))
    assert "gitray-control-" not in r.stdout, output(r)

    r = gitray.run("resume", workload)
    assert r.returncode == 0 and f"{workload} resumed" in r.stdout, output(r)
    r = gitray.run("apply", "--yes", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    assert cm_value(testenv, namespace, "cfg") == "v1"
    # nothing failed: nothing to retry, said in one line
    r = gitray.run("retry", workload)
    assert r.returncode == 1 and "nothing to retry" in r.stderr, output(r)
    assert "its run is succeeded" in r.stderr and "Traceback" not in r.stderr
