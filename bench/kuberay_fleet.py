"""Benchmark 6, "ten RayServices upgraded at once": both controllers, in turn, each in a fresh
namespace of the real-node environment. I/O.

N RayServices (``serve-0`` ... ``serve-{N-1}``, the benchmark's RayService with its head's CPU
request lowered to 50m so that 2N heads fit the node's 2 CPUs of allocatable) are rolled out
``ROLLOUT_BATCH`` at a time (Ray gives a starting raylet a fixed 30 s to register with its GCS;
ten heads starting at once on 2 cores miss it and crash-loop, measured), and serving; then one
change gives all N a new image (KubeRay: one ``kubectl apply`` of the N
objects; gitray: one commit of N files, ``gitray sync`` at its defaults — ``maxParallel`` 4).

Figures, each from the change landing: every serve Service selects a new cluster (s); the
controller reports done (s); every old cluster is deleted (s); API requests at the API server
(``apiserver_request_total``, all clients: the environment's controllers and KubeRay's
RayCluster controller run in both windows) from the change until done, and during the 60 s
after the old clusters are gone (steady state); for gitray also the requests its own process
sent (``bench/counted.py``). No traffic is sent: the per-RayService scenarios measure that.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.common import (
    OUT,
    Remote,
    SyncProc,
    apiserver_requests,
    delta,
    read_counts,
    say,
    start_sync,
    summarize,
)
from bench.kuberay_drivers import (
    ROLLOUT_TIMEOUT_S,
    bench_env,
    delete_namespace,
    rayclusters,
    rayservice_converged,
)
from testenv.helpers import TestEnv, make_namespace, wait_for
from testenv.manifests import dump, gitray_config

__all__ = ["FLEET_N", "run_fleet"]

FLEET_N = 10
HEAD_CPU = "50m"
STEADY_S = 60.0
CAP_S = 900.0
ROLLOUT_BATCH = 2


def _names(n: int) -> list[str]:
    return [f"serve-{i}" for i in range(n)]


class _KubeRayFleet:
    name = "KubeRay"

    def __init__(self, env: TestEnv, ns: str) -> None:
        self.env, self.ns = env, ns

    def apply(self, docs: list[dict[str, Any]], _message: str) -> float:
        self.env.kubectl("apply", "-n", self.ns, "-f", "-",
                         stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        return time.time()

    def done(self) -> bool:
        items = self.env.custom.list_namespaced_custom_object(
            "ray.io", "v1", self.ns, "rayservices")["items"]
        return bool(items) and all(rayservice_converged(obj) for obj in items)

    def own_requests(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


class _GitrayFleet:
    name = "gitray"

    def __init__(self, env: TestEnv, ns: str, work: Path) -> None:
        self.env, self.ns, self.work = env, ns, work
        self.remote = Remote.create(work / "git")
        self.sync: SyncProc | None = None
        self.sha = ""
        self._counted_before: dict[str, int] = {}

    def apply(self, docs: list[dict[str, Any]], message: str) -> float:
        files: dict[str, str | None] = {f"{d['metadata']['name']}.yaml": dump(d) for d in docs}
        if self.sync is None:
            files["gitray.yaml"] = gitray_config("60s", self.ns, ready_timeout="10m",
                                                 status={"provider": "git-notes"},
                                                 instance=f"gitray-{self.ns}")
        self.sha = self.remote.commit(message, files)
        if self.sync is None:
            self.sync = start_sync(bench_env(self.env), self.remote.bare, self.work,
                                   lease_ns=self.ns, interval="1s", counts=True,
                                   extra=["--deletion-interval", "2s"], name="fleet")
        return time.time()

    def done(self) -> bool:
        return self.sync is not None and self.sync.synced() == self.sha

    def own_requests(self) -> dict[str, int]:
        """Requests its process sent since the last call (bench/counted.py writes them)."""
        assert self.sync is not None and self.sync.counts is not None
        now = read_counts(self.sync.counts)
        out = {k: v - self._counted_before.get(k, 0) for k, v in now.items()
               if v - self._counted_before.get(k, 0)}
        self._counted_before = now
        return out

    def close(self) -> None:
        if self.sync is not None:
            self.sync.stop()


def _selected(env: TestEnv, ns: str, names: list[str]) -> dict[str, str]:
    """RayService -> the cluster its serve Service selects ('' while it has none)."""
    out = {}
    for svc in env.core.list_namespaced_service(ns).items:
        for name in names:
            if svc.metadata.name == f"{name}-serve-svc":
                out[name] = str((svc.spec.selector or {}).get("ray.io/cluster", ""))
    return out


def _clusters(env: TestEnv, ns: str) -> set[str]:
    return {i["metadata"]["name"] for i in rayclusters(env, ns)}


def _follow(env: TestEnv, ctl: _KubeRayFleet | _GitrayFleet, ns: str, old: dict[str, str],
            old_clusters: set[str], t0: float, before: Any) -> dict[str, Any]:
    """Sample every second from the change until every old cluster is gone (or CAP_S)."""
    switched: dict[str, float] = {}
    done_at = deleted_at = None
    out: dict[str, Any] = {}
    while time.time() - t0 < CAP_S:
        sel = _selected(env, ns, list(old))
        now = time.time()
        for name, cluster in sel.items():
            if cluster and cluster != old[name]:
                switched.setdefault(name, now)
        if done_at is None and len(switched) == len(old) and ctl.done():
            done_at = now
            d = summarize(delta(apiserver_requests(env), before))
            out["requests_upgrade"] = {"total": sum(d.values()), "by": d}
            out["own_requests_upgrade"] = ctl.own_requests()
        if done_at is not None and not (_clusters(env, ns) & old_clusters):
            deleted_at = now
            break
        time.sleep(1)
    return {**out,
            "switched_all_s": round(max(switched.values()) - t0, 1)
            if len(switched) == len(old) else None,
            "switched_first_s": round(min(switched.values()) - t0, 1) if switched else None,
            "done_s": round(done_at - t0, 1) if done_at else None,
            "old_deleted_s": round(deleted_at - t0, 1) if deleted_at else None,
            "capped": deleted_at is None}


def run_fleet(env: TestEnv, controller: str, docs_for: Any, n: int = FLEET_N) -> dict[str, Any]:
    """One controller's run. ``docs_for(ns, name, image_b)`` is the benchmark's manifest."""
    ns = make_namespace(env, f"vs-{'kr' if controller == 'KubeRay' else 'gr'}")
    names = _names(n)
    ctl: _KubeRayFleet | _GitrayFleet = _KubeRayFleet(env, ns) if controller == "KubeRay" \
        else _GitrayFleet(env, ns, OUT / "vs_kuberay" / ns)
    out: dict[str, Any] = {"namespace": ns, "n": n}
    say(f"  ten / {controller} in {ns}: rolling out {n} RayServices")
    try:
        t_roll = time.monotonic()
        for k in range(ROLLOUT_BATCH, n + ROLLOUT_BATCH, ROLLOUT_BATCH):
            batch = names[:k]
            ctl.apply([docs_for(ns, name, False) for name in batch], f"first rollout of {k}")

            def serving(batch: list[str] = batch) -> bool | None:
                sel = _selected(env, ns, batch)
                return (ctl.done() and len(sel) == len(batch) and all(sel.values())) or None
            wait_for(serving, ROLLOUT_TIMEOUT_S, interval=2,
                     what=f"{len(batch)} RayServices serving")
        out["rollout_s"] = round(time.monotonic() - t_roll, 1)
        old = _selected(env, ns, names)
        old_clusters = _clusters(env, ns)
        time.sleep(5)
        ctl.own_requests()
        before = apiserver_requests(env)
        t0 = ctl.apply([docs_for(ns, name, True) for name in names], "new image for all")
        out.update(_follow(env, ctl, ns, old, old_clusters, t0, before))
        if not out["capped"]:
            ctl.own_requests()
            steady_before = apiserver_requests(env)
            time.sleep(STEADY_S)
            d = summarize(delta(apiserver_requests(env), steady_before))
            out["requests_steady_per_min"] = {"total": round(sum(d.values()) * 60 / STEADY_S),
                                              "by": d}
            out["own_requests_steady"] = ctl.own_requests()
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
        say(f"  ten / {controller} FAILED: {out['error']}")
    finally:
        ctl.close()
        delete_namespace(env, ns, timeout=300)
    say(f"  ten / {controller}: { {k: v for k, v in out.items() if 'requests' not in k} }")
    return out
