"""Benchmark 3 — upgrade overhead: ``git push`` to convergence, minus the time Ray itself took.

One RayService, not suspended (a real Ray head + Serve from the environment's Ray pod runner),
followed by one ``gitray sync --interval 1s`` process (own instance, namespace and Lease).
After the first rollout has converged, each run pushes a commit and polls every 0.2 s:

- the namespace's RayClusters (a new one appearing: ``created``);
- the new head pod, and the environment's Ray pod runner reporting Ray + Serve started for
  that pod (``<state>/ray-heads/*.json``, matched by pod uid): ``ready`` (kwok reuses pod IPs
  at once, so the dashboard answering on the new IP is not proof: it can be a deleted pod's
  head for a few seconds);
- the new RayCluster's status turning ready, as gitray's wait-cluster-ready step reads it
  (``state: ready`` or the ``HeadPodReady`` condition: ``kuberay_ready``), to tell KubeRay's
  own delay from gitray's in "Ray ready -> Serve deploy";
- the Serve application's ``last_deployed_time_s`` (Ray's own clock: ``deployed``) and the first
  poll seeing it ``RUNNING`` for that deployment (``running``);
- the daemon's ``gitray_last_synced_revision_info`` naming the pushed commit (``converged``);
- from the daemon's log, when its deploy-serve step logged "Serve config sent" (``sent``).

Before each push the benchmark waits until the runner has stopped the Ray head of the cluster
deleted last. kwok hands a new pod a freed IP at once; a deleted head still running there
accepts the new cluster's Serve config within a second, the new head then starts without it,
and gitray re-sends it only once Serve reports no applications 15 s after the first PUT
(``REDEPLOY_AFTER_S``): the 4.47 s outlier of session 2. A real pod network does not reuse an
IP while its old process still serves. ``sent`` before ``ready`` in a sample shows the case.

gitray's overhead (see ``derive``): cluster change = push->created + ready->deployed (0 when
gitray deployed before the runner reported the head ready) + running->converged; Serve-only
change = push->deployed + running->converged. Ray's time is the rest of push->converged.
All times are wall-clock seconds on this machine; polling adds up to 0.2 s per edge.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from datetime import datetime
from typing import Any

from bench.common import (
    OUT,
    Env,
    Remote,
    bench_config,
    dump,
    ensure_namespaces,
    rayservice,
    say,
    start_sync,
    stats,
    wait_for,
)
from gitray.engine.actions import cluster_ready

NS = "bench-upgrade"
LEASE_NS = "gitray-bench-upgrade"
INSTANCE = "bench-upgrade"
NAME = "up"


def _files(image: str, greeting: str) -> dict[str, str]:
    return {"gitray.yaml": bench_config(instance=INSTANCE,
                                         rayService={"deletionDelay": "5s",
                                                     "clusterReadyTimeout": "5m",
                                                     "serveReadyTimeout": "5m"}),
            "svc.yaml": dump(rayservice(NAME, NS, image=image, greeting=greeting,
                                             suspend=False))}


def _clusters(env: Env) -> dict[str, dict[str, Any]]:
    items, _ = env.kube().list("ray.io/v1", "RayCluster", namespace=NS)
    return {i["metadata"]["name"]: i for i in items
            if not i["metadata"].get("deletionTimestamp")}


def _head(env: Env, cluster: str) -> tuple[str, str]:
    """(pod IP, pod uid) of the cluster's head pod, once it has an IP."""
    pods, _ = env.kube().list("v1", "Pod", namespace=NS,
                              label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head")
    for p in pods:
        ip = (p.get("status") or {}).get("podIP") or (p.get("status") or {}).get("pod_ip")
        if ip:
            return str(ip), str(p["metadata"]["uid"])
    return "", ""


def _head_ip(env: Env, cluster: str) -> str:
    return _head(env, cluster)[0]


def _head_records(env: Env) -> list[dict[str, Any]]:
    """The environment's Ray pod runner's records of the heads it has not stopped yet."""
    records = []
    for record in (env.state_dir / "ray-heads").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(record.read_text()))
    return records


def _runner_ready(env: Env, uid: str) -> bool:
    """The environment's Ray pod runner reports Ray + Serve up for this very pod.

    kwok reuses pod IPs at once, so for a moment the new pod's IP can still reach the Ray head
    of a deleted pod: the dashboard answering is not enough to know the new head is up.
    """
    return any(r.get("uid") == uid and r.get("ready") for r in _head_records(env))


def _heads_running(env: Env) -> int:
    """Ray heads of this benchmark's namespace the runner has not stopped yet."""
    return sum(1 for r in _head_records(env) if r.get("namespace") == NS)


def _sent_at(sync: Any, since: float) -> float | None:
    """Epoch time of the daemon's first "Serve config sent" log line after ``since``."""
    with contextlib.suppress(OSError):
        for line in sync.log.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "deploy-serve: Serve config sent" not in str(entry.get("msg", "")):
                continue
            stamp = datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00"))
            if stamp.timestamp() >= since:
                return stamp.timestamp()
    return None


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
    t: dict[str, float | None] = {"created": None, "ready": None, "kuberay_ready": None,
                                  "deployed": None, "running": None, "converged": None}
    cluster, ip, uid = "", active_ip, ""
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        now = time.time()
        if not active_ip and not cluster:
            new = set(_clusters(env)) - old
            if new:
                cluster = sorted(new)[0]
                t["created"] = now
        if cluster and not uid:
            ip, uid = _head(env, cluster)
        if uid and t["ready"] is None and _runner_ready(env, uid):
            t["ready"] = now
        if cluster and t["kuberay_ready"] is None:
            live = env.kube().get_or_none("ray.io/v1", "RayCluster", NS, cluster)
            if live is not None and cluster_ready(live):
                t["kuberay_ready"] = now
        if ip and (active_ip or t["ready"]) and t["running"] is None:
            apps = _apps(ip)
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
    t = _follow(env, sync, sha, set(clusters), active_ip, since if serve_only else t_push)
    out: dict[str, Any] = {"kind": "serve-only" if serve_only else "cluster change",
                           "sha": sha[:7]}
    t["sent"] = _sent_at(sync, t_push)
    for k, v in t.items():
        out[f"{k}_s"] = round(v - t_push, 2) if v else None
    if not t["converged"]:
        out["error"] = "did not converge"
        return out
    derive(out)
    say(f"  {out['kind']}: total {out['total_s']}s, Ray {out.get('ray_s')}s, "
        f"gitray overhead {out.get('overhead_s')}s")
    return out


def derive(out: dict[str, Any]) -> dict[str, Any]:
    """Split push -> converged (all relative to the push) into Ray's time and gitray's.

    gitray's own time is push -> cluster created, Ray ready -> Serve deploy (0 when gitray's
    deploy was accepted before the runner even reported the head ready: the Serve REST API
    accepting the deploy is then the readiness signal), and Serve RUNNING -> converged
    (Service switches, deletion schedule, bookkeeping). For a Serve-only change: push ->
    deploy and RUNNING -> converged. Ray's time is the rest.
    """
    g = {k: out.get(f"{k}_s") for k in ("created", "ready", "deployed", "running", "converged")}
    total = g["converged"]
    out["total_s"] = total
    if g["deployed"] is not None and g["running"] is not None:
        out["serve_s"] = round(g["running"] - g["deployed"], 2)
        out["running_to_converged_s"] = round(total - g["running"], 2)
    if out["kind"] == "serve-only":
        if g["deployed"] is None or g["running"] is None:
            return out
        out["push_to_deploy_s"] = g["deployed"]
        overhead = g["deployed"] + out["running_to_converged_s"]
    else:
        if None in g.values():
            return out
        ready = min(g["ready"], g["deployed"])
        out["cluster_ready_s"] = round(ready - g["created"], 2)
        out["push_to_create_s"] = g["created"]
        out["ready_to_deploy_s"] = round(g["deployed"] - ready, 2)
        if out.get("kuberay_ready_s") is not None:
            # KubeRay's verdict (what gitray waits for) after Ray itself was up, and the deploy
            # after that verdict: the two parts of ready_to_deploy
            out["kuberay_lag_s"] = round(out["kuberay_ready_s"] - g["ready"], 2)
            out["verdict_to_deploy_s"] = round(g["deployed"] - out["kuberay_ready_s"], 2)
        overhead = g["created"] + out["ready_to_deploy_s"] + out["running_to_converged_s"]
    out["overhead_s"] = round(overhead, 2)
    out["ray_s"] = round(total - overhead, 2)
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
        wait_for(lambda: sync.synced() == sha, 600, interval=0.5, what="the first rollout")
        first = round(time.time() - t0, 1)
        say(f"  first rollout converged in {first}s")
        for i in range(runs):
            wait_for(lambda: len(_clusters(env)) == 1, 180, interval=0.5,
                     what="the old cluster to be deleted")
            wait_for(lambda: _heads_running(env) <= 1, 180, interval=0.2,
                     what="the deleted cluster's Ray head to stop")
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
    return summarize_samples({"first_rollout_s": first, "samples": samples})


def summarize_samples(result: dict[str, Any]) -> dict[str, Any]:
    samples = [derive(s) for s in result["samples"]]
    for kind in ("cluster change", "serve-only"):
        mine = [s for s in samples if s["kind"] == kind]
        result[kind] = {k: stats(s[k] for s in mine if s.get(k) is not None)
                        for k in ("total_s", "ray_s", "overhead_s", "push_to_create_s",
                                  "ready_to_deploy_s", "kuberay_lag_s", "verdict_to_deploy_s",
                                  "push_to_deploy_s", "running_to_converged_s")}
    return result


def table(r: dict[str, Any]) -> str:
    rows = ["| change | run | push -> converged | Ray: cluster ready + Serve RUNNING "
            "| gitray overhead | push -> cluster created | push -> gitray logs 'config sent' "
            "| Ray ready -> Serve deploy "
            "| of which: Ray ready -> KubeRay says ready | KubeRay ready -> Serve deploy "
            "| push -> Serve deploy (Serve-only) | Serve RUNNING -> converged |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.2f} s"

    for i, s in enumerate(r["samples"]):
        ray = f(s.get("ray_s"))
        if s["kind"] == "cluster change" and s.get("cluster_ready_s") is not None:
            ray += f" ({f(s['cluster_ready_s'])} + {f(s.get('serve_s'))})"
        rows.append(f"| {s['kind']} | {i // 2 + 1} | {f(s.get('total_s'))} | {ray} "
                    f"| **{f(s.get('overhead_s'))}** | {f(s.get('push_to_create_s'))} "
                    f"| {f(s.get('sent_s'))} "
                    f"| {f(s.get('ready_to_deploy_s'))} | {f(s.get('kuberay_lag_s'))} "
                    f"| {f(s.get('verdict_to_deploy_s'))} | {f(s.get('push_to_deploy_s'))} "
                    f"| {f(s.get('running_to_converged_s'))} |")
    return f"First rollout: {r['first_rollout_s']} s.\n\n" + "\n".join(rows)
