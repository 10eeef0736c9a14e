"""Benchmark 6 — gitray side by side with KubeRay's own RayService controller (issue 14).

For each scenario both controllers run in turn, each in a fresh namespace of the same real-node
environment, on the same RayService (``serve-demo``: the examples' RayService sized for the real
node — ``real_raycluster_spec``, head only unless said — serving the ``hello:build`` app, whose
answer is its ``greeting`` argument), with real requests (10/s, a new connection each) to the
serve Service's ClusterIP throughout (``testenv/load.py``):

- **KubeRay**: the RayService applied to the API server; the operator's RayService controller.
- **gitray**: the same manifest committed to a bare Git remote, the push webhook delivered as a
  Git host sends it (signed, right after the push returned); ``gitray sync --interval 1s``.

Scenarios: ``image`` (blue-green), ``serve`` (Serve config only), ``bad-import``,
``unschedulable`` (pending cluster never ready), ``image-serve`` (both at once), ``revert``
(revert while the upgrade is in flight), ``kill`` (controller SIGKILLed mid-upgrade and started
again: gitray's leader process; KubeRay's operator only on an environment this benchmark
started — on one given with --state-dir it may serve others). Times are wall-clock
seconds from the change landing (``kubectl apply`` returned / ``git push`` returned), taken from
samples every 0.5 s (``bench/kuberay_drivers.py``); figures are one run each.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from typing import Any

from bench.common import OUT, hello_serve_config, say
from bench.kuberay_drivers import (
    Controller,
    Gitray,
    KubeRay,
    Observer,
    delete_namespace,
    serve_apps,
    serve_url,
)
from bench.kuberay_fleet import HEAD_CPU, run_fleet
from testenv.helpers import RAY_IMAGE, TestEnv, make_namespace
from testenv.load import LoadGenerator, LoadResult
from testenv.rayservices import NEW_IMAGE, real_node_rayservice

__all__ = ["DEFAULT_SCENARIOS", "SCENARIOS", "manifest", "run", "tables"]

SCENARIOS = ["image", "serve", "bad-import", "unschedulable", "image-serve", "revert", "kill",
             "ten"]
# "ten" needs room for 20 Ray heads at once: on this 2-core machine 8 idle heads already
# saturated the CPUs and the 9th crash-looped (bench/README.md), so it runs only when asked for
DEFAULT_SCENARIOS = [x for x in SCENARIOS if x != "ten"]
IMAGE_B = NEW_IMAGE  # the same local build under its other tag
BROKEN_APP = ("  - name: broken\n    route_prefix: /broken\n"
              "    import_path: serve_apps.missing:app\n")
RATE = 10.0
TICK = 0.5


def manifest(ns: str, *, image: str = RAY_IMAGE, greeting: str = "v1", workers: int = 0,
             head_cpu: str | None = None, broken: bool = False,
             name: str = "serve-demo") -> dict[str, Any]:
    """The benchmark's RayService: the examples' one, with a cluster sized for the real node."""
    serve = hello_serve_config(greeting=greeting) + (BROKEN_APP if broken else "")
    return real_node_rayservice(ns, image, serve, workers=workers, head_cpu=head_cpu, name=name)


def fleet_manifest(ns: str, name: str, new_image: bool) -> dict[str, Any]:
    """One of the "ten" scenario's RayServices (head CPU request lowered: 2N heads fit)."""
    return manifest(ns, image=IMAGE_B if new_image else RAY_IMAGE, head_cpu=HEAD_CPU, name=name)


def _greeting(env: TestEnv, ns: str, cluster: str) -> tuple[str, str]:
    """(greeting deployed, status) of the hello app on ``cluster`` ('', '' if unknown)."""
    app = (serve_apps(env, ns, cluster) or {}).get("hello") or {}
    args = ((app.get("deployed_app_config") or {}).get("args") or {})
    return str(args.get("greeting", "")), str(app.get("status", ""))


def _follow(ctl: Controller, obs: Observer, until: Callable[[], bool], cap: float,
            also: Callable[[], None] | None = None) -> dict[str, Any]:
    """Tick every 0.5 s until ``until()`` or ``cap`` seconds; when the controller first says
    it converged (``converged_at``) and whether the cap was hit."""
    out: dict[str, Any] = {"converged_at": None, "capped": False}
    limit = time.time() + cap
    while True:
        if also is not None:
            with contextlib.suppress(Exception):
                also()
        with contextlib.suppress(Exception):
            if out["converged_at"] is None and ctl.converged():
                out["converged_at"] = time.time()
        if until():
            return out
        if time.time() > limit:
            out["capped"] = True
            return out
        time.sleep(TICK)


def _rel(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 1)


def _all_new_from(load: LoadResult, t0: float, new_body: str) -> float | None:
    """Send time from which every request after t0 got ``new_body`` (None if the last did not)."""
    after = [(t, b) for t, b in load.timeline if t >= t0]
    if not after or after[-1][1] != new_body:
        return None
    start = after[-1][0]
    for t, b in reversed(after):
        if b != new_body:
            break
        start = t
    return start


# ---- scenarios: each gets the controller after its first rollout, returns its figures --------


def image(env: TestEnv, ctl: Controller, obs: Observer, ns: str, cap: float) -> dict[str, Any]:
    (old,) = obs.live()
    t0 = ctl.change(manifest(ns, image=IMAGE_B), "new image")

    def done() -> bool:
        new = obs.created_after(t0)
        return bool(new) and obs.serving_only(new[0], t0) is not None and old in obs.deleting_at
    f = _follow(ctl, obs, done, cap)
    new = obs.created_after(t0)
    return {"t0": t0, **f, "clusters_created": len(new),
            "switched_s": _rel(obs.serving_only(new[0], t0) if new else None, t0),
            "two_clusters_s": round(obs.two_clusters_s(t0), 1),
            "old_deleted_s": _rel(obs.deleting_at.get(old), t0),
            "converged_s": _rel(f["converged_at"], t0)}


def serve(env: TestEnv, ctl: Controller, obs: Observer, ns: str, cap: float) -> dict[str, Any]:
    (active,) = obs.live()
    t0 = ctl.change(manifest(ns, greeting="v2"), "Serve config: greeting v2")
    seen: dict[str, float] = {}

    def check() -> None:
        if "running" not in seen and _greeting(env, ns, active) == ("v2", "RUNNING"):
            seen["running"] = time.time()
    f = _follow(ctl, obs, lambda: "running" in seen and time.time() > seen["running"] + 5, cap,
                also=check)
    return {"t0": t0, **f, "running_new_s": _rel(seen.get("running"), t0),
            "clusters_created": len(obs.created_after(t0)),
            "converged_s": _rel(f["converged_at"], t0), "new_body": "v2"}


def bad_import(env: TestEnv, ctl: Controller, obs: Observer, ns: str,
               cap: float) -> dict[str, Any]:
    (old,) = obs.live()
    t0 = ctl.change(manifest(ns, image=IMAGE_B, broken=True), "new image + a broken app")
    seen: dict[str, Any] = {}

    def check() -> None:
        if "failure" not in seen:
            where = ctl.failure()
            if where:
                seen["failure"], seen["where"] = time.time(), where

    def done() -> bool:
        pending = [n for n in obs.created_after(t0)]
        removed = bool(pending) and all(n in obs.deleting_at for n in pending)
        return "failure" in seen and (removed or time.time() > seen["failure"] + 120)
    f = _follow(ctl, obs, done, cap, also=check)
    pending = obs.created_after(t0)
    removed = [obs.deleting_at[n] for n in pending if n in obs.deleting_at]
    return {"t0": t0, **f, "failure_s": _rel(seen.get("failure"), t0),
            "failure_where": seen.get("where", ""), "clusters_created": len(pending),
            "pending_removed_s": _rel(max(removed), t0) if removed and
            len(removed) == len(pending) else None,
            "observed_s": round(time.time() - t0, 1),
            "serving_old_at_end": obs.serving_at_end() == {old}}


def unschedulable(env: TestEnv, ctl: Controller, obs: Observer, ns: str,
                  cap: float) -> dict[str, Any]:
    (old,) = obs.live()
    t0 = ctl.change(manifest(ns, workers=1, head_cpu="64"), "head asks for 64 CPUs")
    seen: dict[str, Any] = {}

    def check() -> None:
        if "failure" not in seen:
            where = ctl.failure()
            if where:
                seen["failure"], seen["where"] = time.time(), where
        pending = obs.created_after(t0)
        if pending and pending[0] not in obs.deleting_at:
            seen["held"] = _held(env, ns, pending[0])  # the last seen while it waited

    def gave_up() -> bool:
        pending = obs.created_after(t0)
        return bool(pending) and all(n in obs.deleting_at for n in pending)
    f = _follow(ctl, obs, gave_up, cap, also=check)
    pending = obs.created_after(t0)
    held = seen.get("held", {})
    return {"t0": t0, **f, "clusters_created": len(pending),
            "gave_up_s": _rel(obs.deleting_at.get(pending[0]), t0) if pending else None,
            "failure_s": _rel(seen.get("failure"), t0), "failure_where": seen.get("where", ""),
            "two_clusters_s": round(obs.two_clusters_s(t0), 1),
            "observed_s": round(time.time() - t0, 1), "held": held,
            "serving_old_at_end": obs.serving_at_end() == {old}}


def _held(env: TestEnv, ns: str, cluster: str) -> dict[str, Any]:
    """What the pending cluster's pods hold on the node: requests of scheduled pods."""
    cpu_m, mem_mi, phases = 0, 0, []
    for pod in env.cluster_pods(ns, cluster):
        kind = pod.metadata.labels.get("ray.io/node-type", "?")
        phases.append(f"{kind} {pod.status.phase}")
        if pod.spec.node_name:
            for c in pod.spec.containers:
                req = (c.resources.requests or {}) if c.resources else {}
                cpu = str(req.get("cpu", "0"))
                cpu_m += int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
                mem = str(req.get("memory", "0"))
                mem_mi += int(mem[:-2]) * 1024 if mem.endswith("Gi") else \
                    int(mem[:-2]) if mem.endswith("Mi") else 0
    return {"pods": sorted(phases), "cpu_m": cpu_m, "memory_mi": mem_mi}


def image_serve(env: TestEnv, ctl: Controller, obs: Observer, ns: str,
                cap: float) -> dict[str, Any]:
    (old,) = obs.live()
    t0 = ctl.change(manifest(ns, image=IMAGE_B, greeting="v2"), "new image + greeting v2")
    on_old: set[str] = set()
    on_new: set[str] = set()

    def check() -> None:
        if old not in obs.deleting_at:
            g, _ = _greeting(env, ns, old)
            if g:
                on_old.add(g)
        for n in obs.created_after(t0):
            g, _ = _greeting(env, ns, n)
            if g:
                on_new.add(g)

    def done() -> bool:
        new = obs.created_after(t0)
        return bool(new) and obs.serving_only(new[0], t0) is not None and old in obs.deleting_at
    f = _follow(ctl, obs, done, cap, also=check)
    new = obs.created_after(t0)
    return {"t0": t0, **f, "clusters_created": len(new), "old_configs": sorted(on_old),
            "new_configs": sorted(on_new), "new_body": "v2",
            "switched_s": _rel(obs.serving_only(new[0], t0) if new else None, t0),
            "old_deleted_s": _rel(obs.deleting_at.get(old), t0)}


def revert(env: TestEnv, ctl: Controller, obs: Observer, ns: str, cap: float) -> dict[str, Any]:
    (old,) = obs.live()
    t0 = ctl.change(manifest(ns, image=IMAGE_B), "new image")
    _follow(ctl, obs, lambda: bool(obs.created_after(t0)), 120)
    time.sleep(2)
    t_rev = ctl.change(manifest(ns), "revert")
    stable: dict[str, float] = {}

    def settled() -> bool:
        s = obs.samples[-1] if obs.samples else None
        ok = s is not None and len(s.live) == 1 and s.serving == s.live and ctl.converged()
        if not ok:
            stable.pop("since", None)
            return False
        stable.setdefault("since", time.time())
        return time.time() > stable["since"] + 5
    f = _follow(ctl, obs, settled, cap)
    created = obs.created_after(t0)
    moved = any(n in s.serving for s in obs.samples if s.t >= t0 for n in created)
    # (KubeRay's final cluster, built for the reverted spec, counts as one: it serves)
    return {"t0": t0, "revert_after_s": round(t_rev - t0, 1), **f,
            "clusters_created": len(created), "final": sorted(obs.live()),
            "final_is_original": obs.live() == {old} and obs.serving_at_end() == {old},
            "traffic_to_new": moved,
            "settled_s": _rel(stable.get("since"), t_rev) if not f["capped"] else None,
            "observed_s": round(time.time() - t_rev, 1)}


def kill(env: TestEnv, ctl: Controller, obs: Observer, ns: str, cap: float) -> dict[str, Any]:
    (old,) = obs.live()
    t0 = ctl.change(manifest(ns, image=IMAGE_B), "new image")
    _follow(ctl, obs, lambda: bool(obs.created_after(t0)), 120)
    time.sleep(2)
    t_kill = time.time()
    ctl.kill()
    ctl.restart()
    t_restart = time.time()

    def done() -> bool:
        new = obs.created_after(t0)
        return bool(new) and obs.serving_only(new[0], t0) is not None and old in obs.deleting_at
    f = _follow(ctl, obs, done, cap)
    new = obs.created_after(t0)
    return {"t0": t0, **f, "killed_at_s": round(t_kill - t0, 1),
            "restarted_at_s": round(t_restart - t0, 1), "clusters_created": len(new),
            "switched_s": _rel(obs.serving_only(new[0], t0) if new else None, t0),
            "old_deleted_s": _rel(obs.deleting_at.get(old), t0),
            "converged_s": _rel(f["converged_at"], t0)}


Scenario = Callable[[TestEnv, Controller, Observer, str, float], dict[str, Any]]
RUNNERS: dict[str, tuple[Scenario, int]] = {  # scenario -> (function, workers in the rollout)
    "image": (image, 0), "serve": (serve, 0), "bad-import": (bad_import, 0),
    "unschedulable": (unschedulable, 1), "image-serve": (image_serve, 0),
    "revert": (revert, 0), "kill": (kill, 0)}
KILL_KUBERAY = ("not run: the environment's KubeRay operator is one process shared by every "
                "namespace, and this environment was not started by the benchmark (--state-dir): "
                "killing it is not this benchmark's to do")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def run_one(env: TestEnv, scenario: str, controller: str, *, hold_cap: float,
            cap: float = 300.0, own_env: bool = False) -> dict[str, Any]:
    fn, workers = RUNNERS[scenario]
    if scenario == "kill" and controller == "KubeRay" and not own_env:
        return {"not_run": KILL_KUBERAY}
    ns = make_namespace(env, f"vs-{'kr' if controller == 'KubeRay' else 'gr'}")
    work = OUT / "vs_kuberay" / ns
    ctl: Controller = KubeRay(env, ns, operator_ours=own_env) if controller == "KubeRay" else \
        Gitray(env, ns, work, ready_timeout="3m")
    obs = Observer(env, ns)
    out: dict[str, Any] = {"namespace": ns, "uptime_before": uptime()}
    say(f"  {scenario} / {controller} in {ns}")
    try:
        if scenario == "kill" and isinstance(ctl, KubeRay):
            ctl.leader_elected()  # as deployed: its successor waits for the Lease
            out["kuberay_leader_election"] = True
        out["rollout_s"] = round(ctl.rollout(manifest(ns, workers=workers)), 1)
        obs.start()
        time.sleep(2)
        load = LoadGenerator(serve_url(env, ns), rate=RATE, count=int(RATE * 900),
                             timeout=3).start()
        result: dict[str, Any] = {}
        try:
            result = fn(env, ctl, obs, ns, hold_cap if scenario == "unschedulable" else cap)
            time.sleep(2)
        finally:
            lr = load.stop()
            obs.stop()
        new_body = result.pop("new_body", None)
        t0 = result.pop("t0", 0.0)
        if t0:  # (to read beside the controllers' logs)
            out["change_at_utc"] = time.strftime("%H:%M:%S", time.gmtime(t0)) + \
                f".{int(t0 % 1 * 1000):03d}"
        result.pop("converged_at", None)
        if new_body:
            result["all_new_body_s"] = _rel(_all_new_from(lr, t0, new_body), t0)
            result["first_new_body_s"] = _rel(next((t for t, b in lr.timeline
                                                    if b == new_body), None), t0)
        out.update(result)
        out["requests"] = {"sent": lr.sent, "ok": lr.ok, "failed": lr.failed,
                           "failures": dict(lr.failures),
                           "p50_ms": round(lr.percentile(50), 1),
                           "p99_ms": round(lr.percentile(99), 1)}
        out["observer_errors"] = obs.errors
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
        say(f"  {scenario} / {controller} FAILED: {out['error']}")
    finally:
        obs.stop()
        ctl.close()
        out["uptime_after"] = uptime()
        delete_namespace(env, ns)
    say(f"  {scenario} / {controller}: {out}")
    return out


def run(env: TestEnv, scenarios: list[str], hold_cap: float = 300.0,
        earlier: dict[str, Any] | None = None,
        save: Callable[[dict[str, Any]], None] | None = None,
        own_env: bool = False) -> dict[str, Any]:
    results: dict[str, Any] = dict(earlier or {})
    results.setdefault("scenarios", {})
    results["hold_cap_s"] = hold_cap
    for scenario in scenarios:
        say(f"kuberay vs gitray: {scenario}")
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if scenario == "ten":
            results["scenarios"][scenario] = {"date_utc": date, **{
                c: {"uptime_before": uptime(), **run_fleet(env, c, fleet_manifest),
                    "uptime_after": uptime()} for c in ("KubeRay", "gitray")}}
        else:
            results["scenarios"][scenario] = {"date_utc": date, **{
                c: run_one(env, scenario, c, hold_cap=hold_cap, own_env=own_env)
                for c in ("KubeRay", "gitray")}}
        if save is not None:
            save(results)
    results["node_allocatable"] = _allocatable(env)
    return results


def _allocatable(env: TestEnv) -> dict[str, str]:
    with contextlib.suppress(Exception):
        node = env.core.read_node(env.real_node["name"])
        return {k: str(v) for k, v in (node.status.allocatable or {}).items()
                if k in ("cpu", "memory", "pods")}
    return {}


# ---- tables ----------------------------------------------------------------------------------

ROWS: dict[str, list[tuple[str, str]]] = {
    "image": [("change -> serve Service on the new cluster only (s)", "switched_s"),
              ("failed requests / sent", "failed"),
              ("seconds two clusters existed", "two_clusters_s"),
              ("old cluster deleted after (s)", "old_deleted_s"),
              ("controller reports done after (s)", "converged_s"),
              ("clusters created", "clusters_created")],
    "serve": [("change -> app RUNNING with the new config (s)", "running_new_s"),
              ("change -> every answer is the new one (s)", "all_new_body_s"),
              ("failed requests / sent", "failed"),
              ("clusters created", "clusters_created"),
              ("controller reports done after (s)", "converged_s")],
    "bad-import": [("failure reported after (s)", "failure_s"),
                   ("where", "failure_where"),
                   ("pending cluster removed after (s)", "pending_removed_s"),
                   ("observed for (s)", "observed_s"),
                   ("traffic still on the old cluster at the end", "serving_old_at_end"),
                   ("failed requests / sent", "failed")],
    "unschedulable": [("controller gives up: pending cluster deleted after (s)", "gave_up_s"),
                      ("failure reported after (s)", "failure_s"),
                      ("where", "failure_where"),
                      ("seconds two clusters existed", "two_clusters_s"),
                      ("pending cluster's pods, last seen while it waited", "held"),
                      ("observed for (s)", "observed_s"),
                      ("failed requests / sent", "failed")],
    "image-serve": [("greetings seen on the OLD cluster (until deleted)", "old_configs"),
                    ("greetings seen on the new cluster", "new_configs"),
                    ("change -> first new answer (s)", "first_new_body_s"),
                    ("change -> every answer is the new one (s)", "all_new_body_s"),
                    ("change -> serve Service on the new cluster only (s)", "switched_s"),
                    ("old cluster deleted after (s)", "old_deleted_s"),
                    ("failed requests / sent", "failed")],
    "revert": [("reverted after (s)", "revert_after_s"),
               ("clusters created after the change (besides the original)", "clusters_created"),
               ("traffic moved to a cluster created after the change", "traffic_to_new"),
               ("final state: only the original cluster, serving", "final_is_original"),
               ("revert -> settled (s)", "settled_s"),
               ("failed requests / sent", "failed")],
    "kill": [("killed at (s after the change)", "killed_at_s"),
             ("clusters created", "clusters_created"),
             ("change -> serve Service on the new cluster only (s)", "switched_s"),
             ("old cluster deleted after (s)", "old_deleted_s"),
             ("controller reports done after (s)", "converged_s"),
             ("failed requests / sent", "failed")],
    "ten": [("change -> first serve Service on a new cluster (s)", "switched_first_s"),
            ("change -> every serve Service on a new cluster (s)", "switched_all_s"),
            ("controller reports done after (s)", "done_s"),
            ("every old cluster gone after (s)", "old_deleted_s"),
            ("API requests, change -> done (API server, all clients)", "requests_upgrade"),
            ("of which the controller's own process", "own_requests_upgrade"),
            ("API requests per minute afterwards (API server, all clients)",
             "requests_steady_per_min"),
            ("of which the controller's own process (60 s)", "own_requests_steady")],
}
TITLES = {"image": "image change (blue-green)", "serve": "Serve-config-only change",
          "bad-import": "bad import_path (with an image change)",
          "unschedulable": "pending cluster never ready (head asks for 64 CPUs)",
          "image-serve": "image + Serve config together", "revert": "revert in flight",
          "kill": "controller killed mid-upgrade",
          "ten": "ten RayServices upgraded at once (new image for all, one change)"}


def _cell(r: dict[str, Any], key: str) -> str:
    if "not_run" in r:
        return "not run"
    if "error" in r and key not in r:
        return f"FAILED: {r['error'][:80]}"
    if key == "failed":
        q = r.get("requests") or {}
        kinds = ", ".join(f"{k} {v}" for k, v in sorted((q.get("failures") or {}).items()))
        return f"{q.get('failed')} / {q.get('sent')}" + (f" ({kinds})" if kinds else "")
    v = r.get(key)
    if key in ("pending_removed_s", "gave_up_s", "settled_s") and v is None:
        return f"never (still there after {r.get('observed_s')} s)" if key != "settled_s" \
            else "not settled"
    if key == "held" and isinstance(v, dict):
        return (f"{', '.join(v.get('pods') or []) or 'none'}; scheduled pods request "
                f"{v.get('cpu_m')}m CPU, {v.get('memory_mi')} Mi") if v else "-"
    if key.startswith("requests_") and isinstance(v, dict):
        top = sorted((v.get("by") or {}).items(), key=lambda kv: -kv[1])[:4]
        return f"{v.get('total')} (" + ", ".join(f"{k} {n}" for k, n in top) + ")"
    if key.startswith("own_requests_"):
        if isinstance(v, dict) and v:
            return f"{sum(v.values())} (" + ", ".join(
                f"{k} {n}" for k, n in sorted(v.items(), key=lambda kv: -kv[1])[:4]) + ")"
        return "not counted (no per-process count for the operator)" \
            if str(r.get("namespace", "")).startswith("vs-kr") else "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list):
        return ", ".join(v) or "none"
    if v is None or v == "":
        return "-"
    return str(v).replace("|", "\\|")


def tables(results: dict[str, Any]) -> str:
    out: list[str] = []
    done = results.get("scenarios", {})
    for scenario in [*(x for x in SCENARIOS if x in done), *(x for x in done
                                                             if x not in SCENARIOS)]:
        data = done[scenario]
        kr, gr = data.get("KubeRay", {}), data.get("gitray", {})
        out += [f"#### {TITLES.get(scenario, scenario)}", "",
                f"Run {data.get('date_utc')}; load before/after — KubeRay: "
                f"`{_load(kr.get('uptime_before'))}` / `{_load(kr.get('uptime_after'))}`, "
                f"gitray: `{_load(gr.get('uptime_before'))}` / "
                f"`{_load(gr.get('uptime_after'))}`; first rollout: KubeRay "
                f"{kr.get('rollout_s', '-')} s, gitray {gr.get('rollout_s', '-')} s "
                "(1-minute load averages on 2 cores).", "",
                "| | KubeRay | gitray |", "|---|---|---|"]
        for label, key in ROWS.get(scenario, []):
            out.append(f"| {label} | {_cell(kr, key)} | {_cell(gr, key)} |")
        for name, r in (("KubeRay", kr), ("gitray", gr)):
            if r.get("not_run"):
                out.append(f"\n{name}: {r['not_run']}.")
            elif r.get("error"):
                out.append(f"\n{name} run FAILED: {r['error']}")
        out.append("")
    return "\n".join(out)


def _load(up: str | None) -> str:
    return (up or "-").split("load average:")[-1].strip()
