"""Soak (issue 6, item 10): a bounded run of repeated commits against real `gitray sync`
replicas with a leader fault every few minutes. Not part of scripts/test: every test here is
marked ``soak`` (scripts/test deselects it with ``-m "not soak"``); run it with
``scripts/soak``.

The cycle of commits: an upgrade (new cluster, blue-green), a Serve-only change, a failing
upgrade (an app that cannot import: DEPLOY_FAILED, traffic stays), a revert to the last good
spec. Each commit's final status must be right before the next is pushed. Every
``GITRAY_SOAK_FAULT_EVERY_S`` seconds the leader gets a fault at a random moment of a run:
replica ``r0`` is long-lived (its memory is the one watched), so when it leads it is SIGSTOPped
for longer than the Lease and continued; any other leader is SIGKILLed and replaced.

At the end: every commit's final status (git notes) is right; no leaked clusters, Services, run
records or Ray heads; the daemons' VmRSS (sampled from /proc every 10 s) is printed and r0's
must not keep growing.

Settings (environment): ``GITRAY_SOAK_MINUTES`` (default 30), ``GITRAY_SOAK_FAULT_EVERY_S``
(default 180), ``GITRAY_TESTENV_STATE`` (reuse a running environment; otherwise one is started
and stopped by this module).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testenv.helpers import (
    EnvUnavailable,
    TestEnv,
    environment,
    make_namespace,
    wait_for,
)
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import CALC, GREETER, example_rayservice
from tests.integration.chaos import Replica, holder_pid, isolated, lease_holder, start_replica
from tests.integration.gitops import GitOpsRepo

SVC = "serve-demo"
BROKEN = ("broken", "/broken", "serve_apps.nope:app")

pytestmark = pytest.mark.soak


@pytest.fixture(scope="module")
def soak_env() -> Iterator[TestEnv]:
    try:
        reuse = os.environ.get("GITRAY_TESTENV_STATE")
        with environment(reuse, "gitray-soak-env-", keep_logs=False) as (env, _):
            yield env
    except EnvUnavailable as exc:
        pytest.fail(str(exc))


@dataclass
class Memory:
    """VmRSS samples (KiB) per replica, every ``period`` seconds, from a background thread."""

    replicas: list[Replica]
    period: float = 10.0
    series: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.wait(self.period):
            for r in list(self.replicas):
                rss = r.rss_kib() if r.alive() else None
                if rss is not None:
                    self.series.setdefault(r.name, []).append((time.monotonic(), rss))

    def stop(self) -> None:
        self._stop.set()


def final_state(bare: Path, sha: str) -> str | None:
    from gitray.hosts.notes import GitNotesProvider

    record = GitNotesProvider(bare).records(sha).get("gitray")
    state = record.get("state") if record else None
    return state if state in {"success", "failure", "error"} else None


def test_soak(soak_env: TestEnv, tmp_path: Path) -> None:

    env = soak_env
    minutes = float(os.environ.get("GITRAY_SOAK_MINUTES", "30"))
    fault_every = float(os.environ.get("GITRAY_SOAK_FAULT_EVERY_S", "180"))
    rng = random.Random(int(os.environ.get("GITRAY_SOAK_SEED", "6")))
    ns = make_namespace(env, "soak")
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))

    def spec(version: int, apps: tuple[tuple[str, str, str], ...]) -> str:
        return dump(example_rayservice(ns, image=f"rayproject/ray:2.60.{version}",
                                       serve=serve_config(*apps)))

    def push(message: str, files: dict[str, str | None]) -> str:
        sha = work.commit(message, files)
        work.git("push", "-q", "origin", "main")
        return sha

    replicas: list[Replica] = []

    def start() -> Replica:
        r = start_replica(env.kubeconfig, ns, bare, tmp_path, f"r{len(replicas)}")
        replicas.append(r)
        return r

    memory = Memory(replicas)
    sampler = threading.Thread(target=memory.run, daemon=True)
    results: list[tuple[str, str, str, str | None, float]] = []  # kind, sha, want, got, s
    faults: list[str] = []
    version, apps = 0, (GREETER,)
    good = spec(version, apps)
    try:
        first = push("first", {"gitray.yaml": isolated(gitray_config(
            "2s", status={"provider": "git-notes"}), ns), "svc.yaml": good})
        start()
        start()
        sampler.start()
        t_end = time.monotonic() + minutes * 60
        next_fault = time.monotonic() + fault_every
        pending: list[tuple[str, str, str]] = [("first", first, "success")]
        kinds = ["upgrade", "serve-only", "failure", "revert"]
        n = 0
        fault: list[float] = []  # wall (monotonic) time of the next fault, once scheduled
        n_faults = 0
        while True:
            kind, sha, want = pending.pop()
            t0 = time.monotonic()
            if time.monotonic() >= next_fault and not fault:
                fault.append(t0 + rng.uniform(1, 20))  # inside this run if it lasts so long

            def settled(sha: str = sha) -> str | None:
                if fault and time.monotonic() >= fault[0]:
                    fault.clear()  # a fault not yet injected carries over to the next commit
                    faults.append(inject(env, ns, replicas, start))
                return final_state(bare, sha)
            got = wait_for(settled, timeout=600, interval=0.5, what=f"{kind} {sha[:7]} status")
            results.append((kind, sha, want, got, time.monotonic() - t0))
            if len(faults) > n_faults:
                n_faults = len(faults)
                next_fault = time.monotonic() + fault_every
                print(f"fault: {faults[-1]}")
            print(f"{kind:<10} {sha[:7]} want {want:<7} got {got:<7} in "
                  f"{results[-1][4]:.0f} s")
            assert got == want, f"{kind} {sha[:7]}: status {got}, expected {want}\n" \
                + "\n".join(r.log.read_text()[-3000:] for r in replicas[-2:])
            settle(env, ns)
            if time.monotonic() >= t_end:
                break
            kind = kinds[n % len(kinds)]
            n += 1
            if kind == "upgrade":
                version += 1
                good = spec(version, apps)
                pending.append((kind, push(kind, {"svc.yaml": good}), "success"))
            elif kind == "serve-only":
                apps = (GREETER, CALC) if apps == (GREETER,) else (GREETER,)
                good = spec(version, apps)
                pending.append((kind, push(kind, {"svc.yaml": good}), "success"))
            elif kind == "failure":
                pending.append((kind, push(kind, {"svc.yaml": spec(version + 100,
                                                                   (GREETER, BROKEN))}),
                                "failure"))
            else:
                pending.append((kind, push(kind, {"svc.yaml": good}), "success"))

        # ---- the end state -----------------------------------------------------------------
        def clusters() -> list[str]:
            items = env.custom.list_namespaced_custom_object("ray.io", "v1", ns,
                                                             "rayclusters")["items"]
            return sorted(i["metadata"]["name"] for i in items)

        def serving() -> str:
            svc = env.core.read_namespaced_service(f"{SVC}-serve-svc", ns)
            return str(svc.spec.selector["ray.io/cluster"])
        active = serving()
        wait_for(lambda: clusters() == [active] or None, timeout=180,
                 what=f"only the active cluster {active} left")
        services = sorted(s.metadata.name for s in env.core.list_namespaced_service(ns).items)
        assert services == sorted([f"{SVC}-head-svc", f"{SVC}-serve-svc",
                                   f"{active}-head-svc"]), services
        records = env.core.list_namespaced_config_map(
            ns, label_selector="gitray.io/role=progress").items
        assert len(records) == 1, [r.metadata.name for r in records]
        wait_for(lambda: [h["pod"] for h in env.ray_heads() if h["namespace"] == ns
                          and not h["pod"].startswith(active)] == [] or None, timeout=120,
                 what="no Ray head left but the active cluster's")
        heads = [h for h in env.ray_heads() if h["namespace"] == ns]
        assert len(heads) == 1, heads
    finally:
        memory.stop()
        for r in replicas:
            r.terminate()
        env.core.delete_namespace(ns)

    # ---- figures ------------------------------------------------------------------------
    by_kind: dict[str, list[float]] = {}
    for kind, _, _, _, seconds in results:
        by_kind.setdefault(kind, []).append(seconds)
    print(f"\nsoak: {minutes:g} min, {len(results)} commits, faults: {faults}")
    for kind, secs in by_kind.items():
        print(f"  {kind:<10} n={len(secs)} median {statistics.median(secs):.0f} s "
              f"max {max(secs):.0f} s")
    for name, series in memory.series.items():
        mib = [kib / 1024 for _, kib in series]
        print(f"  RSS {name}: {len(mib)} samples, first {mib[0]:.0f} MiB, "
              f"min {min(mib):.0f}, max {max(mib):.0f}, last {mib[-1]:.0f} MiB")
    long_lived = memory.series.get("r0", [])
    assert len(long_lived) >= 6, "too few memory samples of r0"
    quarter = max(1, len(long_lived) // 4)
    early = statistics.median(k for _, k in long_lived[quarter:2 * quarter])  # after warm-up
    late = statistics.median(k for _, k in long_lived[-quarter:])
    print(f"  r0 RSS median after warm-up {early / 1024:.0f} MiB, last quarter "
          f"{late / 1024:.0f} MiB")
    assert late <= early * 1.25 + 20 * 1024, f"r0's memory grew: {early} -> {late} KiB"
    deadline = time.monotonic() + 120
    while [h for h in env.ray_heads() if h["namespace"] == ns] \
            and time.monotonic() < deadline:
        time.sleep(1)
    assert not [h for h in env.ray_heads() if h["namespace"] == ns], "Ray heads leaked"


def settle(env: TestEnv, ns: str) -> None:
    """Wait until only the serving cluster (and its Ray head) is left: kwok gives a deleted
    pod's IP to the next pod at once, and a head still answering there would be taken for the
    next cluster's."""
    def only_active() -> bool:
        svc = env.core.read_namespaced_service(f"{SVC}-serve-svc", ns)
        active = svc.spec.selector["ray.io/cluster"]
        items = env.custom.list_namespaced_custom_object("ray.io", "v1", ns,
                                                         "rayclusters")["items"]
        return [i["metadata"]["name"] for i in items] == [active] and all(
            h["pod"].startswith(f"{active}-") for h in env.ray_heads()
            if h["namespace"] == ns)
    wait_for(only_active, timeout=180, what="only the serving cluster left")


def inject(env: TestEnv, ns: str, replicas: list[Replica], start: object) -> str:
    """One leader fault: SIGSTOP the long-lived r0 past the Lease, or SIGKILL another leader
    and start a replacement."""
    holder, _ = lease_holder(env, ns)
    pid = holder_pid(holder)
    leader = next((r for r in replicas if r.pid == pid and r.alive()), None)
    if leader is None:
        return "no leader"
    if leader.name == "r0":
        leader.signal(signal.SIGSTOP)
        time.sleep(7)  # longer than the 4 s Lease
        leader.signal(signal.SIGCONT)
        return "SIGSTOP r0 7 s"
    leader.kill()
    start()  # type: ignore[operator]
    return f"SIGKILL {leader.name}"
