"""Benchmark 3 — upgrade overhead: ``git push`` to convergence, minus the time Ray itself took.

One RayService, not suspended (a real Ray head + Serve from the environment's Ray pod runner),
followed by one ``gitray sync --interval 1s`` process (own instance, namespace and Lease).
After the first rollout has converged, each run pushes a commit and polls every 0.2 s:

- the namespace's RayClusters (a new one appearing: ``created``);
- the new head pod's IP, then the Ray dashboard on it: the first answer of
  ``/api/serve/applications/`` is ``ready`` (Ray up);
- the Serve application's ``last_deployed_time_s`` (Ray's own clock: ``deployed``) and the first
  poll seeing it ``RUNNING`` for that deployment (``running``);
- the daemon's ``gitray_last_synced_revision_info`` naming the pushed commit (``converged``).

Cluster change (blue-green): overhead = (converged - push) - (ready - created)
- (running - deployed), i.e. push->create + ready->deploy + running->converged.
Serve-only change: overhead = (converged - push) - (running - deployed).
All times are wall-clock seconds on this machine; polling adds up to 0.2 s per edge.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from typing import Any

from bench.common import (
    OUT,
    Env,
    Remote,
    dump_yaml,
    ensure_namespaces,
    gitray_config,
    rayservice,
    say,
    start_sync,
    stats,
    wait_for,
)

NS = "bench-upgrade"
LEASE_NS = "gitray-bench-upgrade"
INSTANCE = "bench-upgrade"
NAME = "up"


def _files(image: str, greeting: str) -> dict[str, str]:
    return {"gitray.yaml": gitray_config(instance=INSTANCE,
                                         rayService={"deletionDelay": "5s",
                                                     "clusterReadyTimeout": "5m",
                                                     "serveReadyTimeout": "5m"}),
            "svc.yaml": dump_yaml(rayservice(NAME, NS, image=image, greeting=greeting,
                                             suspend=False))}


def _clusters(env: Env) -> dict[str, dict[str, Any]]:
    items, _ = env.kube().list("ray.io/v1", "RayCluster", namespace=NS)
    return {i["metadata"]["name"]: i for i in items
            if not i["metadata"].get("deletionTimestamp")}


def _head_ip(env: Env, cluster: str) -> str:
    pods, _ = env.kube().list("v1", "Pod", namespace=NS,
                              label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head")
    for p in pods:
        ip = (p.get("status") or {}).get("podIP") or (p.get("status") or {}).get("pod_ip")
        if ip:
            return str(ip)
    return ""


def _apps(ip: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:8265/api/serve/applications/",
                                    timeout=2) as r:
            data = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return dict(data.get("applications") or {})


def _serving(env: Env) -> str:
    svc = env.kube().get_or_none("v1", "Service", NS, f"{NAME}-serve-svc")
    return str((((svc or {}).get("spec") or {}).get("selector") or {}).get("ray.io/cluster", ""))


def _follow(env: Env, sync: Any, sha: str, old: set[str], active_ip: str,
            since_deploy: float, timeout: float = 600) -> dict[str, float | None]:
    """Poll until ``sha`` converged; timestamps of the edges described above."""
    t: dict[str, float | None] = {"created": None, "ready": None, "deployed": None,
                                  "running": None, "converged": None}
    cluster, ip = "", active_ip
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        now = time.time()
        if not active_ip and not cluster:
            new = set(_clusters(env)) - old
            if new:
                cluster = sorted(new)[0]
                t["created"] = now
        if cluster and not ip:
            ip = _head_ip(env, cluster)
        if ip and (t["running"] is None):
            apps = _apps(ip)
            if apps is not None and t["ready"] is None:
                t["ready"] = now
            app = (apps or {}).get("hello") or {}
            deployed = float(app.get("last_deployed_time_s") or 0)
            if deployed > since_deploy:
                t["deployed"] = deployed
                if app.get("status") == "RUNNING":
                    t["running"] = now
        if sync.synced() == sha:
            t["converged"] = time.time()
            break
        time.sleep(0.2)
    return t


def _one(env: Env, remote: Remote, sync: Any, files: dict[str, str], serve_only: bool,
         label: str) -> dict[str, Any]:
    clusters = _clusters(env)
    active = _serving(env)
    active_ip = _head_ip(env, active) if serve_only else ""
    before = (_apps(active_ip) or {}).get("hello", {}) if serve_only else {}
    since = float(before.get("last_deployed_time_s") or 0) if serve_only else 0.0
    sha = remote.commit(label, files, push=False)
    t_push = time.time()
    from bench.common import git

    git(remote.work, "push", "-q", "origin", "main")
    t = _follow(env, sync, sha, set(clusters), active_ip, since)
    out: dict[str, Any] = {"kind": "serve-only" if serve_only else "cluster change",
                           "sha": sha[:7]}
    for k, v in t.items():
        out[f"{k}_s"] = round(v - t_push, 2) if v else None
    if not t["converged"]:
        out["error"] = "did not converge"
        return out
    total = t["converged"] - t_push
    serve = (t["running"] - t["deployed"]) if t["running"] and t["deployed"] else None
    out["total_s"] = round(total, 2)
    out["serve_s"] = round(serve, 2) if serve is not None else None
    if serve_only:
        out["ray_s"] = out["serve_s"]
        if t["deployed"] and t["running"]:
            out["push_to_deploy_s"] = round(t["deployed"] - t_push, 2)
            out["running_to_converged_s"] = round(t["converged"] - t["running"], 2)
    else:
        ready = (t["ready"] - t["created"]) if t["ready"] and t["created"] else None
        out["cluster_ready_s"] = round(ready, 2) if ready is not None else None
        out["ray_s"] = round(ready + serve, 2) if ready is not None and serve is not None \
            else None
        if t["created"] and t["ready"] and t["deployed"] and t["running"]:
            out["push_to_create_s"] = round(t["created"] - t_push, 2)
            out["ready_to_deploy_s"] = round(t["deployed"] - t["ready"], 2)
            out["running_to_converged_s"] = round(t["converged"] - t["running"], 2)
    out["overhead_s"] = round(total - out["ray_s"], 2) if out.get("ray_s") is not None \
        else None
    say(f"  {out['kind']}: total {out['total_s']}s, Ray {out.get('ray_s')}s, "
        f"gitray overhead {out['overhead_s']}s")
    return out


def run(env: Env, runs: int) -> dict[str, Any]:
    say(f"upgrade overhead: {runs} cluster change(s) + {runs} Serve-only change(s)")
    work = OUT / "upgrade"
    remote = Remote.create(work / "git")
    ensure_namespaces(env, [NS, LEASE_NS])
    sha = remote.commit("first rollout", _files("rayproject/ray:2.60.0", "v0"))
    sync = start_sync(env, remote.bare, work, lease_ns=LEASE_NS, interval="1s",
                      extra=["--deletion-interval", "2s"], name="upgrade")
    samples: list[dict[str, Any]] = []
    try:
        t0 = time.time()
        wait_for(lambda: sync.synced() == sha, 600, "the first rollout", interval=0.5)
        first = round(time.time() - t0, 1)
        say(f"  first rollout converged in {first}s")
        for i in range(runs):
            wait_for(lambda: len(_clusters(env)) == 1, 180, "the old cluster to be deleted",
                     interval=0.5)
            samples.append(_one(env, remote, sync,
                                _files(f"rayproject/ray:2.60.{i + 1}", f"v{i}"), False,
                                f"upgrade {i + 1}"))
            samples.append(_one(env, remote, sync,
                                _files(f"rayproject/ray:2.60.{i + 1}", f"v{i}-serve"), True,
                                f"serve-only {i + 1}"))
    finally:
        sync.stop()
        with contextlib.suppress(Exception):
            env.kubectl("delete", "namespace", NS, "--wait=true", "--timeout=180s",
                        timeout=240)
    result: dict[str, Any] = {"first_rollout_s": first, "samples": samples}
    for kind in ("cluster change", "serve-only"):
        mine = [s for s in samples if s["kind"] == kind]
        result[kind] = {k: stats(s[k] for s in mine if s.get(k) is not None)
                        for k in ("total_s", "ray_s", "overhead_s", "push_to_create_s",
                                  "ready_to_deploy_s", "push_to_deploy_s",
                                  "running_to_converged_s")}
    return result


def table(r: dict[str, Any]) -> str:
    rows = ["| change | run | push -> converged | Ray: cluster ready + Serve RUNNING "
            "| gitray overhead | push -> cluster created | Ray ready -> Serve deploy "
            "| push -> Serve deploy (Serve-only) | Serve RUNNING -> converged |",
            "|---|---|---|---|---|---|---|---|---|"]

    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.2f} s"

    for i, s in enumerate(r["samples"]):
        ray = f(s.get("ray_s"))
        if s["kind"] == "cluster change" and s.get("cluster_ready_s") is not None:
            ray += f" ({f(s['cluster_ready_s'])} + {f(s.get('serve_s'))})"
        rows.append(f"| {s['kind']} | {i // 2 + 1} | {f(s.get('total_s'))} | {ray} "
                    f"| **{f(s.get('overhead_s'))}** | {f(s.get('push_to_create_s'))} "
                    f"| {f(s.get('ready_to_deploy_s'))} | {f(s.get('push_to_deploy_s'))} "
                    f"| {f(s.get('running_to_converged_s'))} |")
    return f"First rollout: {r['first_rollout_s']} s.\n\n" + "\n".join(rows)
