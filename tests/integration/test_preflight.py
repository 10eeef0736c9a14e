"""What gitray checks or keeps before it changes anything, against the real API server, KubeRay
and the real node (``gitray plan``/``apply`` through the CLI): the prune opt-out, the capacity
pre-flight, the server-side dry-run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testenv.helpers import TestEnv, real_raycluster_manifest, wait_for
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import GREETER, real_node_rayservice
from tests.integration.gitops import GitOpsRepo, Gitray, output


def configmap(ns: str, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": name}}


@pytest.fixture
def tools(testenv: TestEnv, namespace: str, tmp_path: Path) -> tuple[GitOpsRepo, Gitray]:
    return GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, namespace)


def names(env: TestEnv, ns: str) -> set[str]:
    return {cm.metadata.name for cm in env.core.list_namespaced_config_map(ns).items
            if (cm.metadata.labels or {}).get("gitray.io/role") == "object"}


def test_prune_opt_out_in_git_or_by_hand_keeps_an_object_that_left_git(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    repo, gitray = tools
    opt_out = {"gitray.io/prune": "disabled"}
    repo.commit("v1", {
        "gitray.yaml": gitray_config(namespace=namespace),
        "stay.yaml": dump(configmap(namespace, "stay")),
        "in-git.yaml": dump(configmap(namespace, "in-git", opt_out)),
        "by-hand.yaml": dump(configmap(namespace, "by-hand")),
        "plain.yaml": dump(configmap(namespace, "plain")),
    })
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert names(testenv, namespace) == {"stay", "in-git", "by-hand", "plain"}
    testenv.core.patch_namespaced_config_map(
        "by-hand", namespace, {"metadata": {"annotations": opt_out}})

    repo.commit("v2", {"in-git.yaml": None, "by-hand.yaml": None, "plain.yaml": None})
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    for kept in ("in-git", "by-hand"):
        assert (f"{namespace}/ConfigMap/{kept} was removed from Git but is kept: "
                f"gitray.io/prune: disabled on ConfigMap {kept}") in r.stdout, output(r)
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert names(testenv, namespace) == {"stay", "in-git", "by-hand"}

    # removing the opt-out by hand lets the next apply prune it
    testenv.core.patch_namespaced_config_map(
        "by-hand", namespace, {"metadata": {"annotations": {"gitray.io/prune": None}}})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert names(testenv, namespace) == {"stay", "in-git"}


def _clusters(env: TestEnv, ns: str) -> set[str]:
    items = env.custom.list_namespaced_custom_object("ray.io", "v1", ns, "rayclusters")["items"]
    return {c["metadata"]["name"] for c in items}


def test_an_upgrade_that_cannot_fit_on_the_node_is_refused_before_anything_is_created(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """The real node has 2 CPUs (the kwok nodes are tainted): a new cluster whose head asks
    for 3 is refused with the shortfall named, nothing created; 50m proceeds. (The node is
    shared with the other lanes' clusters: a clean-clone run once had 200m of its 2 CPUs
    unrequested when this test asked for 300m, and gitray rightly refused that too.)"""
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    config = gitray_config("5s", ns, capacity={"nodes": "refuse"})
    repo.commit("v1", {"gitray.yaml": config,
                       "svc.yaml": dump(real_node_rayservice(ns, workers=0,
                                                             serve=serve_config(GREETER)))})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    (active,) = _clusters(testenv, ns)

    big = real_node_rayservice(ns, workers=0, serve=serve_config(GREETER), head_cpu="3",
                               revision=1)
    repo.commit("too big", {"svc.yaml": dump(big)})
    for command in ("plan", "apply"):
        r = gitray.run(command, "--repo", str(repo.path), *(("--yes",) if command == "apply"
                                                           else ()))
        assert r.returncode == 1, output(r)
        assert r.stderr.startswith(
            f"svc.yaml:2:1: RayService {ns}/serve-demo does not fit: blue-green needs +3 cpu, "
            "+1Gi memory, +1 pods while both clusters run; 1 of 1 new pods fit on no node: a "
            "head pod requests 3 cpu, 1Gi memory, 1 pods, the roomiest node testenv-node has "
        ), output(r)
        assert "use upgradeStrategy NewClusterWithIncrementalUpgrade" in r.stderr
        assert "nothing was applied" in r.stderr and "Traceback" not in r.stderr
    assert _clusters(testenv, ns) == {active}  # nothing was created

    # per setting, only a warning in the plan
    r = gitray.run("plan", "--repo", str(repo.path), "--set", "capacity.nodes=warn")
    assert r.returncode == 0, output(r)
    assert f"warning: svc.yaml:2:1: RayService {ns}/serve-demo does not fit" in r.stdout

    small = real_node_rayservice(ns, workers=0, serve=serve_config(GREETER), head_cpu="50m",
                                 revision=1)
    repo.commit("smaller", {"svc.yaml": dump(small)})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 0, output(r)
    assert "resources: blue-green: +50m cpu, +1Gi memory, +1 pods while both run" in r.stdout
    (new,) = _clusters(testenv, ns) - {active}
    assert new.startswith("serve-demo-")


def _policy(ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy (CEL) refusing RayClusters whose head image is not from
    registry.example, bound to namespace ``ns`` alone (the environment is shared)."""
    name = f"gitray-test-{ns}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["ray.io"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["rayclusters"]}]},
            "validations": [{
                "expression": "object.spec.headGroupSpec.template.spec.containers.all(c, "
                              "c.image.startsWith('registry.example/'))",
                "message": "images must come from registry.example"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {
                     "matchLabels": {"kubernetes.io/metadata.name": ns}}}},
    }
    return policy, binding


def test_a_manifest_the_api_server_would_refuse_is_a_plan_error_before_any_step(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    """Admission speaks during plan: a ValidatingAdmissionPolicy (CEL) and a ResourceQuota
    (object count) refuse two manifests; the plan names both at their place in Git and
    apply changes nothing, not even the ConfigMap admission would let through."""
    from kubernetes import client, dynamic

    ns = namespace
    repo, gitray = tools
    api = dynamic.DynamicClient(testenv.api_client)
    policy, binding = _policy(ns)
    vap = api.resources.get(api_version="admissionregistration.k8s.io/v1",
                            kind="ValidatingAdmissionPolicy")
    vapb = api.resources.get(api_version="admissionregistration.k8s.io/v1",
                             kind="ValidatingAdmissionPolicyBinding")
    vap.create(body=policy)
    vapb.create(body=binding)
    try:
        testenv.core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="no-jobs"),
            spec=client.V1ResourceQuotaSpec(hard={"count/rayjobs.ray.io": "0"})))
        cluster = real_raycluster_manifest("cl", workers=0)
        cluster["metadata"]["namespace"] = ns
        job = {"apiVersion": "ray.io/v1", "kind": "RayJob",
               "metadata": {"name": "job", "namespace": ns},
               "spec": {"entrypoint": "python -c 'print(1)'",
                        "rayClusterSpec": real_raycluster_manifest("x", workers=0)["spec"]}}

        def refused() -> bool | None:  # the policy and the quota take effect asynchronously
            try:
                testenv.custom.create_namespaced_custom_object(
                    "ray.io", "v1", ns, "rayclusters", cluster, dry_run="All")
            except client.ApiException:
                pass
            else:
                return None
            try:
                testenv.custom.create_namespaced_custom_object(
                    "ray.io", "v1", ns, "rayjobs", job, dry_run="All")
            except client.ApiException:
                return True
            return None

        wait_for(refused, 60, what="the admission policy and the quota to take effect")
        repo.commit("v1", {"gitray.yaml": gitray_config(namespace=ns),
                           "cm.yaml": dump(configmap(ns, "cm")),
                           "cluster.yaml": "# a cluster\n" + dump(cluster),
                           "job.yaml": dump(job)})
        for command in ("plan", "apply"):
            r = gitray.run(command, "--repo", str(repo.path),
                           *(("--yes",) if command == "apply" else ()))
            assert r.returncode == 1, output(r)
            lines = r.stderr.splitlines()
            assert lines[0] == (
                f"cluster.yaml:3:1: the API server would refuse: RayCluster {ns}/cl: "
                f"rayclusters.ray.io \"cl\" is forbidden: ValidatingAdmissionPolicy "
                f"'gitray-test-{ns}' with binding 'gitray-test-{ns}' denied request: images "
                "must come from registry.example"), output(r)
            assert lines[1].startswith(
                f"job.yaml:2:1: the API server would refuse: RayJob {ns}/job-"), output(r)
            assert "exceeded quota: no-jobs" in lines[1], output(r)
            assert lines[-1] == "gitray: 2 problems found; nothing was applied", output(r)
            assert "Traceback" not in r.stderr
        # where reviewers look: a GitHub annotation on the line (and the PR comment, same path)
        r = gitray.run("plan", "--repo", str(repo.path), "--format", "github")
        assert r.returncode == 1, output(r)
        assert ("::error file=cluster.yaml,line=3,col=1,title=gitray::the API server would "
                "refuse: RayCluster") in r.stdout, output(r)
        assert names(testenv, ns) == set()  # not even the ConfigMap: nothing ran
        assert not testenv.custom.list_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters")["items"]

        repo.commit("only what admission accepts", {"cluster.yaml": None, "job.yaml": None})
        r = gitray.run("apply", "--repo", str(repo.path), "--yes")
        assert r.returncode == 0, output(r)
        assert names(testenv, ns) == {"cm"}
    finally:
        vapb.delete(name=binding["metadata"]["name"])
        vap.delete(name=policy["metadata"]["name"])


def test_a_cluster_over_the_namespace_quota_is_refused_and_one_within_it_is_planned(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    """ResourceQuota headroom (status.hard - status.used, as the quota controller counts it):
    capacity.quota refuses by default, before anything is created."""
    from kubernetes import client

    ns = namespace
    repo, gitray = tools
    testenv.core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="compute"),
        spec=client.V1ResourceQuotaSpec(hard={"requests.cpu": "500m", "pods": "5"})))
    wait_for(lambda: (testenv.core.read_namespaced_resource_quota("compute", ns).status
                      or client.V1ResourceQuotaStatus()).hard or None, 60,
             what="the quota controller to count the quota")
    cluster = real_raycluster_manifest("cl", workers=4)  # 5 pods x 100m: exactly 500m
    cluster["metadata"]["namespace"] = ns
    repo.commit("v1", {"gitray.yaml": gitray_config(namespace=ns),
                       "cluster.yaml": dump(cluster)})
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    assert "resources: create: +500m cpu, +3Gi memory, +5 pods;" in r.stdout, output(r)

    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 5
    cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 5
    repo.commit("one worker more", {"cluster.yaml": dump(cluster)})
    r = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert r.returncode == 1, output(r)
    assert r.stderr.splitlines()[0] == (
        f"cluster.yaml:2:1: RayCluster {ns}/cl does not fit: create needs +600m cpu, "
        "+3584Mi memory, +6 pods; ResourceQuota compute has 500m cpu, 5 pods left (short of "
        "100m cpu, 1 pods): lower the requests or free capacity"), output(r)
    assert not testenv.custom.list_namespaced_custom_object(
        "ray.io", "v1", ns, "rayclusters")["items"]
