"""Git remote faults under a running ``gitray sync`` (issue 6, item 4): the remote disappears,
its object database or refs are corrupted, its history is force-pushed so the synced commit
disappears. The daemon — a real process polling a real bare remote, statuses in git notes —
must not crash, must not apply or prune anything from what it cannot read, must say so on
/readyz, in /metrics and in its logs, and must resume as soon as a valid revision is there.

Workloads are ConfigMaps and a suspended RayCluster (no pods, no Ray): the faults are in Git.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump, gitray_config
from tests.integration.chaos import Replica, start_replica
from tests.integration.gitops import REPO_ROOT, GitOpsRepo
from tests.integration.test_daemon import notes

EXAMPLE_CLUSTER = REPO_ROOT / "examples-repo" / "ray-cluster" / "raycluster.yaml"
NOT_APPLIED = "nothing is applied or pruned until it reads again"


def configmap(ns: str, name: str, value: str) -> str:
    return dump({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": name, "namespace": ns}, "data": {"value": value}})


def raycluster(ns: str) -> str:
    doc: dict[str, Any] = YAML(typ="safe", pure=True).load(EXAMPLE_CLUSTER.read_text())
    doc["metadata"] = {"name": "lab", "namespace": ns}
    doc["spec"]["suspend"] = True
    return dump(doc)


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


class Remote:
    """A real bare remote and a clone to push from."""

    def __init__(self, tmp: Path) -> None:
        self.bare = tmp / "remote.git"
        git("init", "-q", "--bare", "-b", "main", str(self.bare))
        self.work = GitOpsRepo(tmp / "work")
        self.work.git("remote", "add", "origin", str(self.bare))

    def push(self, message: str, files: dict[str, str | None], *, to: Path | None = None,
             force: bool = False) -> str:
        sha = self.work.commit(message, files)
        self.work.git("push", "-q", *(["--force"] if force else []), str(to or self.bare),
                      "main")
        return sha

    def corrupted_copy(self, message: str, files: dict[str, str | None],
                       how: str) -> tuple[Path, str]:
        """A copy of the remote with one more commit whose objects are then damaged ``how``."""
        copy = self.bare.with_name(f"corrupt-{how}.git")
        shutil.rmtree(copy, ignore_errors=True)
        # through Git's transport: a consistent copy even while the daemon pushes git notes
        git("clone", "-q", "--mirror", f"file://{self.bare}", str(copy))
        before = git("--git-dir", str(copy), "rev-parse", "main")
        sha = self.push(message, files, to=copy)
        if how == "loose-garbage":
            listed = git("--git-dir", str(copy), "rev-list", "--objects", f"{before}..{sha}")
            for oid in (line.split()[0] for line in listed.splitlines()):
                path = copy / "objects" / oid[:2] / oid[2:]
                if path.exists():
                    path.chmod(0o644)
                    path.write_bytes(b"\x00garbage, not a zlib stream\xff" * 3)
        elif how == "truncated-pack":
            git("--git-dir", str(copy), "repack", "-q", "-a", "-d")
            git("--git-dir", str(copy), "prune-packed")
            (pack,) = (copy / "objects" / "pack").glob("*.pack")
            data = pack.read_bytes()
            pack.chmod(0o644)
            pack.write_bytes(data[: len(data) // 2])
        elif how == "dangling-head-and-refs":
            (copy / "HEAD").write_text("ref: refs/heads/nowhere\n")
            git("--git-dir", str(copy), "pack-refs", "--all")
            (copy / "packed-refs").write_text("this is not a ref file\n")
            shutil.rmtree(copy / "refs" / "heads", ignore_errors=True)
            (copy / "refs" / "heads").mkdir()
            (copy / "refs" / "heads" / "main").write_text("not-a-sha\n")
        else:  # pragma: no cover
            raise AssertionError(how)
        return copy, sha

    def swap(self, other: Path) -> None:
        """Put ``other`` where the remote is (the real one goes aside, restorable)."""
        aside = self.bare.with_name("aside.git")
        self.bare.rename(aside)
        other.rename(self.bare)
        shutil.rmtree(other.with_name("swapped-out.git"), ignore_errors=True)
        aside.rename(other.with_name("swapped-out.git"))

    def restore(self) -> None:
        broken = self.bare.with_name("broken-now.git")
        shutil.rmtree(broken, ignore_errors=True)
        self.bare.rename(broken)
        self.bare.with_name("swapped-out.git").rename(self.bare)
        self.unlock()

    def unlock(self) -> None:
        """Remove ref locks left by a git-notes push the fault cut off: a server crashing
        mid-push leaves them too, and its admin removes them (gitray cannot)."""
        for lock in self.bare.rglob("*.lock"):
            lock.unlink()


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return Remote(tmp_path)


@pytest.fixture
def daemon(testenv: TestEnv, namespace: str, remote: Remote,
           tmp_path: Path) -> Iterator[Replica]:
    sync = start_replica(testenv.kubeconfig, namespace, remote.bare, tmp_path, "daemon",
                         extra=("--drift-every", "3"))
    try:
        yield sync
    finally:
        sync.terminate()


def workloads(env: TestEnv, ns: str) -> dict[str, tuple[str, str]]:
    """name -> (resourceVersion, value) of the workloads gitray applies in ``ns``."""
    out = {f"ConfigMap/{c.metadata.name}": (c.metadata.resource_version,
                                            (c.data or {}).get("value", ""))
           for c in env.core.list_namespaced_config_map(ns).items
           if c.metadata.name in {"a", "b", "c"}}
    for item in env.custom.list_namespaced_custom_object("ray.io", "v1", ns,
                                                         "rayclusters")["items"]:
        out[f"RayCluster/{item['metadata']['name']}"] = (fingerprint(item), "")
    return out


def fingerprint(item: dict[str, Any]) -> str:
    """What changes when anyone but the operator's status writer touches a custom object
    (the KubeRay operator updates status, and so the resourceVersion, on its own)."""
    meta = item["metadata"]
    writes = [(m.get("manager"), m.get("operation"), m.get("time"))
              for m in meta.get("managedFields", []) if not m.get("subresource")]
    return json.dumps([meta.get("generation"), meta.get("labels"), meta.get("annotations"),
                       writes], sort_keys=True)


def synced(sync: Replica, sha: str) -> bool:
    return sync.metric("gitray_last_synced_revision_info", f'revision="{sha}"') == 1


def readyz(sync: Replica) -> tuple[int, dict[str, Any]]:
    code, body = sync.get("/readyz")
    return code, json.loads(body)


def log_records(sync: Replica) -> list[dict[str, Any]]:
    records = []
    for line in sync.logs().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            records.append({"message": line})
    return records


def messages(sync: Replica) -> str:
    return "\n".join(str(r.get("message", r.get("msg", ""))) for r in log_records(sync))


def assert_outage_handled(sync: Replica, env: TestEnv, ns: str,
                          before: dict[str, tuple[str, str]], errors_before: float,
                          expect: str) -> str:
    """While the remote is unreadable: alive, honest, and hands off the cluster."""
    wait_for(lambda: sync.metric("gitray_git_errors_total") >= errors_before + 2 or None,
             timeout=60, what="git errors counted")
    assert sync.proc.poll() is None, "the daemon exited"
    assert sync.get("/healthz")[0] == 200
    code, ready = readyz(sync)
    assert code == 200, ready
    assert ready["git"] != "ok" and expect in ready["git"], ready
    assert NOT_APPLIED in messages(sync)
    assert "Traceback" not in sync.logs()
    assert workloads(env, ns) == before, "something was applied or pruned during the outage"
    return str(ready["git"])


def test_remote_gone_corrupted_and_force_pushed(
        testenv: TestEnv, namespace: str, remote: Remote, daemon: Replica) -> None:
    ns = namespace
    base = {"gitray.yaml": gitray_config(status={"provider": "git-notes"},
                                         allowedNamespaces=[ns]),
            "a.yaml": configmap(ns, "a", "1"), "b.yaml": configmap(ns, "b", "1"),
            "lab.yaml": raycluster(ns)}
    first = remote.push("good", base)
    wait_for(lambda: synced(daemon, first) or None, timeout=120, what="first sync")
    wait_for(lambda: notes(remote.bare, first).get("gitray", {}).get("state") == "success"
             or None, timeout=30)
    good = workloads(testenv, ns)
    assert sorted(good) == ["ConfigMap/a", "ConfigMap/b", "RayCluster/lab"]
    problems: dict[str, str] = {}

    # (a) the remote disappears
    errors = daemon.metric("gitray_git_errors_total")
    gone = remote.bare.with_name("gone.git")
    remote.bare.rename(gone)
    problems["gone"] = assert_outage_handled(daemon, testenv, ns, good, errors,
                                             "cannot fetch")
    gone.rename(remote.bare)
    remote.unlock()
    after_gone = remote.push("after gone", {"b.yaml": configmap(ns, "b", "2")})
    wait_for(lambda: synced(daemon, after_gone) or None, timeout=60, what="recovery (a)")
    assert readyz(daemon)[1]["git"] == "ok"
    assert '"git: reading again"' in daemon.logs() or "git: reading again" in messages(daemon)
    state = workloads(testenv, ns)
    assert state["ConfigMap/b"][1] == "2"
    assert state["ConfigMap/a"] == good["ConfigMap/a"]  # untouched
    assert state["RayCluster/lab"] == good["RayCluster/lab"]

    # (b) corruption: a new commit whose objects are garbage, then a truncated pack, then a
    # HEAD pointing nowhere with broken refs
    for how in ("loose-garbage", "truncated-pack", "dangling-head-and-refs"):
        before = workloads(testenv, ns)
        errors = daemon.metric("gitray_git_errors_total")
        broken, bad_sha = remote.corrupted_copy(f"unreadable ({how})",
                                                {"a.yaml": configmap(ns, "a", how)}, how)
        remote.swap(broken)
        problems[how] = assert_outage_handled(daemon, testenv, ns, before, errors, "")
        assert not synced(daemon, bad_sha)
        remote.restore()
        fixed = remote.push(f"recovered from {how}", {"b.yaml": configmap(ns, "b", how)})
        wait_for(lambda fixed=fixed: synced(daemon, fixed) or None, timeout=60,
                 what=f"recovery from {how}")
        assert readyz(daemon)[1]["git"] == "ok"
        now = workloads(testenv, ns)
        assert now["ConfigMap/a"][1] == now["ConfigMap/b"][1] == how  # the whole new tip
        assert now["RayCluster/lab"] == good["RayCluster/lab"]
    assert daemon.proc.poll() is None

    # (c) history is force-pushed: the synced commit disappears from the branch. The new tip
    # is a valid revision: it is applied; what it still holds is not pruned.
    extra = remote.push("add c", {"c.yaml": configmap(ns, "c", "1")})
    wait_for(lambda: synced(daemon, extra) or None, timeout=60, what="c synced")
    with_c = workloads(testenv, ns)
    remote.work.git("reset", "-q", "--hard", f"{extra}~2")  # drop "add c" and its parent
    rewritten = remote.push("rewritten history", {"a.yaml": configmap(ns, "a", "rewritten")},
                            force=True)
    is_ancestor = subprocess.run(["git", "--git-dir", str(remote.bare), "merge-base",
                                  "--is-ancestor", extra, "main"], check=False)
    assert is_ancestor.returncode == 1  # the synced commit is gone from the branch
    wait_for(lambda: synced(daemon, rewritten) or None, timeout=60, what="rewritten tip")
    after = workloads(testenv, ns)
    assert "ConfigMap/c" not in after  # not in the new tip: pruned, as Git says
    assert after["ConfigMap/a"][1] == "rewritten"
    assert after["RayCluster/lab"] == with_c["RayCluster/lab"]  # still in the tip: untouched
    expected_b = git("--git-dir", str(remote.bare), "show", "main:b.yaml")
    assert f"value: {after['ConfigMap/b'][1]}" in expected_b
    wait_for(lambda: notes(remote.bare, rewritten).get("gitray", {}).get("state") == "success"
             or None, timeout=30, what="success status of the rewritten tip")
    assert f"sync {rewritten[:7]} (commit)" in messages(daemon)
    assert f"the synced commit {extra[:7]} is not an ancestor of {rewritten[:7]}" \
        in messages(daemon)
    assert daemon.get("/healthz")[0] == 200 and readyz(daemon)[1]["git"] == "ok"

    # (d) and it keeps following the branch
    final = remote.push("after the rewrite", {"b.yaml": configmap(ns, "b", "final")})
    wait_for(lambda: synced(daemon, final) or None, timeout=60, what="final sync")
    assert workloads(testenv, ns)["ConfigMap/b"][1] == "final"
    assert daemon.proc.poll() is None
    assert "Traceback" not in daemon.logs()
    print("\nGIT PROBLEMS REPORTED ON /readyz:\n" + "\n".join(f"  {k}: {v}"
                                                            for k, v in problems.items()))
