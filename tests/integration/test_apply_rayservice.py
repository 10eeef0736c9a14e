"""`gitray apply` of a RayService against the real environment: real apiserver, KubeRay
operator, kwok pods and real Ray Serve on the head pods (SPEC §3-4, issue 4 acceptance)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gitray.core.config import DashboardMode
from gitray.core.model import ObjectKey
from gitray.engine.apply import desired_from, read_live
from gitray.engine.health import health_by_workload, health_of
from gitray.engine.progress import RecordReader
from gitray.engine.record import Record, RunState
from gitray.git.source import read_snapshot
from gitray.k8s.client import Kube
from gitray.k8s.settings import KubeSettings
from gitray.ray.dashboard import Resolver
from testenv.helpers import TestEnv, get_text, wait_for
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import CALC, GREETER, HELLO, NEW_IMAGE, example_rayservice
from tests.integration.gitops import GitOpsRepo, Gitray, output

SVC = "serve-demo"


class Cluster:
    """Reads of the real cluster state the assertions are about."""

    def __init__(self, env: TestEnv, namespace: str) -> None:
        self.env, self.ns = env, namespace

    def rayclusters(self) -> dict[str, dict[str, Any]]:
        items = self.env.custom.list_namespaced_custom_object(
            "ray.io", "v1", self.ns, "rayclusters")["items"]
        return {i["metadata"]["name"]: i for i in items
                if not i["metadata"].get("deletionTimestamp")}

    def selector(self, service: str) -> dict[str, str]:
        return dict(self.env.core.read_namespaced_service(service, self.ns).spec.selector)

    def cluster_ip(self, service: str) -> str:
        return str(self.env.core.read_namespaced_service(service, self.ns).spec.cluster_ip)

    def head_ip(self, cluster: str) -> str:
        pod = self.env.wait_head_pod(self.ns, cluster)
        return str(pod.status.pod_ip)

    # (get_text: the helpers' answer timeout, a bound on a hang on a fully busy machine)
    def serve_apps(self, cluster: str) -> dict[str, Any]:
        url = f"http://{self.head_ip(cluster)}:8265/api/serve/applications/"
        return dict(json.loads(get_text(url))["applications"])

    def http(self, cluster: str, path: str) -> str:
        return get_text(f"http://{self.head_ip(cluster)}:8000{path}")

    def record(self, key: ObjectKey) -> Record | None:
        kube = Kube.connect(KubeSettings(kubeconfig=self.env.kubeconfig))
        try:
            return RecordReader(kube, self.ns, "gitray").load(key)
        finally:
            kube.close()


@pytest.fixture
def env(testenv: TestEnv, namespace: str, tmp_path: Path) -> tuple[GitOpsRepo, Gitray, Cluster]:
    return (GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, namespace),
            Cluster(testenv, namespace))


def apply(gitray: Gitray, repo: GitOpsRepo, *extra: str) -> str:
    result = gitray.run("apply", "--repo", str(repo.path), "--yes", *extra)
    assert result.returncode == 0, output(result)
    return result.stdout


def rollout(repo: GitOpsRepo, gitray: Gitray, ns: str, delay: str = "10s", **spec: Any) -> str:
    repo.commit("first rollout", {"gitray.yaml": gitray_config(delay, ns),
                                  "services/serve-demo.yaml": dump(example_rayservice(ns, **spec))})
    return apply(gitray, repo)


def only_cluster(cluster: Cluster) -> str:
    (name,) = cluster.rayclusters()
    return name


def test_first_rollout_of_the_examples_rayservice(env: tuple[GitOpsRepo, Gitray, Cluster],
                                                  namespace: str) -> None:
    repo, gitray, cluster = env
    out = rollout(repo, gitray, namespace)
    name = only_cluster(cluster)
    assert name.startswith(f"{SVC}-") and "6/6 create-service serve-demo-serve-svc" in out
    labels = cluster.rayclusters()[name]["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "gitray"
    assert not [k for k in labels if k.startswith("ray.io/originated-from")]
    assert cluster.selector(f"{SVC}-head-svc") == {"ray.io/cluster": name,
                                                    "ray.io/node-type": "head"}
    serve_selector = cluster.selector(f"{SVC}-serve-svc")
    assert serve_selector == {"ray.io/cluster": name, "gitray.io/serve": "true"}
    selected = cluster.env.core.list_namespaced_pod(
        namespace, label_selector=",".join(f"{k}={v}" for k, v in serve_selector.items())).items
    # the pods whose Serve proxy answered when the Service was created: the head, and a
    # worker too when its proxy was up by then (Serve runs one on every node: a race that a
    # quiet machine wins and a loaded one loses, so both outcomes are right)
    assert "head" in [p.metadata.labels["ray.io/node-type"] for p in selected], selected
    for pod in selected:
        assert pod.metadata.labels["ray.io/cluster"] == name
        assert "success" in get_text(f"http://{pod.status.pod_ip}:8000/-/healthz")
    apps = cluster.serve_apps(name)
    assert {n: a["status"] for n, a in apps.items()} == {"greeter": "RUNNING", "calc": "RUNNING"}
    assert cluster.http(name, "/greet?name=Ada") == "Hello, Ada!"
    # A second apply finds nothing to do: no permanent diff from server defaults.
    plan = gitray.run("plan", "--repo", str(repo.path), "--detailed-exitcode")
    assert plan.returncode == 0, output(plan)
    assert "No changes." in plan.stdout
    health_read_by_one_list(cluster.env, repo, namespace)


class CountingKube:
    """The real client, its LISTs and GETs counted (a spy: every request reaches the API
    server)."""

    def __init__(self, kube: Kube) -> None:
        self.kube, self.calls = kube, Counter[str]()

    def list(self, api_version: str, kind: str, **kw: Any) -> Any:
        self.calls[f"list {kind}"] += 1
        return self.kube.list(api_version, kind, **kw)

    def get_or_none(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        self.calls[f"get {kind}"] += 1
        return self.kube.get_or_none(api_version, kind, namespace, name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


def health_read_by_one_list(env: TestEnv, repo: GitOpsRepo, ns: str) -> None:
    """The health line of the RayService from Serve on its head, in the two modes that reach a
    dashboard from this host (pod-ip; proxy, the default outside a cluster), with its
    dashboard located by one LIST of the namespace (head pods; Services), not a read per
    cluster."""
    kube = Kube.connect(KubeSettings(kubeconfig=env.kubeconfig))
    try:
        desired = desired_from(read_snapshot(str(repo.path)), {})
        live = read_live(kube, desired)
        key = ObjectKey("RayService", ns, SVC)
        for mode, listed in ((DashboardMode.POD_IP, "list Pod"),
                             (DashboardMode.PROXY, "list Service")):
            spy = CountingKube(kube)
            lines = health_by_workload(spy, Resolver(spy, mode), [key], live)  # type: ignore[arg-type]
            assert lines == {key: "calc RUNNING, greeter RUNNING"}, (mode, lines)
            assert spy.calls == {listed: 1}, (mode, spy.calls)
        # the daemon's read: the live objects of the workloads asked, one namespace at a time
        assert health_of(kube, Resolver(kube, DashboardMode.PROXY), desired) == \
            {key: "calc RUNNING, greeter RUNNING"}
    finally:
        kube.close()


def test_upgrade_serve_only_change_blue_green_rollback_and_deletion(
        env: tuple[GitOpsRepo, Gitray, Cluster], namespace: str) -> None:
    repo, gitray, cluster = env
    rollout(repo, gitray, namespace, delay="25s", serve=serve_config(GREETER))
    blue = only_cluster(cluster)
    head_ip = cluster.cluster_ip(f"{SVC}-head-svc")
    serve_ip = cluster.cluster_ip(f"{SVC}-serve-svc")

    # Serve-only change: deployed to the active cluster only, no new cluster.
    repo.commit("add calc", {"services/serve-demo.yaml": dump(example_rayservice(
        namespace, serve=serve_config(GREETER, CALC)))})
    out = apply(gitray, repo)
    assert "deploy-serve" in out and "create-cluster" not in out
    assert list(cluster.rayclusters()) == [blue]
    assert set(cluster.serve_apps(blue)) == {"greeter", "calc"}

    # Image + Serve config together: blue-green; the new config reaches only the new cluster.
    repo.commit("new image and hello app", {"services/serve-demo.yaml": dump(example_rayservice(
        namespace, image=NEW_IMAGE, serve=serve_config(GREETER, CALC, HELLO)))})
    out = apply(gitray, repo)
    green = next(n for n in cluster.rayclusters() if n != blue)
    assert set(cluster.serve_apps(blue)) == {"greeter", "calc"}  # old config unchanged
    assert set(cluster.serve_apps(green)) == {"greeter", "calc", "hello"}
    assert cluster.selector(f"{SVC}-serve-svc")["ray.io/cluster"] == green
    assert cluster.selector(f"{SVC}-head-svc")["ray.io/cluster"] == green
    assert cluster.cluster_ip(f"{SVC}-head-svc") == head_ip  # selector-only switches
    assert cluster.cluster_ip(f"{SVC}-serve-svc") == serve_ip
    record = cluster.record(ObjectKey("RayService", namespace, SVC))
    assert record is not None and record.state is RunState.SUCCEEDED
    order = [(s.type, s.finished_at) for s in record.steps]
    types = [t for t, _ in order]
    assert types == ["create-cluster", "wait-cluster-ready", "deploy-serve",
                     "wait-serve-running", "switch-service", "switch-service",
                     "schedule-cluster-deletion"]
    switched = [s for s in record.plan.steps if s.type.value == "switch-service"]
    assert [s.params["role"] for s in switched] == ["head", "serve"]
    running_at = order[3][1]
    assert all(f >= running_at for t, f in order[4:6])
    assert "gitray.io/delete-after" in cluster.rayclusters()[blue]["metadata"]["annotations"]

    # Instant rollback: Git goes back while blue still awaits deletion: no new cluster.
    repo.commit("revert", {"services/serve-demo.yaml": dump(example_rayservice(
        namespace, serve=serve_config(GREETER, CALC)))})
    out = apply(gitray, repo)
    assert "create-cluster" not in out and "cancel-cluster-deletion" in out
    assert set(cluster.rayclusters()) == {blue, green}
    assert cluster.selector(f"{SVC}-serve-svc")["ray.io/cluster"] == blue
    assert "gitray.io/delete-after" not in (
        cluster.rayclusters()[blue]["metadata"].get("annotations") or {})

    # The deadline is persisted on green; once due, a later pass deletes it.
    deadline = cluster.rayclusters()[green]["metadata"]["annotations"]["gitray.io/delete-after"]
    assert deadline.endswith("Z")
    time.sleep(27)
    out = apply(gitray, repo)
    assert f"delete-cluster {green}" in out
    wait_for(lambda: list(cluster.rayclusters()) == [blue] or None, timeout=60)


def test_a_failing_serve_app_never_gets_traffic(env: tuple[GitOpsRepo, Gitray, Cluster],
                                               namespace: str) -> None:
    repo, gitray, cluster = env
    rollout(repo, gitray, namespace, serve=serve_config(GREETER))
    blue = only_cluster(cluster)
    repo.commit("broken app", {"services/serve-demo.yaml": dump(example_rayservice(
        namespace, image=NEW_IMAGE,
        serve=serve_config(GREETER, ("broken", "/broken", "serve_apps.missing:app"))))})
    result = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert result.returncode == 1, output(result)
    assert "DEPLOY_FAILED" in result.stderr and "serve_apps.missing" in result.stderr
    assert "Traceback (most recent call last)" not in result.stderr.split("DEPLOY_FAILED")[0]
    assert cluster.selector(f"{SVC}-serve-svc")["ray.io/cluster"] == blue
    assert cluster.selector(f"{SVC}-head-svc")["ray.io/cluster"] == blue
    wait_for(lambda: list(cluster.rayclusters()) == [blue] or None, timeout=90)
    assert cluster.http(blue, "/greet?name=Bo") == "Hello, Bo!"
    record = cluster.record(ObjectKey("RayService", namespace, SVC))
    assert record is not None and record.state is RunState.FAILED
    assert "DEPLOY_FAILED" in record.reason


def _run_until(gitray: Gitray, repo: GitOpsRepo, marker: str) -> list[str]:
    """Start an apply and SIGKILL it as soon as a line containing ``marker`` appears."""
    proc = gitray.popen("apply", "--repo", str(repo.path), "--yes")
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if marker in line:
            proc.kill()
            break
    proc.wait(timeout=30)
    assert any(marker in line for line in lines), "".join(lines)
    return lines


def test_sigkill_after_deploy_serve_resumes_at_wait_serve_running(
        env: tuple[GitOpsRepo, Gitray, Cluster], namespace: str) -> None:
    repo, gitray, cluster = env
    rollout(repo, gitray, namespace, serve=serve_config(GREETER))
    blue = only_cluster(cluster)
    repo.commit("upgrade", {"services/serve-demo.yaml": dump(example_rayservice(
        namespace, image=NEW_IMAGE, serve=serve_config(GREETER)))})
    _run_until(gitray, repo, "3/7 deploy-serve")
    pending = {n: c["metadata"]["uid"] for n, c in cluster.rayclusters().items() if n != blue}
    assert len(pending) == 1
    out = apply(gitray, repo, "--lease-timeout", "40")
    assert "resuming an interrupted run at step" in out
    assert "create-cluster" not in out.split("resuming")[1]
    (green,) = pending
    assert cluster.rayclusters()[green]["metadata"]["uid"] == pending[green]  # same cluster
    assert set(cluster.rayclusters()) == {blue, green}  # exactly one pending cluster ever
    assert cluster.selector(f"{SVC}-serve-svc")["ray.io/cluster"] == green


def test_a_revert_mid_upgrade_cancels_it_without_a_third_cluster(
        env: tuple[GitOpsRepo, Gitray, Cluster], namespace: str) -> None:
    repo, gitray, cluster = env
    rollout(repo, gitray, namespace, serve=serve_config(GREETER))
    blue = only_cluster(cluster)
    original = (repo.path / "services/serve-demo.yaml").read_text()
    repo.commit("upgrade", {"services/serve-demo.yaml": dump(example_rayservice(
        namespace, image=NEW_IMAGE, serve=serve_config(GREETER)))})
    _run_until(gitray, repo, "2/7 wait-cluster-ready")
    assert len(cluster.rayclusters()) == 2
    repo.commit("revert", {"services/serve-demo.yaml": original})
    out = apply(gitray, repo, "--lease-timeout", "40")
    assert "cancel-upgrade" in out and "create-cluster" not in out
    wait_for(lambda: list(cluster.rayclusters()) == [blue] or None, timeout=90)
    assert cluster.selector(f"{SVC}-serve-svc")["ray.io/cluster"] == blue


def test_two_applies_at_once_only_one_executes(env: tuple[GitOpsRepo, Gitray, Cluster],
                                               namespace: str) -> None:
    repo, gitray, cluster = env
    repo.commit("first", {"gitray.yaml": gitray_config(namespace=namespace),
                          "services/serve-demo.yaml": dump(example_rayservice(
                              namespace, serve=serve_config(GREETER)))})
    args = ("apply", "--repo", str(repo.path), "--yes", "--lease-timeout", "5")
    first, second = gitray.popen(*args), gitray.popen(*args)
    outs = [p.communicate(timeout=600)[0] for p in (first, second)]
    codes = sorted(p.returncode for p in (first, second))
    assert codes == [0, 1], outs
    loser = outs[[first.returncode, second.returncode].index(1)]
    assert "is held by" in loser and "waiting for the Lease" in loser, loser
    assert len(cluster.rayclusters()) == 1
