"""`gitray apply` drives the fleet controller's engine in the foreground (issue 26 item 6): a
wave's supporting objects first, its Ray workloads side by side, and a failed wave stops the
waves after it — against the real API server, KubeRay operator and node."""

from __future__ import annotations

from pathlib import Path

from testenv.helpers import TestEnv
from testenv.manifests import dump, gitray_config
from testenv.rayservices import real_node_rayservice
from tests.integration.gitops import GitOpsRepo, Gitray, output

# an image no registry serves: its pods never start (the pull fails on loopback), so each
# RayService's pending cluster fails its 5 s wait-cluster-ready and is cleaned up
MISSING = "localhost/gitray-test-missing:0"


def configmap(ns: str, name: str, wave: int = 0) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "namespace": ns}
    if wave:
        meta["annotations"] = {"gitray.io/wave": str(wave)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": name}}


def test_apply_runs_a_wave_side_by_side_and_a_failed_wave_stops_the_next(
        testenv: TestEnv, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    repo.commit("two waves", {
        "gitray.yaml": gitray_config(namespace=ns, ready_timeout="5s"),
        "cfg.yaml": dump(configmap(ns, "first"), configmap(ns, "later", wave=1)),
        "one.yaml": dump(real_node_rayservice(ns, image=MISSING, name="one")),
        "two.yaml": dump(real_node_rayservice(ns, image=MISSING, name="two")),
    })
    r = gitray.run("apply", "--yes", "--repo", str(repo.path))
    assert r.returncode == 1 and "Traceback" not in r.stderr, output(r)
    lines = r.stdout.splitlines()

    def first(*parts: str) -> int:
        return next(i for i, line in enumerate(lines) if all(p in line for p in parts))

    # wave 0: the supporting object first, then both RayServices side by side (each waited
    # for its cluster before either failed), each failing on its own
    cm_done = first(f"[{ns}/ConfigMap/first] 1/1 ", ": done")
    waits = [first(f"[{ns}/RayService/{name}] 2/") for name in ("one", "two")]
    failures = [i for i, line in enumerate(lines) if ": FAILED: " in line]
    assert failures and cm_done < min(waits) and max(waits) < min(failures), output(r)
    for name in ("one", "two"):
        assert f"{ns}/RayService/{name} failed: " in r.stderr, output(r)
    # wave 1 never starts
    assert f"gitray: {ns}/ConfigMap/later not run: wave 0 failed" in r.stderr, output(r)
    assert "1 workload(s) converged, 2 failed, 1 not run." in r.stdout, output(r)
    names = {c.metadata.name for c in testenv.core.list_namespaced_config_map(ns).items}
    assert "first" in names and "later" not in names
