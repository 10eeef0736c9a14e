"""Benchmark 4 — failover mid-upgrade: a planned hand-over (SIGTERM) and a crash (SIGKILL).

Two real ``gitray sync`` processes share one Lease (own instance and namespaces). They follow
a repository with one RayService. Scenario ``upgrade`` (the default): its first rollout runs
on a real Ray head (the environment's Ray pod runner); then a blue-green upgrade is pushed
whose new cluster is suspended (``rayClusterConfig.suspend: true``, a new image): KubeRay makes
no pods for it, so the upgrade stays in step 2/7, wait-cluster-ready, for as long as the
benchmark runs — every run interrupts the leader in the middle of that upgrade, and the new
leader must resume it. Scenario ``rollout`` (no Ray head at all, for a machine too loaded to
start one): the first rollout's cluster is suspended, so the run waits in step 2/6.

Each run (the standby has watched the Lease for at least lease duration + retry period
before a crash, as a long-running standby would have; at least 2 s before a hand-over):

- ``handover``: SIGTERM to the leader (it interrupts its wait, releases the Lease, exits);
- ``crash``: SIGKILL to the leader (the Lease lapses on its own).

Measured from the signal (the benchmark's clock; the daemons log on the same clock, in ms):

- ``released``: the old leader's log line "released the Lease" (hand-over only);
- ``holder``: the Lease's holderIdentity names the standby (read from the API server every
  50 ms);
- ``took``: the standby's own log line "took the Lease";
- ``resumed``: the standby's first step line — it must be step 2 (wait-cluster-ready) of the
  same run (``resumed_step``).

The stopped replica is restarted as the next standby. Bounds: a crash take-over within lease
duration + retry period (a standby may take the Lease once it has seen no renewal for the lease
duration); a hand-over target of 2 s.
"""

from __future__ import annotations

import os
import re
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
    rayservice,
    say,
    start_sync,
    stats,
    wait_for,
)

LEASE_NS = "gitray-bench-failover"
NS = "bench-failover"
INSTANCE = "bench-failover"
NAME = "fo"
STEP = re.compile(r" step (\d+)/(\d+) ([a-z-]+) ")
KEYS = ("released_s", "holder_s", "took_s", "resumed_s")


def _files(image: str, suspend: bool) -> dict[str, str]:
    return {"gitray.yaml": bench_config(instance=INSTANCE,
                                         rayService={"deletionDelay": "5s",
                                                     "clusterReadyTimeout": "2h",
                                                     "serveReadyTimeout": "5m"}),
            "svc.yaml": dump(rayservice(NAME, NS, image=image, suspend=suspend))}


def _holder(env: Env) -> str:
    lease = env.kube().get_or_none("coordination.k8s.io/v1", "Lease", LEASE_NS, "gitray")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _identity(sp: SyncProc) -> str:
    for rec in sp.log_records():
        if rec.get("identity"):
            return str(rec["identity"])
    return ""


def _logged(sp: SyncProc, since: float, pattern: str) -> tuple[float, str] | None:
    """(time, message) of ``sp``'s first log line at or after ``since`` matching."""
    for rec in sp.log_records():
        msg = str(rec.get("msg", ""))
        if not re.search(pattern, msg):
            continue
        when = datetime.fromisoformat(str(rec["time"])).timestamp()
        if when >= since - 0.001:  # log times are cut to milliseconds
            return when, msg
    return None


def _in_wait(sp: SyncProc, since: float = 0.0) -> bool:
    found = _logged(sp, since, r" step 2/\d+ wait-cluster-ready ")
    return found is not None


def run(env: Env, runs: int, lease: tuple[int, float, float] = (15, 10.0, 2.0),
        interval: str = "1s", scenario: str = "upgrade") -> dict[str, Any]:
    duration, deadline, retry = lease
    say(f"failover: {runs} hand-overs + {runs} crashes mid-{scenario}, Lease "
        f"{duration}s/{deadline:g}s/{retry:g}s")
    work = OUT / "failover"
    remote = Remote.create(work / "git")
    # a clean slate: run records and clusters of an earlier run would be resumed
    env.kubectl("delete", "namespace", NS, LEASE_NS, "--ignore-not-found", "--wait=true",
                "--timeout=300s", timeout=360)
    ensure_namespaces(env, [LEASE_NS, NS])
    first = remote.commit("first rollout", _files("rayproject/ray:2.60.0",
                                                  suspend=scenario != "upgrade"))
    extra = ["--lease-duration", str(duration), "--renew-deadline", str(deadline),
             "--retry-period", str(retry)]
    count = 0

    pushed = time.time()
    started: list[SyncProc] = []

    def replica() -> SyncProc:
        nonlocal count
        count += 1
        sp = start_sync(env, remote.bare, work, lease_ns=LEASE_NS, interval=interval,
                        extra=extra, name=f"replica{count}")
        started.append(sp)
        return sp

    samples: list[dict[str, Any]] = []
    error = ""
    try:  # every replica started is stopped, whatever fails
        leader = replica()
        upgrade = first
        if scenario == "upgrade":
            wait_for(lambda: leader.synced() == first, 600,
                     what="the first rollout (a real Ray head)")
            say(f"  first rollout converged in {time.time() - pushed:.1f}s")
            pushed = time.time()
            upgrade = remote.commit("upgrade to a cluster that never gets ready",
                                    _files("rayproject/ray:2.60.1", suspend=True))
        wait_for(lambda: _in_wait(leader, pushed), 120, what="the leader in step 2")
        standby = replica()
        standby_since = time.monotonic()
        for case, sig in (("handover", signal.SIGTERM), ("crash", signal.SIGKILL)):
            for i in range(runs):
                settle = 2.0 if case == "handover" else duration + retry + 1
                time.sleep(max(0.0, standby_since + settle - time.monotonic()))
                assert _holder(env) == _identity(leader), "the leader is not the Lease holder"
                s_id = _identity(standby)
                sample = _one(env, leader, standby, s_id, sig, duration + retry)
                sample.update(run=i + 1, case=case, revision=upgrade[:7],
                              load_average=round(os.getloadavg()[0], 1))
                samples.append(sample)
                say(f"  {case} {i + 1}: " + ", ".join(f"{k[:-2]} {sample[k]}s" for k in KEYS
                                                      if sample.get(k) is not None)
                    + f"; resumed at step {sample.get('resumed_step')}; load "
                    f"{sample['load_average']}")
                leader, standby = standby, replica()
                standby_since = time.monotonic()
    except Exception as e:  # keep the runs measured so far (a loaded machine can fail a start)
        if not samples:
            raise
        error = f"{type(e).__name__}: {e}"
        say(f"  stopped after {len(samples)} runs: {error}")
    finally:
        for sp in started:
            sp.stop()
    result: dict[str, Any] = {
        "runs": runs, "lease_duration_s": duration, "renew_deadline_s": deadline,
        "retry_period_s": retry, "bound_s": duration + retry, "scenario": scenario,
        "samples": samples, **({"stopped_early": error} if error else {})}
    return {**result, **summarize(samples)}


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case: min/median/max of each measure, and how many runs resumed at step 2."""
    out: dict[str, Any] = {}
    for case in ("handover", "crash"):
        mine = [s for s in samples if s["case"] == case]
        out[case] = {key: stats(s[key] for s in mine if s.get(key) is not None)
                     for key in KEYS}
        out[case]["resumed_at_step_2"] = sum(1 for s in mine if s.get("resumed_step") == 2)
        out[case]["runs"] = len(mine)
    return out


def _one(env: Env, leader: SyncProc, standby: SyncProc, s_id: str, sig: signal.Signals,
         bound: float) -> dict[str, Any]:
    t_sig = time.time()
    leader.proc.send_signal(sig)
    t_holder: float | None = None
    resumed: tuple[float, str] | None = None
    limit = time.monotonic() + 3 * bound + 30
    while time.monotonic() < limit and (t_holder is None or resumed is None):
        now = time.time()
        if t_holder is None and _holder(env) == s_id:
            t_holder = now
        if resumed is None:
            resumed = _logged(standby, t_sig, r" step \d+/\d+ [a-z-]+ ")
        time.sleep(0.05)
    leader.proc.wait(timeout=60)
    released = _logged(leader, t_sig, r"^released the Lease")
    took = _logged(standby, t_sig, r"^took the")
    step = STEP.search(resumed[1]) if resumed else None

    def since(t: float | None) -> float | None:
        return round(t - t_sig, 3) if t is not None else None
    return {"released_s": since(released[0] if released else None),
            "holder_s": since(t_holder), "took_s": since(took[0] if took else None),
            "resumed_s": since(resumed[0] if resumed else None),
            "resumed_step": int(step.group(1)) if step else None,
            "exit_code": leader.proc.returncode}


def table(r: dict[str, Any]) -> str:
    def row(label: str, s: dict[str, float]) -> str:
        if not s:
            return f"| {label} | - | - | - | 0 |"
        return (f"| {label} | {s['min']:.2f} s | {s['median']:.2f} s | {s['max']:.2f} s "
                f"| {s['n']} |")

    if "handover" not in r:  # results of the earlier (crash-only) benchmark
        return "(crash-only results of an earlier version; run bench/run --only failover)"
    head = (f"Lease {r['lease_duration_s']} s / renew deadline {r['renew_deadline_s']:g} s / "
            f"retry {r['retry_period_s']:g} s; crash bound lease + retry = {r['bound_s']:g} s; "
            + ("every run interrupts a blue-green upgrade in step 2/7 (wait-cluster-ready)"
               if r.get("scenario", "upgrade") == "upgrade" else
               "every run interrupts a first rollout in step 2/6 (wait-cluster-ready; no Ray "
               "head)") + "\n\n"
            "| case | from the signal to | min | median | max | runs |\n"
            "|---|---|---|---|---|---|")
    rows = [head]
    labels = {"released_s": "old leader logs 'released the Lease'",
              "holder_s": "Lease holder changed (API server)",
              "took_s": "new leader logs 'took the Lease'",
              "resumed_s": "new leader resumes the run (first step line)"}
    for case, title in (("handover", "SIGTERM (hand-over)"), ("crash", "SIGKILL (crash)")):
        data = r[case]
        for key, label in labels.items():
            if key == "released_s" and case == "crash":
                continue
            rows.append(row(f"{title} | {label}", data[key]))
        rows.append(f"| {title} | resumed at step 2 of the same run | "
                    f"{data['resumed_at_step_2']} of {data['runs']} runs | | | |")
    return "\n".join(rows)
