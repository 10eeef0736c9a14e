"""Benchmark 12 — ``gitray sync --shards S`` at scale: a no-change sweep over 1, 2, 3 replicas.

N RayServices + N RayClusters (benchmark 1's ``Fleet(N)``, all suspended) are live in the
kwok environment's API server (``plan_scale.populate``: idempotent and incremental, so a kept
environment is reused and only the missing objects are applied), and one real bare Git
repository holds the same revision: nothing is to be done. For each replica count R, R
``gitray sync --shards S`` processes (each its own identity, clone and HTTP port;
``--interval`` short, ``--drift-every 1`` so that every poll plans the commit against the
live objects again: the sweep) run against them:

1. wait until the shards are balanced: every shard held, each replica between ``S // R`` and
   ``ceil(S / R)`` (``/readyz`` ``shards``), unchanged for a few Lease rounds;
2. wait for one more sweep of every replica (the one in flight when the balance settled), then
   reset each replica's peak RSS (``5`` to ``/proc/<pid>/clear_refs``) and measure a window
   of at least ``passes`` sweeps per replica;
3. per replica: the shards held, peak RSS (``VmHWM``) in the window and before it (start-up
   and balancing: the first replica plans every shard until the others join), the duration
   of each sweep (``gitray_sync_duration_seconds{trigger="drift"}``: one pass, plan only,
   no Git fetch; read every second, a reading that covers two sweeps gives their mean),
   CPU per sweep
   (``/proc/<pid>/stat``: the window's CPU over its sweeps, so the health watch between
   passes and the Lease rounds are in it), the requests its client sent per sweep
   (``bench/counted.py``: LISTs of the kinds a pass reads; LIST pods are the health watch's:
   with ``--dashboard pod-ip``, one per namespace per read since ``ac21b7c``, one per
   RayService per read before), and the API server's counts over
   the window (all clients); and how many workloads it reports in sync
   (``gitray_workload_state``: its own shards' only, so the replicas' counts add up to the
   whole when each plans only its part; the table keeps at most 2,000);
4. SIGTERM every replica (by PID) and delete the instance's Leases before the next count.

    python3 -m bench.shard_sweep --n 1000 --replicas 1,2,3 --shards 6 \
        [--state-dir DIR] [--keep-env]

I/O: the test environment, git, gitray processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    OUT,
    Env,
    Fleet,
    Remote,
    SyncProc,
    delta,
    ensure_namespaces,
    env_down,
    env_up,
    machine,
    proc_cpu_s,
    read_counts,
    say,
    start_sync,
    stats,
    summarize,
    wait_for,
    write_result,
)
from bench.plan_scale import KINDS, populate
from bench.steady_state import _live_count

LEASE_NS = "gitray-bench-shards"
# what a pass LISTs: the live objects, the run records and controls (configmaps), RayJobs and
# RayCronJobs (the health watch between passes LISTs some of them too: read_live)
SWEEP_KINDS = ("rayclusters", "services", "configmaps", "rayjobs", "raycronjobs")
DRIFT = 'gitray_sync_duration_seconds_{}{{trigger="drift"}}'


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS (Linux >= 4.0; the process is ours)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def held(sp: SyncProc) -> list[str] | None:
    """The shards a replica drives (``/readyz``), None when it does not answer."""
    code, body = sp.get("/readyz")
    if code not in (200, 503):
        return None
    with contextlib.suppress(ValueError):
        return sorted(json.loads(body).get("shards", {}).get("held", {}))
    return None


def workloads(sp: SyncProc) -> int:
    """Workloads the replica reports in sync (its own shards' only; at most MAX_WORKLOADS)."""
    return sum(1 for k, v in sp.metrics().items()
               if k.startswith("gitray_workload_state{") and 'state="in-sync"' in k and v == 1)


def balanced(holdings: list[list[str] | None], shards: int) -> bool:
    if any(h is None for h in holdings):
        return False
    each = [len(h or []) for h in holdings]
    every = {s for h in holdings for s in h or []}
    floor, cap = shards // len(holdings), math.ceil(shards / len(holdings))
    return len(every) == shards == sum(each) and all(floor <= k <= cap for k in each)


def wait_balanced(replicas: list[SyncProc], shards: int, timeout: float = 300,
                  steady_s: float = 6.0) -> tuple[list[list[str]], float]:
    """Holdings once balanced and unchanged for ``steady_s``; seconds it took."""
    t0, since, last = time.monotonic(), 0.0, None
    while time.monotonic() - t0 < timeout:
        for sp in replicas:
            if sp.proc.poll() is not None:
                raise RuntimeError(f"{sp.name} exited:\n{sp.log.read_text()[-3000:]}")
        now = [held(sp) for sp in replicas]
        if balanced(now, shards) and now == last:
            if time.monotonic() - since >= steady_s:
                return [h or [] for h in now], round(since - t0, 1)
        else:
            since, last = time.monotonic(), now
        time.sleep(1.0)
    raise RuntimeError(f"shards not balanced over {len(replicas)} replicas in {timeout:.0f} s: "
                       f"{[held(sp) for sp in replicas]}")


class Sweeps:
    """Each replica's drift passes, from its histogram's count and sum."""

    def __init__(self, replicas: list[SyncProc]) -> None:
        self.replicas = replicas
        self.last = [self._read(sp) for sp in replicas]
        self.durations: list[list[float]] = [[] for _ in replicas]
        self.merged = [0] * len(replicas)  # readings that covered more than one sweep

    @staticmethod
    def _read(sp: SyncProc) -> tuple[float, float]:
        m = sp.metrics()
        return m.get(DRIFT.format("count"), 0.0), m.get(DRIFT.format("sum"), 0.0)

    def sample(self) -> None:
        for i, sp in enumerate(self.replicas):
            count, total = self._read(sp)
            n = int(count - self.last[i][0])
            if n > 0:
                self.durations[i] += [(total - self.last[i][1]) / n] * n
                self.merged[i] += n > 1
                self.last[i] = (count, total)


def _requests(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    d = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    return {k: v for k, v in sorted(d.items()) if v}


def measure(env: Env, remote: Remote, n: int, r: int, shards: int, interval: str,
            passes: int, window_max: float) -> dict[str, Any]:
    env.kubectl("delete", "lease", "--all", "-n", LEASE_NS, "--wait=true")
    work = OUT / f"shards-{n}" / f"r{r}"
    replicas: list[SyncProc] = []
    try:
        for i in range(r):
            replicas.append(start_sync(
                env, remote.bare, work, lease_ns=LEASE_NS, interval=interval, counts=True,
                name=f"r{r}-{i}", extra=("--shards", str(shards), "--drift-every", "1")))
        holdings, balance_s = wait_balanced(replicas, shards)
        sweeps = Sweeps(replicas)

        def one_sweep_each() -> bool:
            sweeps.sample()
            return all(sweeps.durations)

        wait_for(one_sweep_each, window_max, interval=1.0,
                 what="one sweep of every replica after the balance")
        before_kb = [_status_kb(sp.proc.pid, "VmHWM") for sp in replicas]
        for sp in replicas:
            _reset_peak(sp.proc.pid)
        sweeps = Sweeps(replicas)
        counts0 = [read_counts(sp.counts) if sp.counts else {} for sp in replicas]
        cpu0 = [proc_cpu_s(sp.proc.pid) for sp in replicas]
        api0, load0, t0 = env.metrics(), os.getloadavg(), time.monotonic()
        while (min(len(d) for d in sweeps.durations) < passes
               and time.monotonic() - t0 < window_max):
            time.sleep(1.0)
            sweeps.sample()
            for sp in replicas:
                if sp.proc.poll() is not None:
                    raise RuntimeError(f"{sp.name} exited:\n{sp.log.read_text()[-3000:]}")
        time.sleep(0.6)  # (the counts files are rewritten every 0.5 s)
        window = time.monotonic() - t0
        api, load1 = delta(env.metrics(), api0), os.getloadavg()
        after = [held(sp) for sp in replicas]
        rows = []
        for i, sp in enumerate(replicas):
            d = sweeps.durations[i]
            reqs = _requests(read_counts(sp.counts) if sp.counts else {}, counts0[i])
            lists = sum(v for k, v in reqs.items()
                        if k.startswith("list ") and k.split()[1] in SWEEP_KINDS)
            n_ = max(1, len(d))
            rows.append({
                "shards": holdings[i], "shards_after": after[i],
                "workloads_in_sync": workloads(sp),
                "peak_rss_mb": round(_status_kb(sp.proc.pid, "VmHWM") / 1024, 1),
                "peak_rss_before_window_mb": round(before_kb[i] / 1024, 1),
                "rss_mb": round(_status_kb(sp.proc.pid, "VmRSS") / 1024, 1),
                "sweeps": len(d), "sweeps_merged_readings": sweeps.merged[i],
                "sweep_s": {k: round(v, 3) for k, v in stats(d).items()},
                "sweep_mean_s": round(sum(d) / len(d), 3) if d else None,
                "cpu_s_per_sweep": round((proc_cpu_s(sp.proc.pid) - cpu0[i]) / len(d), 3)
                if d else None,
                "requests": reqs,
                "requests_per_sweep": round(sum(v for k, v in reqs.items()
                                                if not k.endswith(" leases")) / n_, 2),
                "lists_per_sweep": round(lists / n_, 2),
                "health_pod_lists_per_sweep": round(reqs.get("list pods", 0) / n_, 1),
            })
    finally:
        for sp in replicas:
            sp.stop()
    total = sum(len(d) for d in sweeps.durations)
    gitray_kinds = summarize(api, KINDS)
    result = {"replicas": r, "balance_s": balance_s, "window_s": round(window, 1),
              "loadavg_1m": [round(load0[0], 1), round(load1[0], 1)],
              "per_replica": rows,
              "apiserver_kinds_all_clients": gitray_kinds,
              "apiserver_kinds_per_sweep": round(sum(gitray_kinds.values()) / total, 2)
              if total else None,
              "apiserver_leases_all_clients": summarize(api, {"leases"})}
    say(f"  N={n} R={r}: " + "; ".join(
        f"{len(x['shards'])} shards, {x['peak_rss_mb']:.0f} MB, sweep "
        f"{x['sweep_mean_s']} s (max {x['sweep_s'].get('max')}, {x['sweeps']} sweeps)"
        for x in rows) + f"; load {load0[0]:.1f}-{load1[0]:.1f}")
    return result


def run_size(env: Env, n: int, replicas: list[int], shards: int, interval: str = "1s",
             passes: int = 5, window_max: float = 900,
             saved: Callable[[dict[str, Any]], None] = lambda entry: None) -> dict[str, Any]:
    say(f"shard sweep: N={n}, replicas {replicas}, --shards {shards}")
    t0 = time.monotonic()
    pop = populate(env, n)
    pop["populate_s"] = round(time.monotonic() - t0, 1)
    live = _live_count(env)
    if live != 4 * n:  # a bigger fleet is live: every replica would prune its part of it
        raise RuntimeError(f"N={n} needs exactly {4 * n} live objects of instance gitray, "
                           f"found {live}: use another --state-dir, or delete the bench-* "
                           "namespaces first")
    ensure_namespaces(env, [LEASE_NS])
    remote = Remote.create(OUT / f"shards-{n}" / "git")
    sha = remote.commit("fleet", Fleet(n).files())
    entry: dict[str, Any] = {"n": n, "workloads": 2 * n, "shards": shards,
                             "interval": interval, "commit": sha, **pop, "runs": {}}
    for r in replicas:
        entry["runs"][str(r)] = measure(env, remote, n, r, shards, interval, passes,
                                        window_max)
        saved(entry)  # (a run stopped before its last replica count keeps the ones measured)
    return entry


def run(env: Env, sizes: list[int], replicas: list[int], shards: int,
        **kw: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"sizes": {}, "partial": True}

    def saved(entry: dict[str, Any]) -> None:
        result["sizes"][str(entry["n"])] = entry
        write_result("shards", result)

    for n in sizes:
        saved(run_size(env, n, replicas, shards, saved=saved, **kw))
    del result["partial"]
    return result


def _each(rows: list[dict[str, Any]], fmt: Any) -> str:
    return " / ".join(fmt(x) for x in rows)


def table(res: dict[str, Any]) -> str:
    out = ["| N RayServices + N RayClusters | replicas | shards (workloads in sync) per replica "
           "| peak RSS per replica in the window (before it) "
           "| sweep per replica: mean / max (sweeps) "
           "| CPU per sweep | gitray's LISTs of its kinds per sweep | health watch: LIST pods "
           "per sweep | API server: requests for gitray's kinds per sweep (all clients) "
           "| load (1 min) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for n, e in sorted(res["sizes"].items(), key=lambda kv: int(kv[0])):
        for r, run_ in sorted(e["runs"].items(), key=lambda kv: int(kv[0])):
            rows = run_["per_replica"]
            out.append(
                f"| {int(n):,} + {int(n):,} | {r} "
                f"| {_each(rows, _held)} "
                f"| {_each(rows, _mb('peak_rss_mb'))} MB "
                f"({_each(rows, _mb('peak_rss_before_window_mb'))}) "
                f"| {_each(rows, _sweep)} "
                f"| {_each(rows, lambda x: str(x['cpu_s_per_sweep']))} s "
                f"| {_each(rows, lambda x: str(x['lists_per_sweep']))} "
                f"| {_each(rows, lambda x: str(x['health_pod_lists_per_sweep']))} "
                f"| {run_['apiserver_kinds_per_sweep']} "
                f"| {run_['loadavg_1m'][0]}-{run_['loadavg_1m'][1]} |")
    return "\n".join(out)


def _held(x: dict[str, Any]) -> str:
    return f"{len(x['shards'])} ({x.get('workloads_in_sync', '?')})"


def _mb(field: str) -> Any:
    return lambda x: f"{x[field]:.0f}"


def _sweep(x: dict[str, Any]) -> str:
    return f"{x['sweep_mean_s']:.2f} / {x['sweep_s'].get('max', 0):.2f} s ({x['sweeps']})"


def main() -> None:
    p = argparse.ArgumentParser(prog="python3 -m bench.shard_sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", required=True,
                   help="N RayServices + N RayClusters (comma-separated: several sizes, "
                        "populated in turn; give them growing)")
    p.add_argument("--replicas", default="1,2,3", help="replica counts, in turn [1,2,3]")
    p.add_argument("--shards", type=int, default=6, help="--shards of every replica [6]")
    p.add_argument("--interval", default="1s", help="--interval of every replica [1s]")
    p.add_argument("--passes", type=int, default=5,
                   help="sweeps measured per replica, at least [5]")
    p.add_argument("--window-max", type=float, default=900.0,
                   help="longest measuring window per replica count, seconds [900]")
    p.add_argument("--state-dir", type=Path, default=Path(f"/tmp/gitray-bench-{os.getuid()}"),
                   help="the kwok environment to use (started there when none runs; its "
                        "populated fleet is kept and grown) [%(default)s]")
    p.add_argument("--keep-env", action="store_true",
                   help="leave an environment this run started running")
    args = p.parse_args()
    env = env_up(args.state_dir)
    try:
        result = run(env, [int(x) for x in args.n.split(",")],
                     [int(x) for x in args.replicas.split(",")], args.shards,
                     interval=args.interval, passes=args.passes, window_max=args.window_max)
        result["machine"], result["versions"] = machine(), env.versions()
        write_result("shards", result)
        (OUT / "shards.md").write_text(table(result) + "\n")
        print(table(result))
    finally:
        if not args.keep_env:
            env_down(env)


if __name__ == "__main__":
    main()
