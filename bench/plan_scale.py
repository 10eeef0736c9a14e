"""Benchmark 1 — plan at scale: ``gitray plan --against live`` next to ``kubectl diff``.

For each size N: a generated repository with N RayServices + N RayClusters across 10
namespaces (all suspended: KubeRay creates no pods), the same objects live in the real API
server (``materialize()`` of the base revision, server-side applied with field manager gitray),
then 5% of the workloads changed in the working tree (half of the changed RayServices get a
new image — a blue-green upgrade — the other half a Serve-only change; the changed RayClusters
a new maxReplicas). Measured, as separate processes:

- ``gitray plan --against live`` (warm: one untimed run first, then ``runs`` timed runs):
  wall time, peak RSS (wait4), requests counted by the API server (apiserver_request_total
  delta) and by gitray's client (bench/counted.py);
- ``kubectl diff --server-side -f`` of the objects gitray would apply for the changed
  revision (the same set ``materialize()`` gives), with the environment's kubectl.
"""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import (
    NAMESPACES,
    OUT,
    Env,
    Fleet,
    apply_objects,
    changed_indexes,
    delta,
    desired_objects,
    dump,
    ensure_namespaces,
    gitray_argv,
    gitray_env,
    read_counts,
    run_measured,
    say,
    summarize,
    wait_for,
    write_tree,
)

KINDS = {"rayclusters", "rayjobs", "services", "configmaps"}
_SUMMARY = re.compile(r"^Plan: .*$", re.MULTILINE)


def populate(env: Env, n: int) -> dict[str, Any]:
    """The base revision of Fleet(n) live in the API server (idempotent, incremental)."""
    base = OUT / f"plan-{n}" / "base"
    write_tree(base, Fleet(n).files())
    ensure_namespaces(env, NAMESPACES)
    objects = desired_objects(base)
    seconds = apply_objects(env, objects)
    say(f"  {len(objects)} objects live for N={n} (applied the missing ones in {seconds:.0f}s)")
    settle(env)
    return {"objects": len(objects), "apply_s": round(seconds, 1)}


def settle(env: Env, timeout: float = 600) -> None:
    """Wait until KubeRay has caught up (no more writes for a few seconds)."""
    def quiet() -> bool:
        before = env.metrics()
        time.sleep(3)
        writes = sum(v for (verb, res, *_), v in delta(env.metrics(), before).items()
                     if verb in {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
                     and res not in {"leases", "events", "subjectaccessreviews",
                                     "tokenreviews"})
        return writes <= 3

    wait_for(quiet, timeout, interval=0, what="KubeRay to settle")


def _plan_once(env: Env, repo: Path, counts: Path) -> dict[str, Any]:
    before = env.metrics()
    m = run_measured(gitray_argv("plan", "--repo", str(repo), "--against", "live",
                                 "--kubeconfig", env.kubeconfig, "--detailed-exitcode",
                                 counts=counts), env=gitray_env())
    d = delta(env.metrics(), before)
    if m.returncode not in (0, 2):
        raise RuntimeError(f"gitray plan failed ({m.returncode}): {m.stderr[-2000:]}")
    found = _SUMMARY.search(m.stdout)
    return {**m.brief(), "summary": found.group(0) if found else "",
            "apiserver": summarize(d, KINDS), "apiserver_all": sum(d.values()),
            "client": read_counts(counts)}


def _kubectl_diff(env: Env, repo: Path, work: Path) -> dict[str, Any]:
    objects = desired_objects(repo)
    manifests = work / "kubectl-manifests"
    files: dict[str, str] = {}
    for ns in NAMESPACES:
        docs = [o for o in objects if o["metadata"]["namespace"] == ns]
        if docs:
            files[f"{ns}.yaml"] = dump(*docs)
    write_tree(manifests, files)
    before = env.metrics()
    m = run_measured([env.kubectl_path, "--kubeconfig", env.kubeconfig, "diff",
                      "--server-side", "--field-manager=gitray", "--force-conflicts",
                      "-f", str(manifests)], timeout=3600)
    d = delta(env.metrics(), before)
    if m.returncode not in (0, 1):
        raise RuntimeError(f"kubectl diff failed ({m.returncode}): {m.stderr[-2000:]}")
    changed = len(re.findall(r"^diff -u -N ", m.stdout, re.MULTILINE))
    return {**m.brief(), "objects": len(objects), "objects_with_diff": changed,
            "apiserver": summarize(d, KINDS), "apiserver_all": sum(d.values())}


def run(env: Env, sizes: list[int], runs: int = 3, kubectl_max: int = 1000,
        warmup: bool = True) -> dict[str, Any]:
    results: dict[str, Any] = {"sizes": {}}
    for n in sizes:
        say(f"plan at scale: N={n}")
        work = OUT / f"plan-{n}"
        pop = populate(env, n)
        repo = work / "changed"
        changed = changed_indexes(n)
        write_tree(repo, Fleet(n, changed).files())
        counts = work / "counts.json"
        nochange = None
        if warmup:  # discovery cache, page cache; and the plan with nothing to change
            _plan_once(env, work / "base", counts)
            nochange = _plan_once(env, work / "base", counts)
        timed = [_plan_once(env, repo, counts) for _ in range(runs)]
        best = sorted(timed, key=lambda r: r["wall_s"])[len(timed) // 2]
        entry: dict[str, Any] = {
            "workloads": 2 * n, "changed_workloads": 2 * len(changed), **pop,
            "gitray_no_changes": nochange,
            "gitray_runs_wall_s": [r["wall_s"] for r in timed],
            "gitray": best,
            "gitray_median_wall_s": statistics.median(r["wall_s"] for r in timed),
            "gitray_max_rss_mb": max(r["max_rss_mb"] for r in timed),
            "gitray_median_cpu_s": statistics.median(r["cpu_s"] for r in timed),
        }
        if n <= kubectl_max:
            say(f"  kubectl diff on {pop['objects']} objects")
            entry["kubectl"] = _kubectl_diff(env, repo, work)
            entry["ratio"] = round(entry["kubectl"]["wall_s"] / entry["gitray_median_wall_s"],
                                   1)
        say(f"  N={n}: gitray {entry['gitray_median_wall_s']:.2f}s "
            f"{entry['gitray_max_rss_mb']:.0f} MB; "
            + (f"kubectl diff {entry['kubectl']['wall_s']:.1f}s (x{entry['ratio']})"
               if "kubectl" in entry else "kubectl diff not run"))
        results["sizes"][str(n)] = entry
    return results


def _reqs(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "-"


def table(res: dict[str, Any]) -> str:
    rows = ["| N RayServices + N RayClusters | objects live | changed workloads "
            "| gitray plan wall (each run) | gitray CPU | gitray peak RSS "
            "| gitray's requests (its client) | API server: requests for these kinds during the "
            "plan (all clients) | kubectl diff wall | kubectl CPU | kubectl peak RSS "
            "| kubectl's requests at the API server | kubectl wall / gitray wall |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, e in sorted(res["sizes"].items(), key=lambda kv: int(kv[0])):
        k = e.get("kubectl")
        runs = ", ".join(f"{w:.1f}" for w in e["gitray_runs_wall_s"])
        cpu = e.get("gitray_median_cpu_s", e["gitray"]["cpu_s"])
        kwall = f"{k['wall_s']:.1f} s" if k else "not run"
        kcpu = f"{k['cpu_s']:.1f} s" if k else "-"
        krss = f"{k['max_rss_mb']:.0f} MB" if k else "-"
        kreq = _reqs(k["apiserver"]) if k else "-"
        ratio = f"{e['ratio']}x" if k else "-"
        rows.append(
            f"| {n} + {n} | {e['objects']} | {e['changed_workloads']} "
            f"| {e['gitray_median_wall_s']:.1f} s ({runs}) | {cpu:.1f} s "
            f"| {e['gitray_max_rss_mb']:.0f} MB | {_reqs(e['gitray']['client'])} "
            f"| {_reqs(e['gitray']['apiserver'])} | {kwall} | {kcpu} | {krss} | {kreq} "
            f"| {ratio} |")
    return "\n".join(rows)
