"""Benchmark 2 — steady state: ``gitray sync`` with no new commits, N workloads live.

A bare remote holds exactly what is live (the base revision of the plan-at-scale fleet, so
nothing is to be done). One ``gitray sync`` process (defaults except ``--interval``: drift
check every 10 polls, deletion job every 15 s, Lease 15 s / 10 s / 2 s) runs against it;
after it first reports the revision as synced, a window of ``duration`` seconds is measured:

- process CPU time (``/proc/<pid>/stat``) per poll, and RSS at the end;
- requests the process made (bench/counted.py wraps its Kubernetes client), by verb and
  resource, per poll — writes split into the Lease (renewals are unavoidable) and the rest;
- the API server's own counts for the same window (apiserver_request_total, every client);
- the daemon's /metrics: polls, sync passes by trigger, status posts, steps.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    OUT,
    Env,
    Fleet,
    Remote,
    delta,
    ensure_namespaces,
    proc_cpu_s,
    proc_rss_mb,
    read_counts,
    say,
    start_sync,
    summarize,
    wait_for,
)

LEASE_NS = "gitray-bench-steady"
WRITE_VERBS = ("create", "update", "patch", "delete")


def _live_count(env: Env) -> int:
    kube = env.kube()
    sel = "app.kubernetes.io/managed-by=gitray,gitray.io/instance=gitray"
    rcs, _ = kube.list("ray.io/v1", "RayCluster", label_selector=sel)
    svcs, _ = kube.list("v1", "Service", label_selector=sel)
    return len(rcs) + len(svcs)


def _metric_sum(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k.startswith(prefix)}


def run(env: Env, n: int, duration: float, interval: str) -> dict[str, Any]:
    say(f"steady state: N={n}, {duration:.0f}s window, --interval {interval}")
    expected = 4 * n  # per RayService a cluster + 2 Services, per RayCluster the cluster
    live = _live_count(env)
    if live != expected:  # a bigger fleet is live: the daemon would prune it
        raise RuntimeError(f"steady state N={n} needs exactly {expected} live objects of "
                           f"instance gitray, found {live}; run it right after populating N")
    work = OUT / f"steady-{n}"
    remote = Remote.create(work / "git")
    sha = remote.commit("fleet", Fleet(n).files())
    ensure_namespaces(env, [LEASE_NS])
    sync = start_sync(env, remote.bare, work, lease_ns=LEASE_NS, interval=interval,
                      counts=True, name="steady")
    try:
        t_start = time.monotonic()
        wait_for(lambda: sync.synced() == sha, 600, interval=0.5, what="the first sync pass")
        first_pass_s = time.monotonic() - t_start
        time.sleep(2)  # let the first pass's bookkeeping finish
        pid = sync.proc.pid
        assert sync.counts is not None
        m0, c0, a0, cpu0 = sync.metrics(), read_counts(sync.counts), env.metrics(), \
            proc_cpu_s(pid)
        t0 = time.monotonic()
        deadline = t0 + duration
        while time.monotonic() < deadline and sync.proc.poll() is None:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        time.sleep(0.6)  # the counts file is rewritten every 0.5 s
        m1, c1, a1, cpu1 = sync.metrics(), read_counts(sync.counts), env.metrics(), \
            proc_cpu_s(pid)
        window = time.monotonic() - t0
        rss = proc_rss_mb(pid)
    finally:
        sync.stop()
    polls = m1.get("gitray_polls_total", 0) - m0.get("gitray_polls_total", 0)
    reqs = {k: c1.get(k, 0) - c0.get(k, 0) for k in set(c1) | set(c0)}
    reqs = {k: v for k, v in sorted(reqs.items()) if v}
    lease_writes = sum(v for k, v in reqs.items()
                       if k.startswith(WRITE_VERBS) and k.endswith(" leases"))
    other_writes = sum(v for k, v in reqs.items()
                       if k.startswith(WRITE_VERBS) and not k.endswith(" leases"))
    passes = {k.split('trigger="')[1].split('"')[0]:
              m1[k] - m0.get(k, 0)
              for k in _metric_sum(m1, "gitray_sync_duration_seconds_count")}
    api = summarize(delta(a1, a0))
    result = {
        "workloads": 2 * n, "live_objects": live, "interval": interval,
        "window_s": round(window, 1), "first_pass_s": round(first_pass_s, 1),
        "polls": polls,
        "cpu_s": round(cpu1 - cpu0, 3),
        "cpu_ms_per_poll": round(1000 * (cpu1 - cpu0) / polls, 1) if polls else None,
        "cpu_percent": round(100 * (cpu1 - cpu0) / window, 2),
        "rss_mb": round(rss, 1),
        "client_requests": reqs,
        "client_requests_per_poll": round(sum(reqs.values()) / polls, 2) if polls else None,
        "non_lease_requests_per_poll": round(
            sum(v for k, v in reqs.items() if not k.endswith(" leases")) / polls, 2)
        if polls else None,
        "lease_writes": lease_writes, "other_writes": other_writes,
        "passes_by_trigger": passes,
        "status_posts": sum(m1[k] - m0.get(k, 0)
                            for k in _metric_sum(m1, "gitray_status_posts_total")),
        "steps": sum(m1[k] - m0.get(k, 0) for k in _metric_sum(m1, "gitray_steps_total")),
        "apiserver_window_all_clients": api,
    }
    say(f"  N={n}: {polls:.0f} polls, {result['cpu_ms_per_poll']} ms CPU/poll, "
        f"{result['client_requests_per_poll']} requests/poll, writes: lease {lease_writes}, "
        f"other {other_writes}")
    return result


def table(results: dict[str, Any]) -> str:
    rows = ["| workloads (live objects) | window | --interval | polls | sync passes (trigger) "
            "| CPU per poll | CPU % | RSS | requests per poll (all / without Lease) "
            "| requests in the window (gitray's client) | writes: Lease / other "
            "| status posts | steps |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in sorted(results.items(), key=lambda kv: int(kv[0])):
        passes = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["passes_by_trigger"].items()))
        reqs = ", ".join(f"{k} {v}" for k, v in r["client_requests"].items())
        rows.append(
            f"| {r['workloads']} ({r['live_objects']}) | {r['window_s']:.0f} s "
            f"| {r['interval']} | {r['polls']:.0f} | {passes or '-'} "
            f"| {r['cpu_ms_per_poll']} ms | {r['cpu_percent']} % | {r['rss_mb']:.0f} MB "
            f"| {r['client_requests_per_poll']} / {r['non_lease_requests_per_poll']} "
            f"| {reqs} | {r['lease_writes']} / {r['other_writes']} "
            f"| {r['status_posts']:.0f} | {r['steps']:.0f} |")
    return "\n".join(rows)
