"""Benchmark 4 — failover: SIGKILL the leader of two ``gitray sync`` replicas.

Two real ``gitray sync`` processes share one Lease (own instance and namespace, a one-workload
repository). Each run: wait until the standby has watched the Lease for at least
lease duration + retry period (as a long-running standby would have), SIGKILL the leader,
then poll every 50 ms. Measured from the kill:

- ``holder``: the Lease's holderIdentity names the standby (read from the API server);
- ``took``: the standby's own log line "took the Lease" (JSON log timestamp, ms);
- ``first_pass``: the end of the new leader's first sync pass (its
  ``gitray_last_sync_timestamp_seconds``), i.e. its first action as leader.

The killed replica is restarted as the next standby. Theoretical bound: a standby may take
the Lease once it has seen no renewal for the lease duration, and tries every retry period
(lease duration + retry period; the daemon's acquire job runs every retry period).
"""

from __future__ import annotations

import signal
import time
from datetime import datetime
from typing import Any

from bench.common import (
    OUT,
    Env,
    Remote,
    SyncProc,
    bench_config,
    dump,
    ensure_namespaces,
    say,
    start_sync,
    stats,
    wait_for,
)

LEASE_NS = "gitray-bench-failover"
INSTANCE = "bench-failover"


def _holder(env: Env) -> str:
    lease = env.kube().get_or_none("coordination.k8s.io/v1", "Lease", LEASE_NS, "gitray")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _identity(sp: SyncProc) -> str:
    for rec in sp.log_records():
        if rec.get("identity"):
            return str(rec["identity"])
    return ""


def _took_at(sp: SyncProc) -> float | None:
    for rec in sp.log_records():
        if str(rec.get("msg", "")).startswith("took the"):
            return datetime.fromisoformat(str(rec["time"])).timestamp()
    return None


def run(env: Env, runs: int, lease: tuple[int, float, float] = (15, 10.0, 2.0),
        interval: str = "1s") -> dict[str, Any]:
    duration, deadline, retry = lease
    say(f"failover: {runs} runs, Lease {duration}s/{deadline:g}s/{retry:g}s")
    work = OUT / "failover"
    remote = Remote.create(work / "git")
    ensure_namespaces(env, [LEASE_NS, "bench-00"])
    sha = remote.commit("one workload", {
        "gitray.yaml": bench_config(instance=INSTANCE),
        "cm.yaml": dump({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "failover-probe", "namespace": "bench-00"},
                              "data": {"v": "1"}})})
    extra = ["--lease-duration", str(duration), "--renew-deadline", str(deadline),
             "--retry-period", str(retry)]
    count = 0

    def replica() -> SyncProc:
        nonlocal count
        count += 1
        return start_sync(env, remote.bare, work, lease_ns=LEASE_NS, interval=interval,
                          extra=extra, name=f"replica{count}")

    leader = replica()
    wait_for(lambda: leader.synced() == sha, 120, what="the first leader to sync")
    standby = replica()
    standby_since = time.monotonic()
    samples: list[dict[str, Any]] = []
    try:
        for i in range(runs):
            # a standby that has watched the Lease for a while, like a long-running replica
            time.sleep(max(0.0, standby_since + duration + retry + 1 - time.monotonic()))
            assert _holder(env) == _identity(leader), "the leader is not the Lease holder"
            s_id = _identity(standby)
            t_kill = time.time()
            leader.proc.send_signal(signal.SIGKILL)
            leader.proc.wait()
            t_holder = t_first = None
            limit = time.monotonic() + 3 * (duration + retry) + 30
            while time.monotonic() < limit and (t_holder is None or t_first is None):
                now = time.time()
                if t_holder is None and _holder(env) == s_id:
                    t_holder = now
                if t_first is None:
                    ts = standby.metrics().get("gitray_last_sync_timestamp_seconds", 0)
                    if ts > t_kill:
                        t_first = ts
                time.sleep(0.05)
            took = _took_at(standby)
            sample = {"run": i + 1,
                      "holder_s": round(t_holder - t_kill, 3) if t_holder else None,
                      "took_s": round(took - t_kill, 3) if took else None,
                      "first_pass_s": round(t_first - t_kill, 3) if t_first else None}
            samples.append(sample)
            say(f"  run {i + 1}: Lease holder after {sample['holder_s']}s, took (log) "
                f"{sample['took_s']}s, first pass done {sample['first_pass_s']}s")
            leader, standby = standby, replica()
            standby_since = time.monotonic()
    finally:
        for sp in (leader, standby):
            sp.stop()
    result = {"runs": runs, "lease_duration_s": duration, "renew_deadline_s": deadline,
              "retry_period_s": retry, "bound_s": duration + retry,
              "samples": samples}
    for key in ("holder_s", "took_s", "first_pass_s"):
        result[key] = stats(s[key] for s in samples if s[key] is not None)
    return result


def table(r: dict[str, Any]) -> str:
    def row(label: str, s: dict[str, float]) -> str:
        if not s:
            return f"| {label} | - | - | - | 0 |"
        return (f"| {label} | {s['min']:.2f} s | {s['median']:.2f} s | {s['max']:.2f} s "
                f"| {s['n']} |")

    head = (f"Lease {r['lease_duration_s']} s / renew deadline {r['renew_deadline_s']:g} s / "
            f"retry {r['retry_period_s']:g} s; theoretical bound lease + retry = "
            f"{r['bound_s']:g} s\n\n"
            "| from SIGKILL of the leader to | min | median | max | runs |\n"
            "|---|---|---|---|---|")
    return "\n".join([head, row("Lease holder changed (API server)", r["holder_s"]),
                      row("new leader logs 'took the Lease'", r["took_s"]),
                      row("new leader's first sync pass finished", r["first_pass_s"])])
