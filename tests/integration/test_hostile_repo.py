"""Hostile repository corpus end to end (issue 6, item 4 of the suite: "hostile input").

A good revision (two ConfigMaps and a suspended RayCluster) is applied once per module with the
real ``gitray apply``. Every case then commits one hostile change on top of it and runs the real
CLI (``gitray apply --yes`` on the commit, ``gitray validate`` on the working tree) as a child
process under ``/usr/bin/time`` (its maximum RSS) and a generous timeout. Each case must end in
exit 1 with its clear ``path:line:col: message`` line(s) and no traceback — or, for the cases
that are valid but must not prune (empty revisions), in the documented safe outcome — and the
live state must be exactly as before: the resourceVersion of every object in the namespace
gitray writes to (workloads, run records, the Lease) is unchanged.

The loader's parsing of each case is unit-tested in tests/unit/plans/test_load.py; this module
proves the whole path (Git object reading, CLI, API server) applies nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from testenv.helpers import TestEnv, make_namespace, wait_for
from testenv.manifests import dump, gitray_config
from tests.integration.gitops import REPO_ROOT, GitOpsRepo, Gitray
from tests.integration.harness import ray_clusters

EXAMPLE_CLUSTER = REPO_ROOT / "examples-repo" / "ray-cluster" / "raycluster.yaml"
EXAMPLE_SERVICE = REPO_ROOT / "examples-repo" / "ray-serve" / "rayservice.yaml"
TIMEOUT_S = 120  # per child process; a hostile file must not make gitray hang
RSS_CAP_KB = 500 * 1024  # a single gitray run on a hostile revision stays under 500 MB
MANAGED = "app.kubernetes.io/managed-by=gitray"
_yaml = YAML(typ="safe", pure=True)


def configmap(ns: str, name: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": {"value": value}}


def raycluster(ns: str, name: str = "lab") -> dict[str, Any]:
    doc: dict[str, Any] = _yaml.load(EXAMPLE_CLUSTER.read_text())
    doc["metadata"] = {"name": name, "namespace": ns}
    doc["spec"]["suspend"] = True  # no pods, no Ray: the state is what matters here
    return doc


def rayservice(ns: str, name: str = "svc", serve: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = _yaml.load(EXAMPLE_SERVICE.read_text())
    doc["metadata"] = {"name": name, "namespace": ns}
    if serve is not None:
        doc["spec"]["serveConfigV2"] = serve
    return doc


def good_files(ns: str) -> dict[str, str]:
    return {"gitray.yaml": gitray_config(allowedNamespaces=[ns]),
            "apps/a.yaml": dump(configmap(ns, "a", "1")),
            "apps/b.yaml": dump(configmap(ns, "b", "1")),
            "clusters/lab.yaml": dump(raycluster(ns))}


# -- the corpus -------------------------------------------------------------------------------

Files = dict[str, "str | bytes | None"]


@dataclass(frozen=True)
class Case:
    name: str
    change: Callable[[str], Files]  # namespace -> files to write (None: delete)
    expect: tuple[str, ...]  # regexes each matching a line of stderr (or stdout for exit 0)
    exit_code: int = 1
    symlinks: tuple[tuple[str, str], ...] = ()  # (path, target)
    worktree: bool = False  # also `gitray validate` the working tree (the other file reader)


ALIAS_BOMB = "\n".join(
    ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
) + "\n"


def _cluster_with(ns: str, **spec: Any) -> str:
    doc = raycluster(ns, "lab")
    doc["spec"].update(spec)
    return dump(doc)


def _nodes_bomb() -> str:
    # 1.2 million scalars in 2.4 MB: under the per-file size limit, over the node budget
    return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: many}\ndata:\n  x: [" \
        + ",".join(["1"] * 1_200_000) + "]\n"


def _fifty_mb(_ns: str) -> Files:
    line = b"# " + b"x" * 1021 + b"\n"
    return {"apps/huge.yaml": line * (50 * 1024)}


CASES: list[Case] = [
    Case("malformed_yaml",
         lambda ns: {"apps/bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n"},
         (r"^apps/bad\.yaml:4:1: YAML syntax error: ",)),
    Case("alias_bomb", lambda ns: {"apps/bomb.yaml": ALIAS_BOMB},
         (r"^apps/bomb\.yaml:\d+:\d+: YAML aliases expand to more than \d+ nodes",)),
    Case("deep_nesting", lambda ns: {"apps/deep.yaml": "a: " + "[" * 50_000 + "]" * 50_000},
         (r"^apps/deep\.yaml:1:\d+: nesting deeper than \d+ levels",)),
    Case("node_budget_exceeded", lambda ns: {"apps/many.yaml": _nodes_bomb()},
         (r"^apps/many\.yaml:5:\d+: more than \d+ YAML values in one file",)),
    Case("file_of_50_mb", _fifty_mb,
         (r"^apps/huge\.yaml:1:1: not read: file is 50\.0 MiB, over the 4 MiB limit",),
         worktree=True),
    Case("binary_file",
         lambda ns: {"apps/blob.yaml": bytes(range(256)) * 64},
         (r"^apps/blob\.yaml:1:1: binary file",), worktree=True),
    Case("non_utf8",
         lambda ns: {"apps/latin1.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                                         "  name: caf\xe9\n".encode("latin-1")},
         (r"^apps/latin1\.yaml:4:12: not valid UTF-8 \(byte 0xe9\)",)),
    Case("symlink_to_etc_passwd", lambda ns: {},
         (r"^apps/passwd\.yaml:1:1: not read: symlink to a path outside the repository",),
         symlinks=(("apps/passwd.yaml", "/etc/passwd"),), worktree=True),
    Case("relative_symlink_out_of_repo", lambda ns: {},
         (r"^apps/up\.yaml:1:1: not read: symlink to a path outside the repository",),
         symlinks=(("apps/up.yaml", "../../../../../../../../etc/passwd"),), worktree=True),
    Case("dotdot_in_config_paths",
         lambda ns: {"gitray.yaml": gitray_config(allowedNamespaces=[ns],
                                                  paths=["../**", "apps/**"])},
         (r"^gitray\.yaml:\d+:\d+: paths: glob '\.\./\*\*' uses '\.\.'",)),
    Case("absolute_path_in_config",
         lambda ns: {"gitray.yaml": gitray_config(allowedNamespaces=[ns],
                                                  paths=["/etc/**"])},
         (r"^gitray\.yaml:\d+:\d+: paths: glob '/etc/\*\*' is absolute",)),
    Case("config_not_yaml",
         lambda ns: {"gitray.yaml": "apiVersion: gitray.io/v1alpha1\nkind: Config\nprune: [\n"},
         (r"^gitray\.yaml:4:1: YAML syntax error",)),
    Case("config_unknown_key",
         lambda ns: {"gitray.yaml": gitray_config(allowedNamespaces=[ns], prunne=False)},
         (r"^gitray\.yaml:\d+:\d+: prunne: unknown field 'prunne'",)),
    Case("duplicate_workloads",
         lambda ns: {"apps/a-again.yaml": dump(configmap(ns, "a", "2"))},
         (r"^apps/a\.yaml:\d+:\d+: ConfigMap \S+/a is defined twice.*apps/a-again\.yaml"
          r"|^apps/a-again\.yaml:\d+:\d+: ConfigMap \S+/a is defined twice.*apps/a\.yaml",)),
    Case("unknown_kind",
         lambda ns: {"apps/widget.yaml": dump({"apiVersion": "example.com/v1", "kind": "Widget",
                                               "metadata": {"name": "w", "namespace": ns}})},
         (r"^apps/widget\.yaml:3:1: kind Widget is not managed by gitray",)),
    Case("cluster_scoped_kind",
         lambda ns: {"apps/role.yaml": dump({
             "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "gitray-owns-you"},
             "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})},
         (r"^apps/role\.yaml:3:1: ClusterRole is cluster-scoped",)),
    Case("supporting_kind_not_listed",
         lambda ns: {"apps/secret.yaml": dump({"apiVersion": "v1", "kind": "Secret",
                                               "metadata": {"name": "s", "namespace": ns},
                                               "stringData": {"k": "v"}})},
         (r"^apps/secret\.yaml:3:1: kind Secret is not managed by gitray",)),
    Case("wrong_api_version",
         lambda ns: {"clusters/lab.yaml": dump({**raycluster(ns), "apiVersion": "ray.io/v2"})},
         (r"^clusters/lab\.yaml:\d+:\d+: RayCluster must use apiVersion ray\.io/v1, "
          r"not 'ray\.io/v2'",)),
    Case("schema_violation",
         lambda ns: {"clusters/lab.yaml": _cluster_with(ns, headGroupSpec={"template": 7})},
         (r"^clusters/lab\.yaml:\d+:\d+: spec\.headGroupSpec\.template: 7 is not of type "
          r"'object'",)),
    Case("invalid_serve_config_not_yaml",
         lambda ns: {"svc.yaml": dump(rayservice(ns, serve="applications: [\n"))},
         (r"^svc\.yaml:\d+:\d+: spec\.serveConfigV2: YAML syntax error",)),
    Case("invalid_serve_config_shape",
         lambda ns: {"svc.yaml": dump(rayservice(ns, serve="applications:\n  name: x\n"))},
         (r"^svc\.yaml:\d+:\d+: spec\.serveConfigV2: needs a non-empty 'applications' list",)),
    Case("name_too_long",
         lambda ns: {"svc.yaml": dump(rayservice(ns, name="s" * 60))},
         (r"^svc\.yaml:\d+:\d+: RayService name 's+' is 60 characters; gitray allows at most 47",)),
    Case("name_not_dns",
         lambda ns: {"apps/c.yaml": dump(configmap(ns, "Bad_Name", "1"))},
         (r"^apps/c\.yaml:\d+:\d+: metadata\.name 'Bad_Name' is not a valid name",)),
    Case("disallowed_namespace",
         lambda ns: {"apps/c.yaml": dump(configmap("kube-system", "c", "1"))},
         (r"^apps/c\.yaml:6:3: namespace 'kube-system' is not in allowedNamespaces",)),
    Case("duplicate_keys",
         lambda ns: {"apps/dup.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                                      f"  name: dup\n  namespace: {ns}\n  name: other\n"},
         (r"^apps/dup\.yaml:6:3: duplicate key 'name' \(first at line 4\)",)),
    Case("python_object_tag",
         lambda ns: {"apps/py.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: py\n"
                                     f"  namespace: {ns}\ndata:\n"
                                     "  x: !!python/object/apply:os.system "
                                     "['touch /tmp/gitray-pwned']\n"},
         (r"^apps/py\.yaml:7:6: unsupported YAML tag !!python/object/apply:os\.system",)),
    Case("not_a_mapping", lambda ns: {"apps/list.yaml": "- a\n- b\n"},
         (r"^apps/list\.yaml:1:1: a manifest must be a mapping",)),
    Case("missing_name",
         lambda ns: {"apps/anon.yaml": dump({"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"namespace": ns}})},
         (r"^apps/anon\.yaml:\d+:\d+: missing metadata\.name",)),
    Case("control_characters_in_file_name",
         lambda ns: {"apps/evil\nname.yaml": dump(configmap(ns, "c", "1"))},
         (r"^apps/evil\\nname\.yaml:1:1: the file name contains control characters",)),
    Case("one_bad_workload_among_good_changes",  # all-or-nothing: the good edit waits too
         lambda ns: {"apps/a.yaml": dump(configmap(ns, "a", "2")),
                     "apps/c.yaml": dump(configmap(ns, "c", "1")),
                     "apps/zz-bad.yaml": dump(configmap("kube-system", "zz", "1"))},
         (r"^apps/zz-bad\.yaml:6:3: namespace 'kube-system' is not in allowedNamespaces",)),
    # Kustomizations (issue 32): refused before kustomize runs (tests/unit/plans/test_kustomize.py
    # has the renders that run: huge output, memory, time)
    Case("kustomize_remote_base",
         lambda ns: {"k/kustomization.yaml": "resources: ['https://example.com/base']\n"},
         (r"^k/kustomization\.yaml:1:13: resources\[0\]: remote base .* refused",)),
    Case("kustomize_escape",
         lambda ns: {"k/kustomization.yaml": "resources: [../../../../etc]\n"},
         (r"^k/kustomization\.yaml:1:13: resources\[0\]: '\.\./\.\./\.\./\.\./etc' leaves "
          r"the repository",), worktree=True),
    Case("kustomize_cycle",
         lambda ns: {"a/kustomization.yaml": "resources: [../b]\n",
                     "b/kustomization.yaml": "resources: [../a]\n"},
         (r"^a/kustomization\.yaml:1:1: never rendered: .*a cycle of kustomizations",)),
    # Helm charts (issue 32): refused before helm runs (tests/unit/plans/test_helm.py has the
    # renders that run: huge output, memory, a template that loops)
    Case("helm_escape",
         lambda ns: {"gitray.yaml": gitray_config(allowedNamespaces=[ns], helm=[
             {"chart": "../../../../etc", "release": "r", "namespace": ns}])},
         (r"^gitray\.yaml:\d+:\d+: helm chart '\.\./\.\./\.\./\.\./etc' leaves the "
          r"repository",), worktree=True),
    Case("helm_remote_dependency",
         lambda ns: {"gitray.yaml": gitray_config(allowedNamespaces=[ns], helm=[
             {"chart": "c", "release": "r", "namespace": ns}]),
                     "c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\ndependencies:\n"
                                     "  - {name: redis, version: 1.0.0, repository: "
                                     "'oci://registry.example/charts'}\n"},
         (r"^gitray\.yaml:\d+:\d+: dependency redis from oci://registry\.example/charts "
          r"refused: it is not vendored into c/charts/",), worktree=True),
    # Valid revisions that must not prune: the documented safe outcome is exit 0, nothing done.
    Case("empty_revision_with_live_workloads",
         lambda ns: {"apps/a.yaml": None, "apps/b.yaml": None, "clusters/lab.yaml": None},
         (r"no workloads: nothing is pruned",), exit_code=0),
    Case("every_manifest_emptied_at_once",
         lambda ns: {"apps/a.yaml": "---\n# moved\n", "apps/b.yaml": "", "clusters/lab.yaml":
                     "---\n---\n"},
         (r"no workloads: nothing is pruned",), exit_code=0),
    Case("everything_deleted_including_config",
         lambda ns: {"gitray.yaml": None, "apps/a.yaml": None, "apps/b.yaml": None,
                     "clusters/lab.yaml": None, "README.md": "moved elsewhere\n"},
         (r"no workloads: nothing is pruned",), exit_code=0),
]


# -- fixtures -----------------------------------------------------------------------------------


@dataclass
class World:
    env: TestEnv
    ns: str
    repo: GitOpsRepo
    gitray: Gitray
    good: str  # commit of the good state
    tmp: Path


@pytest.fixture(scope="module")
def world(testenv: TestEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    ns = make_namespace(testenv, "t-hostile")
    tmp = tmp_path_factory.mktemp("hostile")
    try:
        repo = GitOpsRepo(tmp / "repo")
        good = repo.commit("good", dict(good_files(ns)))
        gitray = Gitray(testenv.kubeconfig, ns)
        r = gitray.run("apply", "--repo", str(repo.path), "--revision", good, "--yes",
                       timeout=TIMEOUT_S)
        assert r.returncode == 0, r.stdout + r.stderr
        world = World(testenv, ns, repo, gitray, good, tmp)
        wait_for(lambda: len(managed(world)) >= 3 or None, timeout=30)
        # KubeRay's own first writes (each RayCluster's head Service) land before the first
        # snapshot, so a test never counts them as a change: beside a lane the operator once
        # created lab-head-svc after a test's snapshot was taken
        for name in ray_clusters(testenv, ns):
            wait_for(lambda n=name: testenv.core.read_namespaced_service(f"{n}-head-svc", ns),
                     timeout=120, what=f"KubeRay's head Service of RayCluster {name}")
        yield world
    finally:
        testenv.core.delete_namespace(ns)


def snapshot_of_namespace(w: World) -> dict[str, str]:
    """kind/name -> resourceVersion (custom objects: ``fingerprint``) of everything gitray
    writes in the namespace (workloads, run records, Lease): any write changes one of them."""
    out: dict[str, str] = {}
    for cm in w.env.core.list_namespaced_config_map(w.ns).items:
        if cm.metadata.name != "kube-root-ca.crt":
            out[f"ConfigMap/{cm.metadata.name}"] = cm.metadata.resource_version
    for kind in ("rayclusters", "rayservices", "rayjobs"):
        for item in w.env.custom.list_namespaced_custom_object("ray.io", "v1", w.ns,
                                                               kind)["items"]:
            out[f"{kind}/{item['metadata']['name']}"] = fingerprint(item)
    for svc in w.env.core.list_namespaced_service(w.ns).items:
        out[f"Service/{svc.metadata.name}"] = svc.metadata.resource_version
    from kubernetes import client

    for lease in client.CoordinationV1Api(w.env.api_client).list_namespaced_lease(w.ns).items:
        out[f"Lease/{lease.metadata.name}"] = lease.metadata.resource_version
    return out


def fingerprint(item: dict[str, Any]) -> str:
    """A custom object's writes apart from the KubeRay operator's status updates (which move
    its resourceVersion on their own): generation, labels, annotations, non-status writers."""
    meta = item["metadata"]
    writes = [(m.get("manager"), m.get("operation"), m.get("time"))
              for m in meta.get("managedFields", []) if not m.get("subresource")]
    return json.dumps([meta.get("generation"), meta.get("labels"), meta.get("annotations"),
                       writes], sort_keys=True)


def managed(w: World) -> list[str]:
    """The workloads gitray applied (not its run records)."""
    items = [f"ConfigMap/{c.metadata.name}" for c in
             w.env.core.list_namespaced_config_map(w.ns, label_selector=MANAGED).items
             if not c.metadata.name.startswith("gitray-run-")]
    items += [f"RayCluster/{c['metadata']['name']}" for c in w.env.custom.
              list_namespaced_custom_object("ray.io", "v1", w.ns, "rayclusters",
                                            label_selector=MANAGED)["items"]]
    return sorted(items)


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    max_rss_kb: int


def run_measured(w: World, command: str, *args: str) -> Run:
    """The real CLI as a child of /usr/bin/time (its max RSS), bounded by TIMEOUT_S."""
    figures = w.tmp / f"time-{uuid.uuid4().hex[:6]}"
    gitray = w.gitray.argv(command, *args)
    if command == "validate":  # needs no cluster, takes no --kubeconfig
        gitray = [sys.executable, "-m", "gitray", command, *args]
    argv = ["/usr/bin/time", "-f", "%M", "-o", str(figures), *gitray]
    r = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=TIMEOUT_S,
                       env=w.gitray.env(), stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
                       errors="replace")
    rss = int(figures.read_text().strip().splitlines()[-1])
    return Run(r.returncode, r.stdout, r.stderr, rss)


def commit_case(w: World, case: Case) -> str:
    w.repo.git("reset", "-q", "--hard", w.good)
    w.repo.git("clean", "-qfdx")
    for rel, data in case.change(w.ns).items():
        target = w.repo.path / rel
        if data is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
        else:
            target.write_text(data)
    for rel, link in case.symlinks:
        (w.repo.path / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link, w.repo.path / rel)
    return w.repo.commit(case.name, {})


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_hostile_revision_applies_nothing(world: World, case: Case) -> None:
    before = snapshot_of_namespace(world)
    assert len(managed(world)) == 3, managed(world)
    sha = commit_case(world, case)
    applied = run_measured(world, "apply", "--repo", str(world.repo.path), "--revision", sha,
                           "--yes")
    runs = [("apply", applied)]
    if case.worktree:
        runs.append(("validate", run_measured(world, "validate", "--repo",
                                              str(world.repo.path))))
    for what, r in runs:
        shown = f"gitray {what}: exit {r.code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
        assert "Traceback" not in r.stdout + r.stderr, shown
        assert r.max_rss_kb < RSS_CAP_KB, f"{r.max_rss_kb} kB\n{shown}"
        if case.exit_code == 1:
            assert r.code == 1, shown
            lines = r.stderr.splitlines()
            for pattern in case.expect:
                assert any(re.search(pattern, line) for line in lines), \
                    f"no line matches {pattern!r}\n{shown}"
            diagnostics = [line for line in lines if not line.startswith("gitray: ")]
            assert diagnostics, shown
            for line in diagnostics:  # every error line names its place
                assert re.match(r"^[^\s:][^:]*:\d+:\d+: \S", line), f"{line!r}\n{shown}"
    if case.exit_code == 0:
        assert applied.code == 0, applied.stdout + applied.stderr
        for pattern in case.expect:
            assert re.search(pattern, applied.stdout, re.MULTILINE), applied.stdout
    assert not Path("/tmp/gitray-pwned").exists()
    after = snapshot_of_namespace(world)
    if case.exit_code == 0:  # a valid revision: apply takes (and releases) the Lease
        before.pop("Lease/gitray", None)
        after.pop("Lease/gitray", None)
    assert after == before, "the live state changed"
    print(f"\nFIGURES {case.name}: " + ", ".join(
        f"{what} exit {r.code} max RSS {r.max_rss_kb} kB" for what, r in runs))


def test_the_corpus_is_large_and_distinct() -> None:
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names) >= 25


def test_deleting_all_but_one_workload_at_once_prunes_the_rest(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    """The documented counterpart of the empty-revision cases above: a revision that still
    holds a workload is an ordinary revision, so deleting every other workload at once prunes
    them (prune on); the one left is untouched. Only a revision with no workloads at all is
    refused as a possible broken checkout (unless allowEmpty)."""
    repo = GitOpsRepo(tmp_path / "repo")
    gitray = Gitray(testenv.kubeconfig, namespace)
    good = repo.commit("good", dict(good_files(namespace)))
    r = gitray.run("apply", "--repo", str(repo.path), "--revision", good, "--yes",
                   timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    kept = testenv.core.read_namespaced_config_map("a", namespace).metadata.resource_version
    most = repo.commit("delete all but a", {"apps/b.yaml": None, "clusters/lab.yaml": None})
    r = gitray.run("apply", "--repo", str(repo.path), "--revision", most, "--yes",
                   timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "delete-object b" in r.stdout and "Plan: 0 to create" in r.stdout, r.stdout

    def left() -> list[str]:
        names = [c.metadata.name for c in testenv.core.list_namespaced_config_map(
            namespace, label_selector=MANAGED).items if not c.metadata.name.startswith(
            "gitray-run-")]
        names += [c["metadata"]["name"] for c in testenv.custom.list_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayclusters")["items"]]
        return sorted(names)

    wait_for(lambda: left() == ["a"] or None, timeout=60, what="b and lab pruned")
    assert testenv.core.read_namespaced_config_map("a", namespace).metadata.resource_version \
        == kept
