"""gitray and the API server agree on the KubeRay v1.7.0 CRDs' CEL rules.

An environment of its own, without the real node (``--no-node``: it runs beside the shared
one, which is not touched), gets the v1.7.0 CRDs from ``../shared/kuberay-v1.7.0``
(server-side apply over the ones it started with: the same ones when it runs KubeRay v1.7.0,
v1.6.2's when it was built without that folder). Then:

- gitray, reading the CRDs that API server serves, names them v1.7.0;
- every manifest of tests/cel_cases.py that breaks a create-time rule is refused by the API
  server (``kubectl apply --dry-run=server``) with the rule's message, and by gitray with the
  same message; the valid manifests they are made from are accepted by both;
- an update breaking a transition rule (``self == oldSelf``) is refused by the API server,
  and ``gitray plan --against live`` refuses it too, before anything is applied.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitray.cli import main
from gitray.core.model import ObjectKey, Role
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.engine.schemas import cluster_schemas
from gitray.k8s.client import Kube
from gitray.k8s.crds import crd_stamp, read_ray_crd_stamp, read_ray_crds
from gitray.k8s.settings import KubeSettings
from gitray.parsing.crdschema import CelRule
from gitray.parsing.kuberay import KubeRaySchemas, packaged
from gitray.plans.load import load_snapshot
from gitray.plans.manifests import managed_labels
from testenv import control
from testenv.helpers import EnvUnavailable, TestEnv, environment, wait_for
from testenv.kuberay import SOURCE
from testenv.manifests import dump
from tests.cel_cases import base_manifest, breaking_manifest, checked_rules, set_at

CRDS = SOURCE / "ray-operator" / "config" / "crd" / "bases"
NAMESPACE = "cel"
CASES = checked_rules()


def _kubectl(env: TestEnv, *args: str, stdin: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    return control.kubectl(env.state, *args, check=False, stdin=stdin)


@pytest.fixture(scope="module")
def v17env() -> Iterator[TestEnv]:
    assert CRDS.is_dir(), f"the KubeRay v1.7.0 CRDs are needed: {CRDS}"
    try:
        with environment(None, prefix="gitray-testenv-v17-") as (env, _):
            done = _kubectl(env, "apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
            assert done.returncode == 0, done.stderr
            _kubectl(env, "create", "namespace", NAMESPACE)
            probe = dump(set_at(base_manifest("RayCluster", "probe", NAMESPACE),
                                ("spec", "tlsOptions"), {"enabled": True}))

            def serves_v170() -> bool | None:  # the new schema is in effect
                ok = _kubectl(env, "apply", "--dry-run=server", "-f", "-", stdin=probe)
                return ok.returncode == 0 or None

            wait_for(serves_v170, timeout=60, interval=1, what="the v1.7.0 CRDs served")
            yield env
    except EnvUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def served(v17env: TestEnv) -> KubeRaySchemas:
    kube = Kube.connect(KubeSettings(kubeconfig=v17env.kubeconfig))
    try:
        return cluster_schemas(kube, packaged("v1.6.2"))
    finally:
        kube.close()


def _gitray_messages(schemas: KubeRaySchemas, manifest: dict[str, Any]) -> list[str]:
    files = (RepoFile("gitray.yaml", b"apiVersion: gitray.io/v1alpha1\nkind: Config\n"),
             RepoFile("m.yaml", dump(manifest).encode()))
    return [d.message for d in load_snapshot(Snapshot("worktree", "t", files),
                                             kuberay=schemas).diagnostics]


def test_gitray_reads_the_served_crds_as_v170(served: KubeRaySchemas) -> None:
    assert served.version == "v1.7.0"
    assert served.origin == "served by the cluster"
    assert sum(len(r) for r in served.rules.values()) == 26


def test_a_second_read_asks_the_metadata_only_and_converts_nothing(
        v17env: TestEnv, served: KubeRaySchemas) -> None:
    kube = Kube.connect(KubeSettings(kubeconfig=v17env.kubeconfig))
    try:
        crds, why_not = read_ray_crds(kube)
        stamp = read_ray_crd_stamp(kube)  # (the API server's PartialObjectMetadata)
        assert why_not == "" and len(crds) == 4
        assert stamp == crd_stamp(crds) and all(uid and rv for uid, rv in stamp), stamp
        before = kube.requests
        again = cluster_schemas(kube, packaged("v1.6.2"))
        assert again is served  # the conversion kept, not redone
        assert kube.requests - before == 4  # four metadata GETs, no whole CRD
    finally:
        kube.close()


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService", "RayCronJob"])
def test_both_accept_the_valid_manifests(kind: str, v17env: TestEnv,
                                         served: KubeRaySchemas) -> None:
    manifest = base_manifest(kind, "valid", NAMESPACE)
    done = _kubectl(v17env, "apply", "--dry-run=server", "-f", "-", stdin=dump(manifest))
    assert done.returncode == 0, done.stderr
    assert _gitray_messages(served, manifest) == []


@pytest.mark.parametrize("case", CASES,
                         ids=[f"{k} {'.'.join(r.path)}: {r.rule[:40]}" for k, r in CASES])
def test_both_refuse_a_manifest_breaking_a_rule(case: tuple[str, CelRule], v17env: TestEnv,
                                                served: KubeRaySchemas) -> None:
    kind, rule = case
    manifest = breaking_manifest(kind, rule, "broken", NAMESPACE)
    done = _kubectl(v17env, "apply", "--dry-run=server", "-f", "-", stdin=dump(manifest))
    assert done.returncode != 0, f"the API server accepted a manifest breaking {rule.rule}"
    assert rule.message in done.stderr, done.stderr
    where = ".".join(p for p in rule.path)
    assert any(m.startswith("spec.") and m.endswith(rule.message)
               for m in _gitray_messages(served, manifest)), (where, done.stderr)


@pytest.mark.parametrize("leaf", ["managedBy", "backend"])
def test_both_refuse_an_update_breaking_a_transition_rule(leaf: str, v17env: TestEnv,
                                                          tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    name = f"t-{uuid.uuid4().hex[:6]}"
    path = ("spec", "managedBy") if leaf == "managedBy" else \
        ("spec", "gcsFaultToleranceOptions", "backend")
    before, after = (("ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue")
                     if leaf == "managedBy" else ("redis", "rocksdb"))
    base = base_manifest("RayCluster", name, NAMESPACE)
    if leaf == "backend":
        # An environment built without ../shared runs KubeRay v1.6.2: writing a cluster back
        # with its own types, it would drop the v1.7 field (and with no old value, the rule
        # does not apply). A cluster managed by another controller is left alone.
        base = set_at(base, ("spec", "managedBy"), "kueue.x-k8s.io/multikueue")
    live = set_at(base, path, before)
    live["metadata"]["labels"] = managed_labels(ObjectKey("RayCluster", NAMESPACE, name),
                                                "gitray", Role.CLUSTER)
    created = _kubectl(v17env, "create", "-f", "-", stdin=dump(live))
    assert created.returncode == 0, created.stderr
    stored = json.loads(_kubectl(v17env, "get", "raycluster", "-n", NAMESPACE, name,
                                 "-o", "json").stdout)
    assert stored["spec"][path[1]] == live["spec"][path[1]]
    changed = set_at(base, path, after)
    message = ("the managedBy field is immutable" if leaf == "managedBy"
               else "gcsFaultToleranceOptions.backend is immutable")
    # the API server: an update changing the field is refused (a merge patch: the operator
    # writes the object's status meanwhile, so no resourceVersion is pinned)
    patch = set_at({}, path, after)
    refused = _kubectl(v17env, "patch", "raycluster", "-n", NAMESPACE, name, "--type=merge",
                       "--dry-run=server", "-p", json.dumps(patch))
    assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    # gitray, planning against the live cluster
    (tmp_path / "gitray.yaml").write_text("apiVersion: gitray.io/v1alpha1\nkind: Config\n"
                                          f"allowedNamespaces: [{NAMESPACE}]\n")
    (tmp_path / "cluster.yaml").write_text(dump(changed))
    capsys.readouterr()
    code = main(["plan", "--repo", str(tmp_path), "--against", "live",
                 "--kubeconfig", v17env.kubeconfig])
    err = capsys.readouterr().err
    assert code == 1, err
    expected = (f"{'.'.join(path)}: {message} (updating the live RayCluster "
                f"{NAMESPACE}/{name}, which has {before!r})")
    found = re.findall(rf"^cluster\.yaml:(\d+):(\d+): {re.escape(expected)}$", err, re.MULTILINE)
    assert found, err
    line, col = map(int, found[0])  # at the field, in the revision
    text = (tmp_path / "cluster.yaml").read_text().splitlines()
    assert text[line - 1][col - 1:].startswith(f"{leaf}: {after}"), (line, col)
    # a refusal is the whole answer: nothing is said before (or instead of) the error
    assert err.splitlines()[0].startswith("cluster.yaml:"), err
    # the same manifest with the live value plans, judged by the cluster's CRDs
    (tmp_path / "cluster.yaml").write_text(dump(set_at(changed, path, before)))
    assert main(["plan", "--repo", str(tmp_path), "--against", "live",
                 "--kubeconfig", v17env.kubeconfig]) == 0, capsys.readouterr().err
    assert "Manifests judged by KubeRay v1.7.0 schemas (served by the cluster): 15 CEL rules " \
        "checked, 11 transition rules against the live objects." in capsys.readouterr().err
