"""A new user's first `gitray apply`, with no --lease-namespace and no --dashboard flag, against
the real API server (issue 11): the Lease goes to the kubeconfig context's namespace, a missing
namespace is one line naming the flag, and a user without rights on services/proxy is told so
at once instead of retrying for ten minutes.
"""

from __future__ import annotations

import base64
import copy
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client
from ruamel.yaml import YAML

from testenv.helpers import TestEnv
from testenv.manifests import dump, gitray_config
from testenv.rayservices import example_rayservice
from tests.integration.gitops import REPO_ROOT, GitOpsRepo, output

_yaml = YAML(typ="safe", pure=True)
SHIPPED_RBAC = REPO_ROOT / "deploy" / "base" / "rbac.yaml"


def kubeconfig_for(env: TestEnv, path: Path, *, namespace: str | None = None,
                   token: str | None = None) -> str:
    """The environment's kubeconfig with its context's namespace set, and optionally a bearer
    token (a ServiceAccount's) in place of the admin client certificate."""
    doc: dict[str, Any] = _yaml.load(Path(env.kubeconfig).read_text())
    doc = copy.deepcopy(doc)
    current = doc["current-context"]
    context = next(c for c in doc["contexts"] if c["name"] == current)["context"]
    if namespace:
        context["namespace"] = namespace
    if token:
        user = next(u for u in doc["users"] if u["name"] == context["user"])
        user["user"] = {"token": token}
    path.write_text(dump(doc))
    return str(path)


def gitray_apply(repo: Path, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    """`gitray apply --yes` exactly as a user types it: no --dashboard, no --lease-namespace."""
    return subprocess.run(
        [sys.executable, "-m", "gitray", "apply", "--repo", str(repo), "--yes",
         "--kubeconfig", kubeconfig],
        capture_output=True, text=True, check=False, timeout=600, cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1",
                                       "HOME": str(repo.parent), "PYTHONPATH": str(REPO_ROOT)})


def rayservice_repo(tmp_path: Path, namespace: str) -> GitOpsRepo:
    repo = GitOpsRepo(tmp_path / "repo")
    repo.commit("first", {"gitray.yaml": gitray_config(namespace=namespace),
                          "rayservice.yaml": dump(example_rayservice(namespace))})
    return repo


def rayclusters(env: TestEnv, namespace: str) -> list[str]:
    items = env.custom.list_namespaced_custom_object("ray.io", "v1", namespace,
                                                     "rayclusters")["items"]
    return [i["metadata"]["name"] for i in items]


def test_lease_goes_to_the_context_namespace_and_a_missing_one_is_named(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    repo = rayservice_repo(tmp_path, namespace)
    absent = f"absent-{uuid.uuid4().hex[:6]}"
    result = gitray_apply(repo.path, kubeconfig_for(testenv, tmp_path / "kc", namespace=absent))

    assert result.returncode == 1, output(result)
    errors = [line for line in result.stderr.splitlines() if line.startswith("gitray:")]
    assert errors == [f"gitray: error: the Lease namespace '{absent}' does not exist: create it "
                      f"(kubectl create namespace {absent}) or choose another with "
                      f"--lease-namespace"], output(result)
    assert "Traceback" not in result.stderr
    # the Lease comes before any write: nothing was created
    assert rayclusters(testenv, namespace) == []


def service_account_token(env: TestEnv, namespace: str, name: str) -> str:
    env.core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    answer = env.core.create_namespaced_service_account_token(name, namespace, request)
    return str(answer.status.token)


def grant_shipped_rbac(env: TestEnv, namespace: str, account: str) -> str:
    """deploy/base/rbac.yaml as shipped, bound to ``account`` in ``namespace`` (workloads and
    the Lease both live there): every right gitray needs, and no services/proxy. Returns the
    name of the ClusterRole made for it (cluster-scoped: the caller deletes it)."""
    docs = [d for d in _yaml.load_all(SHIPPED_RBAC.read_text()) if d]
    rbac = client.RbacAuthorizationV1Api(env.api_client)
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    role = next(d for d in docs if d["kind"] == "Role")
    assert not any("proxy" in r for rule in cluster_role["rules"] + role["rules"]
                   for r in rule["resources"])
    suffix = uuid.uuid4().hex[:6]
    cluster_role["metadata"]["name"] = f"gitray-workloads-{suffix}"
    rbac.create_cluster_role(cluster_role)
    role["metadata"]["namespace"] = namespace
    rbac.create_namespaced_role(namespace, role)
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    for kind, ref in (("ClusterRole", cluster_role["metadata"]["name"]),
                      ("Role", role["metadata"]["name"])):
        rbac.create_namespaced_role_binding(namespace, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{ref}-{kind.lower()}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": ref},
            "subjects": subject})
    return str(cluster_role["metadata"]["name"])


def test_no_rights_on_services_proxy_fails_at_once_naming_the_permission(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    token = service_account_token(testenv, namespace, "deployer")
    cluster_role = grant_shipped_rbac(testenv, namespace, "deployer")
    repo = rayservice_repo(tmp_path, namespace)
    kubeconfig = kubeconfig_for(testenv, tmp_path / "kc", namespace=namespace, token=token)
    try:
        result = gitray_apply(repo.path, kubeconfig)
    finally:
        client.RbacAuthorizationV1Api(testenv.api_client).delete_cluster_role(cluster_role)

    assert result.returncode == 1, output(result)
    text = result.stdout + result.stderr
    assert "Traceback" not in text
    # the step failed on the first refusal, not after retrying
    assert "not reachable yet" not in text, output(result)
    assert 'cannot update resource "services/proxy"' in result.stderr, output(result)
    assert "system:serviceaccount:" + namespace + ":deployer" in result.stderr
    assert "get and update on services/proxy" in result.stderr
    assert token not in text
    assert base64.b64encode(token.encode()).decode() not in text
    # the Lease was taken in the kubeconfig context's namespace (no --lease-namespace)
    lease = client.CoordinationV1Api(testenv.api_client).read_namespaced_lease("gitray",
                                                                              namespace)
    assert lease.metadata.namespace == namespace
