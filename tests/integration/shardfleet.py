"""Replicas of ``gitray sync --shards S`` on one lease namespace and Git remote, and what the
sharding tests observe of them: the shard Leases (holders and epochs, sampled every 50 ms by
test_shard_leases' sampler, which records any epoch going backwards or holder changing within
an epoch) and each replica's own ``/readyz``. Shared by test_shard_sync (suspended
RayClusters, API server only) and test_shard_upgrades (RayService upgrades on the real node)."""

from __future__ import annotations

import json
from pathlib import Path

from gitray.core.model import ObjectKey
from gitray.engine.shards import shard_label
from testenv.helpers import TestEnv, WaitTimeout, wait_for
from tests.integration.chaos import STEP_LINE, Replica, holder_pid, start_replica
from tests.integration.test_shard_leases import Cluster

__all__ = ["LEASE_S", "RENEW_S", "RETRY_S", "S", "ShardFleet"]

S = 6
LEASE_S, RENEW_S, RETRY_S = 8, 6.0, 1.0  # (chaos.start_replica's: a loaded 2-core machine)
TIMING = ("--lease-duration", str(LEASE_S), "--renew-deadline", str(RENEW_S),
          "--retry-period", str(RETRY_S))


class ShardFleet:
    """The replicas of one gitray instance (lease namespace ``lease_ns``, remote ``bare``)."""

    def __init__(self, env: TestEnv, lease_ns: str, bare: Path, tmp: Path) -> None:
        self.env, self.ns, self.bare, self.tmp = env, lease_ns, bare, tmp
        self.replicas: list[Replica] = []
        self.leases = Cluster(env, lease_ns)  # (its sampler checks epochs and holders)

    def start(self, name: str, shards: int = S, failpoints: Path | None = None) -> Replica:
        extra = (*TIMING, *(("--shards", str(shards)) if shards > 1 else ()))
        replica = start_replica(str(self.env.kubeconfig), self.ns, self.bare, self.tmp, name,
                                extra=extra, failpoints=failpoints)
        self.replicas.append(replica)
        return replica

    def held(self, r: Replica) -> dict[str, int]:
        """The shards ``r`` says it drives (``/readyz``), e.g. ``{"2-of-6": 3}``."""
        detail = json.loads(r.get("/readyz")[1])
        return dict(detail.get("shards", {}).get("held", {}))

    def holders(self, shards: int = S) -> dict[int, tuple[int | None, int]]:
        """Shard -> (PID of its live holder or None, epoch), from the shard Leases."""
        return {s: (holder_pid(rec.holder) if rec.holder else None, rec.transitions)
                for s, rec in self.leases.holders(shards).items()}

    def spread(self, replicas: list[Replica], shards: int = S) -> dict[int, list[int]]:
        """PID -> its shards, once every shard's Lease names one of ``replicas`` and each
        replica's ``/readyz`` says the same (else {}: not yet)."""
        leases = self.holders(shards)
        pids = {r.pid for r in replicas}
        if sorted(leases) != list(range(shards)) or \
                any(pid not in pids for pid, _ in leases.values()):
            return {}
        by_pid: dict[int, list[int]] = {r.pid: [] for r in replicas}
        for s, (pid, _) in sorted(leases.items()):
            by_pid[pid or 0].append(s)
        for r in replicas:
            want = {shard_label(s, shards): leases[s][1] for s in by_pid[r.pid]}
            if self.held(r) != want:
                return {}
        return by_pid

    def wait_spread(self, replicas: list[Replica], sizes: list[int], timeout: float,
                    shards: int = S) -> dict[int, list[int]]:
        """The spread once its sorted sizes are ``sizes`` (the last one seen in the error)."""
        seen: list[dict[int, list[int]]] = [{}]

        def spread() -> dict[int, list[int]] | None:
            seen[0] = self.spread(replicas, shards)
            return seen[0] if sorted(map(len, seen[0].values())) == sizes else None
        try:
            return wait_for(spread, timeout=timeout, interval=0.2, what="")
        except WaitTimeout:
            raise AssertionError(f"shards not spread as {sizes} over "
                                 f"{[r.name for r in replicas]} within {timeout:.0f} s: "
                                 f"{seen[0]}; Leases {self.holders(shards)}") from None

    def drivers(self, step: str | None, since: float
                ) -> dict[ObjectKey, dict[str, tuple[float, float, int]]]:
        """Workload -> replica -> (first, last) time it drove ``step`` (None: any step) at or
        after ``since`` (from its step lines to the line saying its run stopped, if any) and
        how often it logged the step done."""
        found: dict[ObjectKey, dict[str, tuple[float, float, int]]] = {}
        for r in self.replicas:
            seen: dict[ObjectKey, list[tuple[float, bool]]] = {}
            for line in r.lines():
                m = STEP_LINE.search(line.msg)
                if line.time < since:
                    continue
                if m is not None and step in (None, m.group(3)):
                    key = ObjectKey.parse(line.msg.split(" step ", 1)[0])
                    seen.setdefault(key, []).append((line.time, m.group(4) == ":"))
                elif line.msg.startswith("sync of "):  # (stopped, interrupted: the span's end)
                    for key, times in seen.items():
                        if f" {key}" in line.msg:
                            times.append((line.time, False))
            for key, times in seen.items():
                found.setdefault(key, {})[r.name] = (times[0][0], times[-1][0],
                                                     sum(done for _, done in times))
        return found

    def close(self) -> None:
        for r in self.replicas:
            r.terminate()
        self.leases.close()
