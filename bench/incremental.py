"""Benchmark 7 — the incremental upgrade through a real Gateway, gitray beside KubeRay (issue 16).

Both controllers upgrade the same RayService (``serve-demo``: the examples' RayService sized for
the real node, head only, ``enableInTreeAutoscaling`` — KubeRay refuses the incremental upgrade
without it — serving ``hello:build``, whose answer is its greeting) with
``upgradeStrategy.type: NewClusterWithIncrementalUpgrade``, Gateway class ``traefik``
(Traefik v3.6.12 in the test environment), ``stepSizePercent`` 25, ``maxSurgePercent`` 50,
``intervalSeconds`` 15; gitray also reads the ``gitray.io/analysis`` annotation (Serve health
and a success rate >= 99 % of at least 20 requests, ``failureLimit`` 2), which KubeRay ignores.

- **KubeRay**: the RayService applied to the API server; its operator runs with the
  ``RayServiceIncrementalUpgrade`` feature gate (``scripts/testenv up --gateway``).
- **gitray**: the same manifest in a bare Git remote, the push webhook delivered as a Git host
  sends it; ``gitray sync --interval 1s``.

Versions: ``good`` (v2 answers every request) and ``bad`` (v2 answers every second request of
its replica with HTTP 500). Requests: 20/s through the Gateway, a new connection each
(testenv/load.py), from before the change until the upgrade ended (or the cap).
Measured: seconds from the change landing (``kubectl apply`` / ``git push`` returned) to the
HTTPRoute's first 100 % on the new cluster and to one cluster left; requests failed (and
answered by v2); the split observed per weight step (testenv/routes.py); the peak of
both clusters' Serve ``target_capacity`` summed (each cluster's dashboard, every 2 s); where
the traffic ended.

    python3 -m bench.incremental --state-dir DIR     # an environment from up --gateway
    python3 -m bench.incremental --runs OUT1 OUT2 OUT3   # several runs' incremental.json, one table
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import OUT, run_by_run, say
from bench.kuberay_drivers import (
    Controller,
    Gitray,
    KubeRay,
    delete_namespace,
    head_ip,
    rayclusters,
)
from bench.vs_kuberay import uptime
from testenv import control
from testenv.gatewayenv import GATEWAY_CLASS
from testenv.helpers import TestEnv, get_text, http_json, make_namespace, wait_for
from testenv.load import LoadGenerator
from testenv.rayservices import incremental_rayservice
from testenv.routes import RouteObserver, describe, periods

__all__ = ["manifest", "run", "runs_table", "table"]

SVC = "serve-demo"
RATE = 20.0
CAP_S = 600.0
# as testenv.rayservices.incremental_rayservice makes them
OPTIONS = {"gatewayClassName": GATEWAY_CLASS, "stepSizePercent": 25, "maxSurgePercent": 50,
           "intervalSeconds": 15}


def manifest(ns: str, version: int, metrics: str, fail_every: int = 0) -> dict[str, Any]:
    doc = incremental_rayservice(ns, version, metrics=metrics, name=SVC,
                                 gateway_class=GATEWAY_CLASS,
                                 interval=OPTIONS["intervalSeconds"], fail_every=fail_every)
    cluster = doc["spec"]["rayClusterConfig"]
    cluster["enableInTreeAutoscaling"] = True
    # the autoscaler sidecar reads the RayCluster with the pod's service account token
    cluster["headGroupSpec"]["template"]["spec"]["automountServiceAccountToken"] = True
    return doc


class Capacity:
    """Samples each live cluster's Serve target_capacity (its dashboard) every 2 s."""

    def __init__(self, env: TestEnv, ns: str) -> None:
        self.env, self.ns = env, ns
        self.peak_sum = 0.0
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="capacity")

    def _one(self, cluster: str) -> float | None:
        ip = head_ip(self.env, self.ns, cluster)
        if not ip:
            return None
        with contextlib.suppress(OSError, ValueError):
            status, body = http_json("GET", f"http://{ip}:8265/api/serve/applications/",
                                     timeout=3)
            if status == 200 and body.get("applications"):
                cap = body.get("target_capacity")
                return 100.0 if cap is None else float(cap)
        return None

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            with contextlib.suppress(Exception):
                caps = {c["metadata"]["name"]: self._one(c["metadata"]["name"])
                        for c in rayclusters(self.env, self.ns)
                        if not c["metadata"].get("deletionTimestamp")}
                known = {k: v for k, v in caps.items() if v is not None}
                self.samples.append((time.time(), known))
                self.peak_sum = max(self.peak_sum, sum(known.values()))

    def __enter__(self) -> Capacity:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


class KubeRayIncremental(KubeRay):
    """KubeRay with the incremental upgrade: it makes no stable ``<name>-serve-svc`` (the
    Gateway is the way in), so the first rollout is done when the RayService is Ready."""

    def rollout(self, doc: dict[str, Any]) -> float:
        t0 = time.monotonic()
        self._apply(doc)
        wait_for(self.converged, 600, interval=1, what=f"RayService {SVC} Ready")
        return time.monotonic() - t0


def _live(env: TestEnv, ns: str) -> list[str]:
    return sorted(c["metadata"]["name"] for c in rayclusters(env, ns)
                  if not c["metadata"].get("deletionTimestamp"))


def run_one(env: TestEnv, gateway: dict[str, str], controller: str,
            version: str) -> dict[str, Any]:
    ns = make_namespace(env, f"inc-{'kr' if controller == 'KubeRay' else 'gr'}")
    ctl: Controller = KubeRayIncremental(env, ns) if controller == "KubeRay" else \
        Gitray(env, ns, OUT / "incremental" / ns, ready_timeout="5m")
    url = f"{gateway['web']}/hello"
    out: dict[str, Any] = {"namespace": ns, "uptime_before": uptime()}
    say(f"  {version} / {controller} in {ns}")
    try:
        out["rollout_s"] = round(ctl.rollout(manifest(ns, 1, gateway["metrics"])), 1)
        wait_for(lambda: get_text(url, timeout=3) == "v1" or None, 300, interval=1,
                 what="v1 through the Gateway")
        (old,) = _live(env, ns)
        route = RouteObserver(env.custom, ns, f"{SVC}-httproute")
        with route as log, Capacity(env, ns) as cap, \
                LoadGenerator(url, rate=RATE, count=int(RATE * (CAP_S + 60)),
                              timeout=3) as load:
            time.sleep(3)
            t0 = ctl.change(manifest(ns, 2, gateway["metrics"],
                                     fail_every=2 if version == "bad" else 0), "v2")

            def ended() -> bool | None:
                live, last = _live(env, ns), log.last()
                if len(live) != 1 or not last:
                    return None
                if live != [old] and last.get(live[0]) == 100:
                    return True  # the new cluster took everything, the old one is gone
                return (live == [old] and last == {old: 100} and time.time() - t0 > 30
                        and any(w.get(old, 100) < 100 for _, w in log.changes)) or None
            with contextlib.suppress(TimeoutError, AssertionError):
                wait_for(ended, CAP_S, interval=1, what="the upgrade ended")
            done = time.time()
            time.sleep(6)
            lr = load.stop()
        ps = periods(log, lr)
        live = _live(env, ns)
        new = next((c for _, w in log.changes for c in w if c != old), None)
        full = log.first_at(new, 100) if new else None
        out.update({
            "ended_s": round(done - t0, 1) if done - t0 < CAP_S else None,
            "to_100_s": round(full - t0, 1) if full else None,
            "max_new_weight": log.max_weight(new) if new else 0,
            "end": "new" if live and live != [old] else "old" if live == [old] else str(live),
            "end_weights": log.last(),
            "requests": {"sent": lr.sent, "ok": lr.ok, "failed": lr.failed,
                         "failures": dict(lr.failures),
                         "answered_v2": lr.bodies.get("v2", 0),
                         "p50_ms": round(lr.percentile(50), 1),
                         "p99_ms": round(lr.percentile(99), 1)},
            "peak_capacity_sum": cap.peak_sum,
            "steps": [{"at_s": round(p.start - t0, 1), "weights": p.weights, "sent": p.sent,
                       "answers": p.answers} for p in ps],
        })
        say(describe(ps, "v2"))
        if controller == "gitray":
            out["status"] = ctl.failure()
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
        say(f"  {version} / {controller} FAILED: {out['error']}")
    finally:
        ctl.close()
        out["uptime_after"] = uptime()
        delete_namespace(env, ns)
    say(f"  {version} / {controller}: {json.dumps({k: v for k, v in out.items() if k != 'steps'})}")
    return out


def run(env: TestEnv, gateway: dict[str, str]) -> dict[str, Any]:
    results: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "options": OPTIONS, "rate": RATE, "runs": {}}
    OUT.mkdir(parents=True, exist_ok=True)  # (a new GITRAY_BENCH_OUT)
    for version in ("good", "bad"):
        for controller in ("KubeRay", "gitray"):
            results["runs"][f"{version}/{controller}"] = run_one(env, gateway, controller,
                                                                 version)
            (OUT / "incremental.json").write_text(json.dumps(results, indent=1))
    return results


def table(results: dict[str, Any]) -> str:
    rows = ["| version / controller | change → 100 % new | change → one cluster | requests "
            "sent / failed (answered by v2) | peak Serve capacity (sum) | traffic ended on |",
            "|---|---|---|---|---|---|"]
    for key, r in results["runs"].items():
        if "error" in r:
            rows.append(f"| {key} | error: {r['error']} | | | | |")
            continue
        q = r["requests"]
        rows.append(f"| {key} | {r['to_100_s'] if r['to_100_s'] is not None else 'never'} s "
                    f"| {r['ended_s'] if r['ended_s'] is not None else f'> {CAP_S:.0f}'} s | "
                    f"{q['sent']} / {q['failed']} ({q['answered_v2']}) | "
                    f"{r['peak_capacity_sum']:.0f} % | {r['end']} |")
    return "\n".join(rows)


def _seconds(values: list[float | None], absent: str) -> str:
    return run_by_run([absent if v is None else f"{v}" for v in values],
                      [v for v in values if v is not None], len(values))


def runs_table(runs: list[dict[str, Any]]) -> str:
    """Markdown: per version / controller, each figure run by run (in order), and the median
    of the times where every run gave one. Pure."""
    rows = ["| version / controller | change → 100 % new (s) | change → one cluster (s) | "
            "requests failed / sent | traffic ended on |", "|---|---|---|---|---|"]
    keys = list(runs[0]["runs"]) if runs else []
    for key in keys:
        results = [r["runs"].get(key, {"error": "not run"}) for r in runs]
        if any("error" in r for r in results):
            rows.append(f"| {key} | " + "; ".join(r.get("error", "ok") for r in results)
                        + " | | | |")
            continue
        rows.append(
            f"| {key} | {_seconds([r['to_100_s'] for r in results], 'never')} | "
            f"{_seconds([r['ended_s'] for r in results], f'> {CAP_S:.0f}')} | "
            + "; ".join(f"{r['requests']['failed']} / {r['requests']['sent']}"
                        for r in results)
            + " | " + "; ".join(r["end"] for r in results) + " |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.incremental")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir",
                       help="a running environment started with scripts/testenv up --gateway")
    where.add_argument("--runs", nargs="+", metavar="OUT",
                       help="GITRAY_BENCH_OUT directories of earlier runs: one table of them")
    args = p.parse_args(argv)
    if args.runs:
        print(runs_table([json.loads((Path(d) / "incremental.json").read_text())
                          for d in args.runs]))
        return 0
    state = control.State.load(Path(args.state_dir))
    if state is None or "traefik" not in state.components:
        print(f"{args.state_dir}: not an environment started with up --gateway",
              file=sys.stderr)
        return 2
    env = TestEnv.from_state_dir(Path(args.state_dir))
    comp = state.components["traefik"]
    results = run(env, {"web": comp["web"], "metrics": comp["metrics"]})
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
