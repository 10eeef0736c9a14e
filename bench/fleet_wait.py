"""Benchmark 11: one workload's wait and everyone else — ``gitray sync`` as a fleet
controller (issue 26), one code base beside another. I/O.

Run against the kwok environment of ``bench/run`` (no real node, no Ray heads needed: every
wait here is a cluster whose pods can never be scheduled):

1. **Held by a wait?** Commit 1 adds one RayService whose cluster's pods select a node that
   does not exist, so gitray waits in ``wait-cluster-ready`` (``clusterReadyTimeout`` 10 min).
   Once that cluster exists (gitray is waiting), a 60 s window counts the requests gitray's
   own client sends. Then commit 2, from another team, adds ``--teams`` suspended RayClusters
   in another namespace: the figure is the time from that push until all of them exist,
   watched for at most ``--cap`` seconds.
2. **Many waits at once.** Commit 1 adds ``--waiting`` such RayServices at once: how many
   clusters gitray has created (waits in flight) after 60 s, and its client's requests in that
   minute.

``--compare PATH`` runs the same scenarios with the gitray of another checkout (e.g. a
worktree of the commit before the fleet controller) for a side-by-side table.

    python -m bench.fleet_wait --state-dir /tmp/gitray-bench-0 [--compare /tmp/one-pass]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.common import (
    OUT,
    REPO,
    Env,
    Remote,
    bench_cluster_spec,
    ensure_namespaces,
    env_down,
    env_up,
    hello_serve_config,
    read_counts,
    say,
    start_sync,
)
from testenv.manifests import dump, gitray_config

WAITING_NS, TEAMS_NS, LEASE_NS = "bench-fleet-wait", "bench-fleet-teams", "bench-fleet-lease"
WINDOW_S = 60.0


def stuck_rayservice(name: str) -> dict[str, Any]:
    """A RayService whose cluster can never become ready: its pods select no node."""
    cluster = bench_cluster_spec(suspend=False)
    cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"gitray.io/bench":
                                                                    "nowhere"}
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": WAITING_NS},
            "spec": {"serveConfigV2": hello_serve_config(), "rayClusterConfig": cluster}}


def team_cluster(i: int) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": f"team-{i:03d}", "namespace": TEAMS_NS},
            "spec": bench_cluster_spec()}


def config() -> str:
    return gitray_config(allowed=["bench-fleet-*"], ready_timeout="10m")


def clusters(env: Env, ns: str) -> int:
    items, _ = env.kube().list("ray.io/v1", "RayCluster", namespace=ns)
    return len(items)


def requests(counts: Path | None) -> int:
    return sum(read_counts(counts).values()) if counts is not None else 0


def reset(env: Env) -> None:
    """No namespace of an earlier run left (their objects would be planned against)."""
    for ns in (WAITING_NS, TEAMS_NS, LEASE_NS):
        env.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=true",
                    timeout=300)
    ensure_namespaces(env, [WAITING_NS, TEAMS_NS, LEASE_NS])


def held(env: Env, src: Path, teams: int, cap: float) -> dict[str, Any]:
    reset(env)
    work = OUT / "fleet-wait" / src.name / "held"
    remote = Remote.create(work / "git")
    remote.commit("a slow cluster", {"gitray.yaml": config(),
                                     "wait/svc.yaml": dump(stuck_rayservice("slow"))})
    sync = start_sync(env, remote.bare, work, lease_ns=LEASE_NS, counts=True, name="held",
                      src=src)
    try:
        t0 = time.monotonic()
        while clusters(env, WAITING_NS) < 1:
            if time.monotonic() - t0 > 300:
                raise RuntimeError("gitray did not start the RayService within 300 s")
            time.sleep(0.5)
        time.sleep(2)
        before = requests(sync.counts)
        time.sleep(WINDOW_S)
        time.sleep(0.6)  # the counts file is rewritten every 0.5 s
        per_min = (requests(sync.counts) - before) * 60 / WINDOW_S
        files = {f"teams/team-{i:03d}.yaml": dump(team_cluster(i)) for i in range(teams)}
        remote.commit("another team's clusters", files)
        pushed = time.monotonic()
        landed: float | None = None
        while time.monotonic() - pushed < cap:
            if clusters(env, TEAMS_NS) >= teams:
                landed = time.monotonic() - pushed
                break
            time.sleep(0.5)
        created = clusters(env, TEAMS_NS)
    finally:
        sync.stop()
    say(f"  held: {teams} clusters of another team "
        + (f"all created {landed:.1f} s after the push" if landed is not None
           else f"{created} of {teams} created within {cap:.0f} s")
        + f"; {per_min:.0f} requests/min while one RayService waits")
    return {"teams": teams, "cap_s": cap, "landed_s": None if landed is None
            else round(landed, 1), "created_within_cap": created,
            "requests_per_min_one_waiting": round(per_min, 1)}


def many(env: Env, src: Path, waiting: int) -> dict[str, Any]:
    reset(env)
    work = OUT / "fleet-wait" / src.name / "many"
    remote = Remote.create(work / "git")
    files = {f"wait/svc-{i:03d}.yaml": dump(stuck_rayservice(f"svc-{i:03d}"))
             for i in range(waiting)}
    remote.commit("many slow clusters", {"gitray.yaml": config(), **files})
    sync = start_sync(env, remote.bare, work, lease_ns=LEASE_NS, counts=True, name="many",
                      src=src)
    try:
        t0 = time.monotonic()
        while clusters(env, WAITING_NS) < 1 and time.monotonic() - t0 < 300:
            time.sleep(0.5)
        before = requests(sync.counts)
        time.sleep(WINDOW_S)
        time.sleep(0.6)
        per_min = (requests(sync.counts) - before) * 60 / WINDOW_S
        in_flight = clusters(env, WAITING_NS)
    finally:
        sync.stop()
    say(f"  many: {in_flight} of {waiting} RayServices waiting after {WINDOW_S:.0f} s; "
        f"{per_min:.0f} requests/min")
    return {"waiting": waiting, "in_flight_after_window": in_flight,
            "requests_per_min": round(per_min, 1)}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| gitray | another team's clusters created after the push, while one RayService "
           "waits | requests/min, one waiting | RayServices waiting after 60 s (of N) "
           "| requests/min, N waiting |", "|---|---|---|---|---|"]
    for r in rows:
        h, m = r["held"], r["many"]
        landed = (f"all {h['teams']} in {h['landed_s']} s" if h["landed_s"] is not None
                  else f"{h['created_within_cap']} of {h['teams']} within {h['cap_s']:.0f} s")
        out.append(f"| {r['source']} | {landed} | {h['requests_per_min_one_waiting']} "
                   f"| {m['in_flight_after_window']} of {m['waiting']} "
                   f"| {m['requests_per_min']} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_wait", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", type=Path, default=Path("/tmp/gitray-bench-fleet"))
    parser.add_argument("--compare", type=Path, action="append", default=[],
                        help="another checkout whose gitray runs the same scenarios")
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--waiting", type=int, default=50)
    parser.add_argument("--cap", type=float, default=240.0)
    parser.add_argument("--keep-env", action="store_true")
    args = parser.parse_args()
    env = env_up(args.state_dir)
    rows = []
    try:
        for src in (REPO, *args.compare):
            say(f"gitray from {src}")
            rows.append({"source": str(src), "held": held(env, src, args.teams, args.cap),
                         "many": many(env, src, args.waiting)})
            out = OUT / "fleet_wait.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(rows, indent=2))
    finally:
        for ns in (WAITING_NS, TEAMS_NS, LEASE_NS):
            env.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false",
                        check=False)
        if not args.keep_env:
            env_down(env)
    print(table(rows))


if __name__ == "__main__":
    main()
