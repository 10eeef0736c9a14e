"""Render cost of Kustomize overlays (issue 32): one base RayService and N overlays (default
100), each its own root with a namespace and a JSON patch. Needs only kustomize (the one the
test environment builds, testenv/kustomize.py) and no cluster.

Measured:
- ``gitray validate`` as its own process (every overlay rendered: a cold memo), wall time;
- in one process, ``load_snapshot`` of the revision three times: first (N renders), again
  unchanged (the memo: 0 renders), and with one overlay changed (1 render).

    python3 -m bench.kustomize_render [--overlays 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitray.git.source import read_snapshot
from gitray.plans.load import load_snapshot
from gitray.render import kustomize as runner
from testenv.kustomize import build_kustomize
from testenv.manifests import cluster_spec, dump, serve_config, write_files


def repository(root: Path, overlays: int) -> None:
    base = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "svc"},
            "spec": {"serveConfigV2": serve_config(), "rayClusterConfig": cluster_spec()}}
    files: dict[str, str | None] = {
        "gitray.yaml": "apiVersion: gitray.io/v1alpha1\nkind: Config\n"
                       "allowedNamespaces: ['env-*']\n",
        "base/rayservice.yaml": dump(base),
        "base/kustomization.yaml": "resources: [rayservice.yaml]\n",
    }
    for i in range(overlays):
        files[f"overlays/env-{i:03d}/kustomization.yaml"] = (
            f"namespace: env-{i:03d}\nresources: [../../base]\npatches:\n"
            "  - path: patch.yaml\n    target: {kind: RayService}\n")
        files[f"overlays/env-{i:03d}/patch.yaml"] = (
            "- op: replace\n  path: /spec/rayClusterConfig/workerGroupSpecs/0/maxReplicas\n"
            f"  value: {2 + i % 5}\n")
    write_files(root, files)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--overlays", type=int, default=100)
    args = parser.parse_args()
    binary = str(build_kustomize(say=lambda m: None))
    os.environ["GITRAY_KUSTOMIZE"] = binary
    with tempfile.TemporaryDirectory(prefix="gitray-bench-kustomize-") as tmp:
        root = Path(tmp) / "repo"
        repository(root, args.overlays)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "gitray", "validate", "--repo", str(root)],
                              capture_output=True, text=True, check=False)
        process_s = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        snapshot = read_snapshot(str(root))
        rows = []
        for label in ("first load", "unchanged (memo)"):
            before, t0 = runner.RENDERS[0], time.monotonic()
            result = load_snapshot(snapshot, kustomize=runner.run)
            rows.append((label, time.monotonic() - t0, runner.RENDERS[0] - before,
                         len(result.workloads)))
        write_files(root, {"overlays/env-000/patch.yaml":
                           (root / "overlays/env-000/patch.yaml").read_text() + "# edit\n"})
        snapshot = read_snapshot(str(root))
        before, t0 = runner.RENDERS[0], time.monotonic()
        result = load_snapshot(snapshot, kustomize=runner.run)
        rows.append(("one overlay changed", time.monotonic() - t0, runner.RENDERS[0] - before,
                     len(result.workloads)))
    print(f"{args.overlays} overlays; `gitray validate` process: {process_s:.2f} s")
    print("| load | seconds | kustomize runs | workloads |\n|---|---|---|---|")
    for label, seconds, renders, workloads in rows:
        print(f"| {label} | {seconds:.2f} | {renders} | {workloads} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
