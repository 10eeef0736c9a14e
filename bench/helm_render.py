"""Render cost of Helm charts (issue 32): N charts (default 100), each with a RayService template
and a values file, each a ``helm:`` entry of gitray.yaml with its own namespace. Needs only helm
(the one the test environment builds, testenv/helm.py) and no cluster.

Measured:
- ``gitray validate`` as its own process (every chart rendered: a cold memo), wall time;
- in one process, ``load_snapshot`` of the revision three times: first (N renders), again
  unchanged (the memo: 0 renders), and with one values file changed (1 render).

    python3 -m bench.helm_render [--charts 100]
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
from gitray.render import helm as runner
from testenv.helm import build_helm
from testenv.manifests import cluster_spec, dump, serve_config, write_files


def repository(root: Path, charts: int) -> None:
    service = {"apiVersion": "ray.io/v1", "kind": "RayService",
               "metadata": {"name": "svc", "namespace": "NAMESPACE"},
               "spec": {"serveConfigV2": serve_config(),
                        "rayClusterConfig": cluster_spec(max_replicas=999)}}
    template = (dump(service).replace("NAMESPACE", "{{ .Release.Namespace }}")
                .replace("maxReplicas: 999", "maxReplicas: {{ .Values.maxReplicas }}"))
    assert "{{ .Values.maxReplicas }}" in template
    entries = []
    files: dict[str, str | None] = {}
    for i in range(charts):
        chart = f"charts/svc-{i:03d}"
        files[f"{chart}/Chart.yaml"] = f"apiVersion: v2\nname: svc-{i:03d}\nversion: 0.1.0\n"
        files[f"{chart}/values.yaml"] = "maxReplicas: 2\n"
        files[f"{chart}/templates/rayservice.yaml"] = template
        files[f"values/env-{i:03d}.yaml"] = f"maxReplicas: {2 + i % 5}\n"
        entries.append(f"  - {{chart: {chart}, release: svc, namespace: env-{i:03d}, "
                       f"values: [values/env-{i:03d}.yaml]}}\n")
    files["gitray.yaml"] = ("apiVersion: gitray.io/v1alpha1\nkind: Config\n"
                            "allowedNamespaces: ['env-*']\nhelm:\n" + "".join(entries))
    write_files(root, files)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--charts", type=int, default=100)
    args = parser.parse_args()
    os.environ["GITRAY_HELM"] = str(build_helm(say=lambda m: None))
    with tempfile.TemporaryDirectory(prefix="gitray-bench-helm-") as tmp:
        root = Path(tmp) / "repo"
        repository(root, args.charts)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "gitray", "validate", "--repo", str(root)],
                              capture_output=True, text=True, check=False)
        process_s = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stdout, proc.stderr, file=sys.stderr)
            return 1
        snapshot = read_snapshot(str(root))
        rows = []
        for label in ("first load", "unchanged (memo)"):
            before, t0 = runner.RENDERS[0], time.monotonic()
            result = load_snapshot(snapshot, helm=runner.run)
            rows.append((label, time.monotonic() - t0, runner.RENDERS[0] - before,
                         len(result.workloads)))
        write_files(root, {"values/env-000.yaml": "maxReplicas: 9\n"})
        snapshot = read_snapshot(str(root))
        before, t0 = runner.RENDERS[0], time.monotonic()
        result = load_snapshot(snapshot, helm=runner.run)
        rows.append(("one values file changed", time.monotonic() - t0,
                     runner.RENDERS[0] - before, len(result.workloads)))
        if result.diagnostics:
            print("\n".join(map(str, result.diagnostics[:5])), file=sys.stderr)
            return 1
    print(f"{args.charts} charts; `gitray validate` process: {process_s:.2f} s")
    print("| load | seconds | helm runs | workloads |\n|---|---|---|---|")
    for label, seconds, renders, workloads in rows:
        print(f"| {label} | {seconds:.2f} | {renders} | {workloads} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
