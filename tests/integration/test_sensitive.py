"""Issue 25 against the real environment (real API server, KubeRay operator, Ray pods on the
real node, real Git repositories):

- a Secret written with ``stringData`` does not drift against the API server's ``data``, and
  its values never reach the daemon's logs, the Git host's statuses and PR comment, the plan
  views, a saved plan file, run records or Events — while a saved plan still applies them;
- changing examples-repo's RayJob script starts a new run whose logs show the new output;
- a RayJob with a ``DeleteSelf`` rule runs once across drift passes and a later commit.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from testenv.githost.server import GitHost
from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump, gitray_config
from tests.integration.chaos import Replica, start_replica
from tests.integration.gitops import REPO_ROOT, GitOpsRepo, Gitray, output

STATUS_TOKEN = "stok" + secrets.token_hex(12)
PR = 25
PI_EXAMPLE = REPO_ROOT / "examples-repo" / "ray-jobs" / "pi-estimate.yaml"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def forms(values: list[str]) -> list[str]:
    """Each value plain and base64 (with and without padding, as a cut line might show)."""
    return [f for v in values for f in (v, b64(v), b64(v).rstrip("="))]


def secret(ns: str, password: str, token: str) -> str:
    return dump({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                 "metadata": {"name": "db", "namespace": ns},
                 "stringData": {"password": password}, "data": {"token": b64(token)}})


def configmap(ns: str, name: str, value: str) -> str:
    return dump({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": name, "namespace": ns}, "data": {"value": value}})


def live_secret(env: TestEnv, ns: str) -> tuple[dict[str, str], str]:
    s = env.core.read_namespaced_secret("db", ns)
    data = {k: base64.b64decode(v).decode() for k, v in (s.data or {}).items()}
    return data, str(s.metadata.resource_version)


@pytest.fixture
def host() -> Iterator[GitHost]:
    with GitHost(token=STATUS_TOKEN) as h:
        h.add_issue(PR)
        yield h


def push(work: GitOpsRepo, host: GitHost | None, message: str,
         files: dict[str, str | None]) -> str:
    sha = work.commit(message, files)
    if host is not None:
        host.add_commit(sha)
    work.git("push", "-q", "origin", "main")
    return sha


def synced(sync: Replica, sha: str) -> bool:
    return sync.metric("gitray_last_synced_revision_info", f'revision="{sha}"') == 1


def drift_passes(sync: Replica) -> float:
    return sync.metric("gitray_sync_duration_seconds_count", 'trigger="drift"') or 0.0


def test_a_secret_does_not_drift_and_its_values_never_leave_gitray(
        testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo], host: GitHost,
        tmp_path: Path) -> None:
    ns = namespace
    bare, work = remote
    values = ["hunter2-old-" + secrets.token_hex(6), "s3cr3t-NEW-" + secrets.token_hex(6),
              "third-" + secrets.token_hex(6), "tok-" + secrets.token_hex(8)]
    old, new, third, token = values
    config = gitray_config(namespace=ns, supportingKinds=["ConfigMap", "Secret"], status={
        "provider": "github", "url": host.url, "repository": "acme/ray-gitops"})
    first = push(work, host, "first", {"gitray.yaml": config, "db.yaml": secret(ns, old, token)})
    sync = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "sensitive",
                         extra=("--drift-every", "1", "--log-level", "debug"),
                         env={"GITRAY_STATUS_TOKEN": STATUS_TOKEN, "NO_COLOR": "1"})
    channels: dict[str, str] = {}
    try:
        wait_for(lambda: synced(sync, first) or None, timeout=120, what="first sync")
        data, version = live_secret(testenv, ns)
        assert data == {"password": old, "token": token}

        # drift passes against the API server's data: nothing is applied again
        passes = drift_passes(sync)
        wait_for(lambda: drift_passes(sync) >= passes + 3 or None, timeout=60,
                 what="3 drift passes")
        assert live_secret(testenv, ns)[1] == version, "the Secret was applied again"
        assert sync.metric("gitray_steps_total", 'result="ok",type="apply-object"') == 1

        second = push(work, host, "new password", {"db.yaml": secret(ns, new, token)})
        wait_for(lambda: synced(sync, second) or None, timeout=120, what="second sync")
        assert live_secret(testenv, ns)[0]["password"] == new
        wait_for(lambda: any(s["state"] == "success" for s in
                             host.statuses("github", second, "gitray")) or None, timeout=30)
    finally:
        sync.terminate()
        channels["daemon log"] = sync.logs()

    # the CLI: every plan view, a PR comment, a saved plan applied from the pinned revision
    gitray = Gitray(testenv.kubeconfig, ns)
    work.commit("third password", {"db.yaml": secret(ns, third, token)})
    repo = str(work.path)
    for fmt in ("text", "markdown", "json"):
        r = gitray.run("plan", "--repo", repo, "--format", fmt, "--lease-namespace", ns)
        assert r.returncode == 0, output(r)
        channels[f"plan {fmt}"] = r.stdout + r.stderr
    assert "~ data.password: (sensitive value changed)" in channels["plan text"]
    assert "~ data.password: (sensitive value changed)" in channels["plan markdown"]
    saved = tmp_path / "plan.json"
    r = subprocess.run(gitray.argv("plan", "--repo", repo, "--out", str(saved), "--comment",
                                   "--pr", str(PR), "--lease-namespace", ns),
                       capture_output=True, text=True, check=False, timeout=300,
                       env={**gitray.env(), "GITRAY_STATUS_TOKEN": STATUS_TOKEN},
                       stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
    assert r.returncode == 0 and host.comments("github", PR), output(r)
    channels["plan --comment"] = r.stdout + r.stderr
    assert "sensitive value changed" in host.comments("github", PR)[0]["body"]
    channels["saved plan"] = saved.read_text()
    assert "gitray:sensitive:sha256:" in channels["saved plan"]
    r = gitray.run("apply", str(saved), "--repo", repo)
    assert r.returncode == 0 and "is current" in r.stdout, output(r)
    channels["apply"] = r.stdout + r.stderr
    assert live_secret(testenv, ns)[0] == {"password": third, "token": token}
    r = gitray.run("status", "--repo", repo)
    channels["status"] = r.stdout + r.stderr

    channels["commit statuses"] = json.dumps(host.store.statuses)
    channels["PR comments"] = json.dumps(host.store.comments)
    api = testenv.api_client
    channels["ConfigMaps (run records)"] = "\n".join(
        json.dumps(api.sanitize_for_serialization(cm))
        for cm in testenv.core.list_namespaced_config_map(ns).items)
    channels["Events"] = "\n".join(
        json.dumps(api.sanitize_for_serialization(e))
        for e in testenv.core.list_namespaced_event(ns).items)
    assert "gitray-run-" in channels["ConfigMaps (run records)"]
    assert "apply-object db" in channels["daemon log"]
    assert {s["state"] for s in host.store.statuses} >= {"pending", "success"}
    # the search finds the values where they belong: in the Secret itself
    stored = json.dumps(api.sanitize_for_serialization(testenv.core.read_namespaced_secret(
        "db", ns)))
    assert all(form in stored for form in forms([third, token])
               if form not in (third, token))
    found = [f"{name}: {form[:6]}…" for name, text in channels.items()
             for form in forms(values) if form in text]
    assert not found, found


def load_example(ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    configmap_doc, job = YAML(typ="safe", pure=True).load_all(PI_EXAMPLE.read_text())
    for doc in (configmap_doc, job):
        doc["metadata"]["namespace"] = ns
    return configmap_doc, job


def run_logs(env: TestEnv, ns: str, run: str) -> str:
    """What the run's entrypoint printed: the logs of KubeRay's submitter Job of that name."""
    return env.kubectl("-n", ns, "logs", f"job/{run}")


def rayjobs(env: TestEnv, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = env.custom.list_namespaced_custom_object(
        "ray.io", "v1", ns, "rayjobs")["items"]
    return sorted(items, key=lambda j: str(j["metadata"]["creationTimestamp"]))


def test_changing_the_example_rayjob_script_starts_a_new_run(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    repo = GitOpsRepo(tmp_path / "repo")
    gitray = Gitray(testenv.kubeconfig, ns)
    code, job = load_example(ns)
    repo.commit("pi", {"gitray.yaml": gitray_config(namespace=ns), "code.yaml": dump(code),
                       "job.yaml": dump(job)})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes", timeout=1200)
    assert r.returncode == 0, output(r)
    (first,) = [j["metadata"]["name"] for j in rayjobs(testenv, ns)]
    assert "pi is about" in run_logs(testenv, ns, first)

    script = code["data"]["pi_estimate.py"]
    changed = script.replace('print(f"pi is about', 'print(f"pi (second version) is about')
    assert changed != script
    code["data"]["pi_estimate.py"] = changed
    repo.commit("a new script", {"code.yaml": dump(code)})
    r = gitray.run("plan", "--repo", str(repo.path), "--lease-namespace", ns)
    assert r.returncode == 0, output(r)
    assert "a new run because ConfigMap pi-estimate-code, which its pods use, changed" \
        in r.stdout, output(r)
    r = gitray.run("apply", "--repo", str(repo.path), "--yes", timeout=1200)
    assert r.returncode == 0, output(r)
    names = [j["metadata"]["name"] for j in rayjobs(testenv, ns)]
    assert first in names and len(names) == 2, names
    (second,) = [n for n in names if n != first]
    assert "pi (second version) is about" in run_logs(testenv, ns, second)
    r = gitray.run("plan", "--repo", str(repo.path), "--lease-namespace", ns,
                   "--detailed-exitcode")
    assert r.returncode == 0, output(r)  # each run once


def self_deleting_job(ns: str) -> str:
    return dump({"apiVersion": "ray.io/v1", "kind": "RayJob",
                 "metadata": {"name": "once", "namespace": ns},
                 "spec": {"entrypoint": "python -c 'print(6 * 7)'",
                          "deletionStrategy": {"deletionRules": [
                              {"policy": "DeleteSelf",
                               "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}}]},
                          "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {},
                                             "template": {"spec": {"containers": [{
                                                 "name": "ray-head",
                                                 "image": "rayproject/ray:2.60.0"}]}}}}}})


def test_a_rayjob_that_deletes_itself_runs_once(
        testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo],
        tmp_path: Path) -> None:
    ns = namespace
    bare, work = remote
    first = push(work, None, "job", {"gitray.yaml": gitray_config(namespace=ns),
                                     "job.yaml": self_deleting_job(ns)})
    sync = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "once",
                         extra=("--drift-every", "1"))
    try:
        wait_for(lambda: synced(sync, first) or None, timeout=600, what="the run")
        assert sync.metric("gitray_steps_total", 'result="ok",type="wait-job"') == 1
        wait_for(lambda: not rayjobs(testenv, ns) or None, timeout=120,
                 what="KubeRay deleting the finished RayJob")
        passes = drift_passes(sync)
        wait_for(lambda: drift_passes(sync) >= passes + 3 or None, timeout=120,
                 what="3 drift passes")
        second = push(work, None, "unrelated", {"cm.yaml": configmap(ns, "other", "1")})
        wait_for(lambda: synced(sync, second) or None, timeout=120, what="second sync")
        passes = drift_passes(sync)
        wait_for(lambda: drift_passes(sync) >= passes + 2 or None, timeout=120,
                 what="drift passes after the commit")
        assert sync.metric("gitray_steps_total", 'result="ok",type="create-job"') == 1
        assert not rayjobs(testenv, ns)
        logs = sync.logs()
        assert logs.count("create-job once-") == 1, logs[-3000:]
        assert "finished: SUCCEEDED" in logs
    finally:
        sync.terminate()
    r = Gitray(testenv.kubeconfig, ns).run("status", "--repo", str(work.path))
    assert r.returncode == 0, output(r)
    assert "SUCCEEDED" in r.stdout and "(recorded; the RayJob is gone)" in r.stdout, output(r)


def small_cluster(ns: str, name: str, revision: int, recreate: bool) -> str:
    from testenv.helpers import real_raycluster_spec

    spec = real_raycluster_spec(workers=0)
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [*head["env"], {"name": "GITRAY_TEST_REVISION", "value": str(revision)}]
    if recreate:
        spec["upgradeStrategy"] = {"type": "Recreate"}
    return dump({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                 "metadata": {"name": name, "namespace": ns}, "spec": spec})


def test_a_raycluster_template_change_is_recreated_only_when_it_asks_for_it(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """The README's RayCluster table, checked against the real KubeRay operator: a pod-template
    change recreates the pods under upgradeStrategy Recreate (as the plan says); without it the
    plan warns, and the running head pod is indeed kept."""
    ns = namespace
    repo = GitOpsRepo(tmp_path / "repo")
    gitray = Gitray(testenv.kubeconfig, ns)

    def files(revision: int) -> dict[str, str | None]:
        return {"keep.yaml": small_cluster(ns, "keep", revision, recreate=False),
                "recreated.yaml": small_cluster(ns, "recreated", revision, recreate=True)}

    repo.commit("clusters", {"gitray.yaml": gitray_config(namespace=ns), **files(1)})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)

    def head_uid(cluster: str) -> str | None:
        pods = [p for p in testenv.cluster_pods(ns, cluster, "head")
                if not p.metadata.deletion_timestamp]
        return str(pods[0].metadata.uid) if len(pods) == 1 else None

    before = {c: wait_for(lambda c=c: head_uid(c), timeout=120, what=f"{c} head pod")
              for c in ("keep", "recreated")}
    repo.commit("a template change", files(2))
    r = gitray.run("plan", "--repo", str(repo.path), "--lease-namespace", ns)
    assert r.returncode == 0, output(r)
    assert f"RayCluster {ns}/keep will be updated (its running pods keep the old template)" \
        in r.stdout, output(r)
    assert "update RayCluster recreated: KubeRay recreates all its pods" in r.stdout, output(r)
    assert [line for line in r.stdout.splitlines() if "WARNING" in line] == [
        "      note: WARNING: the pod template changed, and KubeRay applies a template to pods "
        "it creates later only: the running pods keep the old one until they are recreated; "
        "set spec.upgradeStrategy.type: Recreate to have KubeRay recreate them on such a "
        "change, or delete the pods"], output(r)
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    wait_for(lambda: (head_uid("recreated") or before["recreated"]) != before["recreated"]
             or None, timeout=180, what="KubeRay recreating the head pod of 'recreated'")
    assert head_uid("keep") == before["keep"]  # KubeRay left the running pod alone
