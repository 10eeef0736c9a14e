"""RayService fields and RayCronJob against the real environment (issue 13).

- ``upgradeStrategy.type: None`` on the real node: an image change is refused, naming the
  field, and nothing changes; a Serve-only change is deployed in place, no new cluster.
- ``spec.serveService`` (labels, annotations, port) survives a blue-green upgrade, with real
  requests through the Service's ClusterIP on the template's port.
- ``excludeHeadPodFromServeSvc: true``: the serve Service's endpoints are the Ray worker pods
  (real Serve proxies on real workers), never the head.
- ``managedBy`` another controller: gitray leaves the RayService (and what it made for it
  before) alone.
- A RayCronJob applied by gitray runs on its schedule (KubeRay's RayCronJob feature gate).
"""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path
from typing import Any

from testenv.helpers import TestEnv, get_text, wait_for
from testenv.manifests import cluster_spec, dump, gitray_config, serve_config
from testenv.rayservices import CALC, GREETER, HELLO, real_node_rayservice
from tests.integration.gitops import GitOpsRepo, Gitray, output

MANIFEST = "services/serve-demo.yaml"
NONE = {"upgradeStrategy": {"type": "None"}}
OTHER_IMAGE = "localhost/gitray-ray:2.60.0"  # the same local build under another name
GREETING = "hello from gitray testenv"


def _rayclusters(env: TestEnv, ns: str) -> dict[str, dict[str, Any]]:
    items = env.custom.list_namespaced_custom_object("ray.io", "v1", ns, "rayclusters")["items"]
    return {i["metadata"]["name"]: i for i in items if not i["metadata"].get("deletionTimestamp")}


def _what_gitray_owns(env: TestEnv, ns: str) -> dict[str, Any]:
    """The clusters (name, generation, annotations, spec), Services (resourceVersion) and
    Ray pods (uid) of a namespace: anything gitray could have changed."""
    clusters = {n: (c["metadata"]["generation"], c["metadata"].get("annotations"), c["spec"])
                for n, c in _rayclusters(env, ns).items()}
    services = {s.metadata.name: s.metadata.resource_version
                for s in env.core.list_namespaced_service(ns).items}
    pods = sorted(p.metadata.uid for p in env.core.list_namespaced_pod(ns).items)
    return {"clusters": clusters, "services": services, "pods": pods}


def _apply(gitray: Gitray, repo: GitOpsRepo) -> subprocess.CompletedProcess[str]:
    return gitray.run("apply", "--repo", str(repo.path), "--yes")


def test_upgrade_none_refuses_an_image_change_and_deploys_serve_in_place(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    repo.commit("first rollout", {"gitray.yaml": gitray_config("10s", ns),
                                  MANIFEST: dump(real_node_rayservice(ns, **NONE))})
    first = _apply(gitray, repo)
    assert first.returncode == 0, output(first)
    (cluster,) = _rayclusters(testenv, ns)
    before = _what_gitray_owns(testenv, ns)

    # an image change: KubeRay would ignore it under None; gitray refuses it by name
    repo.commit("new image", {MANIFEST: dump(real_node_rayservice(ns, OTHER_IMAGE, **NONE))})
    refused = _apply(gitray, repo)
    assert refused.returncode == 1, output(refused)
    assert refused.stderr.startswith(
        f"{MANIFEST}:2:1: spec.upgradeStrategy.type: None: spec.rayClusterConfig.headGroupSpec"
        ".template.spec.containers[ray-head].image ('rayproject/ray:2.60.0' -> "
        f"'{OTHER_IMAGE}')"), output(refused)
    assert f"cannot be applied in place to the running cluster {cluster}" in refused.stderr
    assert refused.stderr.endswith("gitray: 1 problem found; nothing was applied\n")
    assert "Traceback" not in refused.stderr and refused.stdout == "", output(refused)
    plan = gitray.run("plan", "--repo", str(repo.path))
    assert plan.returncode == 1 and "spec.upgradeStrategy.type: None" in plan.stderr, \
        output(plan)
    assert _what_gitray_owns(testenv, ns) == before

    # a Serve-only change (the image change reverted): in place, on the same cluster and pods
    serve = serve_config(GREETER, CALC, HELLO)
    repo.commit("add hello", {MANIFEST: dump(real_node_rayservice(ns, serve=serve, **NONE))})
    in_place = _apply(gitray, repo)
    assert in_place.returncode == 0, output(in_place)
    assert f"upgradeStrategy None: no new cluster; {cluster} is changed in place" \
        in in_place.stdout, output(in_place)
    assert "create-cluster" not in in_place.stdout and "switch-service" not in in_place.stdout
    after = _what_gitray_owns(testenv, ns)
    assert list(after["clusters"]) == [cluster] and after["pods"] == before["pods"]
    assert after["clusters"][cluster][0] == before["clusters"][cluster][0]  # spec untouched
    svc = testenv.core.read_namespaced_service("serve-demo-serve-svc", ns)
    answer = wait_for(lambda: get_text(f"http://{svc.spec.cluster_ip}:8000/hello"), 60,
                      what="the new app through the serve Service")
    assert answer == GREETING


TEMPLATE = {
    "metadata": {"labels": {"team": "search"},
                 "annotations": {"example.com/owner": "search-team"}},
    "spec": {"ports": [{"name": "serve", "port": 9000, "targetPort": 8000,
                        "protocol": "TCP"}]},
}


def test_a_custom_serve_service_survives_a_blue_green_upgrade(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    repo.commit("first rollout", {
        "gitray.yaml": gitray_config("10s", ns),
        MANIFEST: dump(real_node_rayservice(ns, serveService=TEMPLATE))})
    first = _apply(gitray, repo)
    assert first.returncode == 0, output(first)
    (blue,) = _rayclusters(testenv, ns)

    def check(cluster: str) -> str:
        svc = testenv.core.read_namespaced_service("serve-demo-serve-svc", ns)
        assert svc.metadata.labels["team"] == "search"
        assert svc.metadata.annotations["example.com/owner"] == "search-team"
        assert [(p.name, p.port, p.target_port) for p in svc.spec.ports] == \
            [("serve", 9000, 8000)]
        assert svc.spec.selector["ray.io/cluster"] == cluster
        url = f"http://{svc.spec.cluster_ip}:9000/greet?name=Ada"
        assert wait_for(lambda: get_text(url), 60, what=f"an answer at {url}") == "Hello, Ada!"
        return str(svc.spec.cluster_ip)

    ip = check(blue)
    repo.commit("new image", {MANIFEST: dump(real_node_rayservice(
        ns, OTHER_IMAGE, serveService=TEMPLATE))})
    upgrade = _apply(gitray, repo)
    assert upgrade.returncode == 0, output(upgrade)
    green = next(n for n in _rayclusters(testenv, ns) if n != blue)
    assert check(green) == ip  # the same Service: labels, annotations, port and clusterIP kept
    head = testenv.core.read_namespaced_service("serve-demo-head-svc", ns)
    assert "team" not in (head.metadata.labels or {})  # the template is the serve Service's


def _workers_serve(doc: dict[str, Any]) -> dict[str, Any]:
    """The head offers no CPU to Ray (`num-cpus: 0`), as KubeRay advises with
    excludeHeadPodFromServeSvc: Serve's replicas, and so its proxies, are on the workers. (Left
    at 1 CPU, the replicas may all start on the head before the worker joins, and then no
    worker ever runs a Serve proxy for the serve Service to select.)"""
    head = doc["spec"]["rayClusterConfig"]["headGroupSpec"]
    head["rayStartParams"] = {**head["rayStartParams"], "num-cpus": "0"}
    return doc


def test_exclude_head_pod_from_serve_svc_selects_only_the_ray_workers(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    repo.commit("first rollout", {
        "gitray.yaml": gitray_config("10s", ns),
        MANIFEST: dump(_workers_serve(real_node_rayservice(ns, excludeHeadPodFromServeSvc=True)))})
    first = _apply(gitray, repo)
    assert first.returncode == 0, output(first)
    (cluster,) = _rayclusters(testenv, ns)
    head = testenv.cluster_pods(ns, cluster, "head")
    workers = testenv.cluster_pods(ns, cluster, "worker")
    assert len(head) == 1 and len(workers) == 1
    svc = testenv.core.read_namespaced_service("serve-demo-serve-svc", ns)
    assert svc.spec.selector["ray.io/node-type"] == "worker"
    endpoints = wait_for(lambda: testenv.endpoint_addresses(ns, "serve-demo-serve-svc"), 60,
                         what="serve Service endpoints")
    assert endpoints == [workers[0].status.pod_ip] != [head[0].status.pod_ip]
    url = f"http://{svc.spec.cluster_ip}:8000/greet?name=Ada"
    # answered by the worker's Serve proxy (the only endpoint)
    assert wait_for(lambda: get_text(url), 60, what=f"an answer at {url}") == "Hello, Ada!"


def test_a_rayservice_managed_by_another_controller_is_left_alone(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """gitray ran it first; handed over to MultiKueue (and changed), it is never touched."""
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    repo.commit("ours first", {"gitray.yaml": gitray_config("10s", ns),
                               MANIFEST: dump(real_node_rayservice(ns))})
    first = _apply(gitray, repo)
    assert first.returncode == 0, output(first)
    before = _what_gitray_owns(testenv, ns)
    assert len(before["clusters"]) == 1

    theirs = real_node_rayservice(ns, OTHER_IMAGE, serve_config(GREETER, CALC, HELLO),
                                  managedBy="kueue.x-k8s.io/multikueue")
    repo.commit("handed to MultiKueue, then changed", {MANIFEST: dump(theirs)})
    note = ("spec.managedBy is 'kueue.x-k8s.io/multikueue': managed by another controller, so "
            "gitray leaves it alone: nothing is created, changed or deleted (3 object(s) gitray "
            "made before are kept as they are)")
    plan = gitray.run("plan", "--repo", str(repo.path), "--detailed-exitcode")
    assert plan.returncode == 0, output(plan)  # no changes
    assert note in plan.stdout, output(plan)
    again = _apply(gitray, repo)
    assert again.returncode == 0 and note in again.stdout, output(again)
    assert _what_gitray_owns(testenv, ns) == before


def _cron_job(ns: str) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCronJob",
            "metadata": {"name": "every-minute", "namespace": ns},
            "spec": {"schedule": "* * * * *", "jobTemplate": {
                "entrypoint": "python -c 'print(42)'", "shutdownAfterJobFinishes": True,
                "rayClusterSpec": cluster_spec(replicas=0, min_replicas=0)}}}


def test_a_raycronjob_applied_by_gitray_runs_on_schedule(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """KubeRay's RayCronJob controller (feature gate RayCronJob, testenv/control.py)
    starts a RayJob at the next whole minute after gitray created the RayCronJob; gitray
    status shows the schedule and the runs; removing it from Git prunes it and its runs."""
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    keep = {"apiVersion": "v1", "kind": "ConfigMap",  # so the revision without it is not empty
            "metadata": {"name": "settings", "namespace": ns}, "data": {"k": "v"}}
    repo.commit("nightly", {"gitray.yaml": gitray_config("10s", ns),
                            "jobs/settings.yaml": dump(keep),
                            "jobs/cron.yaml": dump(_cron_job(ns))})
    applied = _apply(gitray, repo)
    assert applied.returncode == 0, output(applied)
    cron = testenv.custom.get_namespaced_custom_object("ray.io", "v1", ns, "raycronjobs",
                                                       "every-minute")
    created = _time(cron["metadata"]["creationTimestamp"])

    def runs() -> list[dict[str, Any]]:
        return list(testenv.custom.list_namespaced_custom_object(
            "ray.io", "v1", ns, "rayjobs", label_selector="ray.io/cronjob-name=every-minute",
        )["items"])
    first_runs = wait_for(runs, 150, interval=2, what="the RayCronJob's first scheduled run")
    # KubeRay v1.6.2 may start one schedule twice (seen here: two RayJobs for 16:01:00, the
    # second reconcile ran before the status update landed); each is a run of the schedule
    for run in first_runs:
        scheduled = _time(run["metadata"]["annotations"]["ray.io/cronjob-scheduled-timestamp"])
        assert scheduled.second == 0 and scheduled > created  # a whole minute, not at once
        assert run["metadata"]["ownerReferences"][0]["name"] == "every-minute"
        assert run["spec"]["entrypoint"] == "python -c 'print(42)'"
    scheduled = min(_time(r["metadata"]["annotations"]["ray.io/cronjob-scheduled-timestamp"])
                    for r in first_runs)
    cron = wait_for(lambda: _with_status(testenv, ns), 30, what="lastScheduleTime")
    assert _time(cron["status"]["lastScheduleTime"]) >= scheduled

    status = gitray.run("status", "--repo", str(repo.path))
    assert status.returncode == 0, output(status)
    row = next(line for line in status.stdout.splitlines()
               if line.startswith(f"{ns}/RayCronJob/every-minute"))
    assert "last run " in row and "run(s)" in row, status.stdout

    repo.commit("removed", {"jobs/cron.yaml": None})
    pruned = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert pruned.returncode == 0, output(pruned)
    assert "delete-object every-minute: done (RayCronJob every-minute deleted)" in pruned.stdout, \
        output(pruned)
    wait_for(lambda: not testenv.custom.list_namespaced_custom_object(
        "ray.io", "v1", ns, "raycronjobs")["items"], 180, what="RayCronJob pruned")
    wait_for(lambda: not runs(), 180, what="its runs garbage-collected")


def _with_status(env: TestEnv, ns: str) -> dict[str, Any] | None:
    cron: dict[str, Any] = env.custom.get_namespaced_custom_object(
        "ray.io", "v1", ns, "raycronjobs", "every-minute")
    return cron if (cron.get("status") or {}).get("lastScheduleTime") else None


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

