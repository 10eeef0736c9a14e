"""Shard Leases kept by ShardKeepers against the real kube-apiserver (issue 28, docs/sharding.md).

Each keeper runs its rounds in a thread of its own, with its own Kube client and identity, as a
replica would; durations 4 s / 3 s / 0.5 s. A "crash" stops a keeper's rounds without releasing
anything (its Leases lapse); a hand-over stops them and calls ``release_all``.

A sampler reads, every 50 ms, the shards each keeper says it may drive, then the Leases, then
the keepers' views again (what a view names both times was driven while the Leases were read: a
keeper stops driving a shard before it writes its Lease free), and records every violation: a
shard two keepers drive at once; two shard counts driven at once; a keeper driving a shard
whose Lease, read meanwhile, names another holder or epoch; a Lease's epoch going backwards, or
its holder changing without a new epoch. Only the API server's
records are trusted for holders and epochs; the keepers' own views are what is checked.

Only the API server is needed (the `apiserver` fixture: any running environment, or one
without the real node); no Gateway, and nothing here counts failed requests: no marker beyond
`integration`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gitray.cli.status import shard_owners
from gitray.core.errors import TransientError
from gitray.core.model import ObjectKey
from gitray.core.timefmt import utc_timestamp
from gitray.daemon.metrics import Metrics
from gitray.daemon.owners import ShardOwner
from gitray.engine.fleet import Fleet
from gitray.engine.shardkeeper import ShardKeeper
from gitray.engine.shards import (
    ShardCount,
    count_lease_name,
    member_lease_name,
    parse_shard_lease_name,
    shard_lease_name,
    shard_of,
)
from gitray.engine.shardview import ANN_SYNCED, Changes, lease_selector
from gitray.k8s.client import Kube
from gitray.k8s.election import (
    LEASE_API_VERSION,
    LeaseRecord,
    LeaseSettings,
    lease_body,
    released_record,
)
from gitray.k8s.settings import KubeSettings
from testenv.helpers import TestEnv, wait_for

LEASE_S, RENEW_S, RETRY_S = 4, 3.0, 0.5
BASE = "gitray"
# a keeper's view is checked against Leases read within this much of it: a holder's renew
# deadline ends this long before any other replica can see its Lease lapse
FENCE_WINDOW_S = LEASE_S - RENEW_S


class Replica:
    """One keeper, its client and the thread running its rounds."""

    def __init__(self, kubeconfig: str, namespace: str, shards: int, name: str,
                 **keeper_args: Any) -> None:
        self.shards = shards
        self.kube = Kube.connect(KubeSettings(kubeconfig=kubeconfig, request_timeout_s=2))
        settings = LeaseSettings(namespace=namespace, name=BASE,
                                 identity=f"{name}_{secrets.token_hex(3)}",
                                 lease_duration_s=LEASE_S, renew_deadline_s=RENEW_S,
                                 retry_period_s=RETRY_S)
        self.changes: list[Changes] = []
        self.told_at: list[float] = []  # when each of ``changes`` was told (monotonic)
        self.keeper = ShardKeeper(self.kube, settings, shards, forget_after_s=2.0,
                                  on_changes=self._told, **keeper_args)
        self.stopping = threading.Event()
        self.handing_over = False
        self.thread = threading.Thread(target=self.keeper.run, args=(self.stopping,),
                                       name=f"keeper-{name}", daemon=True)
        self.thread.start()

    def _told(self, changes: Changes) -> None:
        self.told_at.append(time.monotonic())
        self.changes.append(changes)

    @property
    def identity(self) -> str:
        return self.keeper.identity

    def held(self) -> dict[int, int]:
        return self.keeper.shards()

    def crash(self) -> None:
        """Stop renewing, release nothing (as a SIGKILL leaves it)."""
        self.stopping.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()

    def hand_over(self) -> Changes:
        self.handing_over = True
        self.crash()
        return self.keeper.release_all()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.kube.close()


@dataclass
class Sampler:
    """Checks the keepers against the Leases every 50 ms (see the module docstring)."""

    kube: Kube
    namespace: str
    replicas: list[Replica] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    fenced_checks: int = 0  # keeper views checked against Leases read within the window
    samples: int = 0
    errors: int = 0  # samples lost to a slow API server
    # Lease name -> (wall time, holder, epoch, the renewTime it had before) at each change of
    # its holder or epoch seen
    history: dict[str, list[tuple[float, str, int, str]]] = field(default_factory=dict)
    _last: dict[str, LeaseRecord] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def leases(self) -> dict[str, LeaseRecord]:
        items, _ = self.kube.list(LEASE_API_VERSION, "Lease", namespace=self.namespace,
                                  label_selector=lease_selector(BASE))
        return {o["metadata"]["name"]: LeaseRecord.from_spec(o.get("spec")) for o in items}

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self._sample()
            except TransientError:  # the API server slow for a moment: no sample
                self.errors += 1
            except Exception as e:
                self.violations.append(f"sampler failed: {e!r}")

    def _sample(self) -> None:
        t1 = time.monotonic()
        replicas = list(self.replicas)
        before = [r.held() for r in replicas]
        leases = self.leases()
        # A keeper drops a shard from its view before it writes the Lease free, so a view read
        # before the LIST may name a shard released while the LIST ran: only what each view
        # names both before and after the LIST (the same epoch) was driven while it ran.
        views = [(r, {s: e for s, e in held.items() if after.get(s) == e})
                 for r, held, after in zip(replicas, before, [r.held() for r in replicas],
                                           strict=True)]
        window = time.monotonic() - t1
        self.samples += 1
        driving: dict[tuple[int, int], str] = {}
        counts = {r.shards for r, held in views if held}
        if len(counts) > 1:
            self.violations.append(f"counts {sorted(counts)} driven at once")
        for r, held in views:
            for shard, epoch in held.items():
                other = driving.setdefault((r.shards, shard), r.identity)
                if other != r.identity:
                    self.violations.append(f"shard {shard} of {r.shards} driven by "
                                           f"{other} and {r.identity}")
                if window >= FENCE_WINDOW_S or r.handing_over:
                    continue
                self.fenced_checks += 1
                lease = leases.get(shard_lease_name(BASE, shard, r.shards))
                if lease is None or (lease.holder, lease.transitions) != (r.identity, epoch):
                    self.violations.append(f"{r.identity} drives shard {shard} of {r.shards} "
                                           f"in epoch {epoch}; its Lease says {lease}")
        now = time.time()
        for name, lease in leases.items():
            before = self._last.get(name)
            if before is None or (before.holder, before.transitions) != (lease.holder,
                                                                         lease.transitions):
                self.history.setdefault(name, []).append((
                    now, lease.holder, lease.transitions, before.renew_time if before else ""))
            if before is None or parse_shard_lease_name(BASE, name) is None:
                continue
            if lease.transitions < before.transitions:
                self.violations.append(f"{name}: epoch {before.transitions} -> "
                                       f"{lease.transitions}")
            if lease.holder and lease.holder != before.holder and \
                    lease.transitions == before.transitions:
                self.violations.append(f"{name}: {before.holder} -> {lease.holder} in the "
                                       f"same epoch {lease.transitions}")
        self._last = leases

    def assert_clean(self) -> None:
        assert self.samples >= 10, f"the sampler ran only {self.samples} times"
        assert self.fenced_checks > 0, "no keeper view was checked against its Lease"
        assert self.violations == [], self.violations[:10]
        print(f"sampler: {self.samples} samples, {self.fenced_checks} views checked against "
              f"their Leases, {self.errors} lost to a slow API server")


class Cluster:
    """Replicas and the sampler of one test's namespace."""

    def __init__(self, env: TestEnv, namespace: str) -> None:
        self.kubeconfig = str(env.kubeconfig)
        self.namespace = namespace
        self.kube = Kube.connect(KubeSettings(kubeconfig=self.kubeconfig, request_timeout_s=5))
        self.sampler = Sampler(self.kube, namespace)
        self.sampler.start()

    def start(self, shards: int, *names: str, kubeconfig: str = "",
              **keeper_args: Any) -> list[Replica]:
        made = [Replica(kubeconfig or self.kubeconfig, self.namespace, shards, n, **keeper_args)
                for n in names]
        self.sampler.replicas += made
        return made

    def holders(self, shards: int) -> dict[int, LeaseRecord]:
        """Shard -> its Lease record, for the shard Leases of count ``shards``."""
        found = {}
        for name, record in self.sampler.leases().items():
            parsed = parse_shard_lease_name(BASE, name)
            if parsed is not None and parsed[1] == shards:
                found[parsed[0]] = record
        return found

    def count(self) -> ShardCount | None:
        live = self.kube.get_or_none(LEASE_API_VERSION, "Lease", self.namespace,
                                     count_lease_name(BASE))
        return None if live is None else ShardCount.from_annotations(
            live["metadata"].get("annotations") or {})

    def member_exists(self, r: Replica) -> bool:
        return self.kube.get_or_none(LEASE_API_VERSION, "Lease", self.namespace,
                                     member_lease_name(BASE, r.identity)) is not None

    def close(self) -> None:
        self.sampler.stop()
        for r in self.sampler.replicas:
            r.close()
        self.kube.close()


@pytest.fixture
def cluster(apiserver: TestEnv, api_namespace: str) -> Iterator[Cluster]:
    made = Cluster(apiserver, api_namespace)
    yield made
    made.close()


def sizes(replicas: list[Replica]) -> list[int]:
    return sorted(len(r.held()) for r in replicas)


def converge(cluster: Cluster, replicas: list[Replica], want: list[int],
             timeout: float = 30) -> float:
    """Wait until the replicas drive ``want`` shards (sorted sizes) and the Leases say the
    same; seconds it took."""
    t0 = time.monotonic()

    def done() -> bool:
        if sizes(replicas) != want:
            return False
        held = {s: i for r in replicas for s, i in [(s, r.identity) for s in r.held()]}
        leases = cluster.holders(replicas[0].shards)
        return all(leases[s].holder == i for s, i in held.items())

    wait_for(done, timeout=timeout, interval=0.05, what=f"shards spread as {want}")
    return time.monotonic() - t0


def three_balanced(cluster: Cluster) -> tuple[Replica, list[Replica]]:
    """Three keepers with two shards each: the one to stop, and the others."""
    replicas = cluster.start(6, "a", "b", "c")
    converge(cluster, replicas, [2, 2, 2])
    return replicas[2], replicas[:2]


def test_three_keepers_share_six_shards_two_each(cluster: Cluster) -> None:
    replicas = cluster.start(6, "a", "b", "c")
    took = converge(cluster, replicas, [2, 2, 2])
    leases = cluster.holders(6)
    assert sorted(leases) == list(range(6))
    assert sorted(Counter(r.holder for r in leases.values()).values()) == [2, 2, 2]
    assert {r.holder for r in leases.values()} == {r.identity for r in replicas}
    assert cluster.count() == ShardCount(6, 0)
    # balanced means nothing moves: 8 more rounds, same holders, same epochs, nothing told
    before = {s: (r.holder, r.transitions) for s, r in leases.items()}
    told = [len(r.changes) for r in replicas]
    time.sleep(8 * RETRY_S)
    assert {s: (r.holder, r.transitions) for s, r in cluster.holders(6).items()} == before
    assert [len(r.changes) for r in replicas] == told
    assert sorted(s for r in replicas for c in r.changes for s in c.gained) == \
        sorted([*range(6), *(s for r in replicas for c in r.changes for s in c.lost)])
    cluster.sampler.assert_clean()
    print(f"converged in {took:.2f} s")


def test_a_crashed_keepers_shards_are_taken_after_its_leases_lapse(cluster: Cluster) -> None:
    victim, rest = three_balanced(cluster)
    lost = {s: r for s, r in cluster.holders(6).items() if r.holder == victim.identity}
    t0 = time.monotonic()
    victim.crash()
    converge(cluster, rest, [3, 3], timeout=30)
    took = time.monotonic() - t0
    # not before its Leases lapsed (4 s after its last renew, seen at most a round late)
    assert took >= LEASE_S - 2 * RETRY_S, took
    assert victim.held() == {}  # its renew deadline passed without a renew
    after = cluster.holders(6)
    for shard, record in lost.items():
        assert after[shard].holder in {r.identity for r in rest}
        assert after[shard].transitions == record.transitions + 1
        owner = next(r for r in rest if r.identity == after[shard].holder)
        assert owner.held()[shard] == after[shard].transitions
    # its member Lease is deleted once lapsed for forget_after_s (2 s)
    wait_for(lambda: not cluster.member_exists(victim), timeout=20, interval=0.2,
             what="the crashed keeper's member Lease deleted")
    assert all(cluster.member_exists(r) for r in rest)
    cluster.sampler.assert_clean()
    print(f"taken over {took:.2f} s after the crash")


def test_release_all_hands_the_shards_over_within_a_round(cluster: Cluster) -> None:
    leaving, rest = three_balanced(cluster)
    mine = leaving.held()
    t0 = time.monotonic()
    result = leaving.hand_over()
    released = time.monotonic() - t0
    assert result.lost == tuple(sorted(mine)) and leaving.held() == {}
    assert not cluster.member_exists(leaving)
    leases = cluster.holders(6)
    assert all(leases[s].holder in ("", *(r.identity for r in rest)) for s in mine)
    converge(cluster, rest, [3, 3], timeout=30)
    took = time.monotonic() - t0
    # released, not lapsed: the others' next round takes them, before a Lease left as a crash
    # leaves it could be taken (the lower bound of the crash test above; a bound of LEASE_S / 2
    # failed at 2.28 s in a clean-clone run with three lanes beside it)
    assert took < LEASE_S - 2 * RETRY_S, took
    after = cluster.holders(6)
    assert all(after[s].transitions == e + 1 for s, e in mine.items())
    assert leaving.keeper.round() == Changes() and leaving.held() == {}  # closed for good
    cluster.sampler.assert_clean()
    print(f"released in {released:.2f} s, taken {took:.2f} s after release_all began")


def test_a_shard_moved_to_a_newcomer_is_released_once_its_runs_stop(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """A keeper that gives shards to a newcomer stops driving them at once but keeps their
    Leases (renewed) while a run of theirs is on a worker (``busy``), and releases each as
    its runs stop: a step past its fence lands before the next holder takes the shard."""
    stopped: set[int] = set()  # the shards whose runs on workers have stopped
    a = cluster.start(6, "a", busy=lambda shard: shard not in stopped)[0]
    converge(cluster, [a], [6])
    caplog.set_level(logging.INFO, logger="gitray.engine.shardkeeper")
    b = cluster.start(6, "b")[0]
    wait_for(lambda: len(a.held()) == 3, timeout=30, interval=0.05,
             what="a stopped driving the shards it gives b")
    moving = sorted(set(range(6)) - set(a.held()))
    before = cluster.holders(6)
    time.sleep(2 * LEASE_S)  # longer than a lease: renewed, never lapsed, never taken
    during = cluster.holders(6)
    for shard in moving:
        assert during[shard].holder == a.identity, (shard, during[shard])
        assert during[shard].transitions == before[shard].transitions
        assert during[shard].renew_time > before[shard].renew_time
    assert b.held() == {} and len(a.held()) == 3
    waiting = [r.getMessage() for r in caplog.records if "once its runs" in r.getMessage()]
    assert len(waiting) == 3, waiting  # said once per shard, not every round
    stopped.add(moving[0])  # one shard's runs stop: that one moves, the others still wait
    wait_for(lambda: set(b.held()) == {moving[0]}, timeout=10, interval=0.05,
             what=f"b drives shard {moving[0]}")
    assert all(cluster.holders(6)[s].holder == a.identity for s in moving[1:])
    t0 = time.monotonic()
    stopped.update(moving)
    converge(cluster, [a, b], [3, 3], timeout=10)
    took = time.monotonic() - t0
    after = cluster.holders(6)
    assert sorted(b.held()) == moving
    assert all(after[s].transitions == before[s].transitions + 1 for s in moving)
    cluster.sampler.assert_clean()
    print(f"moved {moving}; the last two taken {took:.2f} s after their runs stopped")


def test_a_run_that_never_stops_holds_its_shard_drain_max_s_at_most(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    a = cluster.start(6, "a", busy=lambda shard: True, drain_max_s=3.0)[0]
    converge(cluster, [a], [6])
    t0 = time.monotonic()
    cluster.start(6, "b")
    converge(cluster, cluster.sampler.replicas, [3, 3], timeout=30)
    took = time.monotonic() - t0
    assert took >= 3.0, took
    said = [r.getMessage() for r in caplog.records if "still on a worker" in r.getMessage()]
    assert len(said) == 3, said
    cluster.sampler.assert_clean()
    print(f"balanced {took:.2f} s after b started (drain_max_s 3 s)")


def test_resharding_six_to_four_by_replacing_keepers(cluster: Cluster) -> None:
    olds = cluster.start(6, "old-a", "old-b", "old-c")
    converge(cluster, olds, [2, 2, 2])
    news = cluster.start(4, "new-a", "new-b", "new-c")
    # the incumbent count stays while its replicas run: the new ones announce and wait
    time.sleep(6 * RETRY_S)
    assert sizes(news) == [0, 0, 0] and cluster.holders(4) == {}
    assert cluster.count() == ShardCount(6, 0)
    assert all(cluster.member_exists(r) for r in news)
    for r in olds[:2]:
        r.hand_over()
    converge(cluster, olds[2:], [6])
    assert sizes(news) == [0, 0, 0] and cluster.holders(4) == {}
    # the last old one is killed: the new count waits for its Leases to lapse
    epochs = max(r.transitions for r in cluster.holders(6).values())
    t0 = time.monotonic()
    olds[2].crash()
    converge(cluster, news, [1, 1, 2], timeout=40)
    took = time.monotonic() - t0
    assert took >= LEASE_S - 2 * RETRY_S, took
    count = cluster.count()
    assert count is not None and count.shards == 4 and count.epoch_base == epochs + 1
    assert all(r.transitions >= count.epoch_base for r in cluster.holders(4).values())
    cluster.sampler.assert_clean()
    print(f"count 4 driving {took:.2f} s after the last old keeper was killed")


def test_a_shard_taken_while_another_count_is_live_waits_for_the_gate(cluster: Cluster) -> None:
    """A Lease of another count held live (an older gitray, or a paused replica of the old
    count) keeps a shard just taken from being driven; it is driven once that Lease is free."""
    replicas = cluster.start(6, "a", "b")
    converge(cluster, replicas, [3, 3])
    foreign = shard_lease_name(BASE, 0, 4)
    record = LeaseRecord(holder="paused-old", duration_s=LEASE_S, transitions=7)
    body = {"apiVersion": LEASE_API_VERSION, "kind": "Lease",
            "metadata": {"name": foreign, "namespace": cluster.namespace,
                         "labels": {"gitray.io/lease": BASE}},
            "spec": record.to_spec()}
    live = cluster.kube.create(body)
    stop = threading.Event()
    renewals: list[float] = []

    def renew() -> None:  # keep the foreign claim live: a change every second
        nonlocal live
        while not stop.wait(1.0):
            live = cluster.kube.replace(lease_body(live, LeaseRecord(
                holder="paused-old", duration_s=LEASE_S, renew_time=utc_timestamp(digits=6),
                transitions=7)))
            renewals.append(time.monotonic())

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        late = cluster.start(6, "late")[0]
        wait_for(lambda: sum(r.holder == late.identity for r in cluster.holders(6).values())
                 == 2, timeout=20, interval=0.05, what="the late keeper holding 2 shards")
        time.sleep(4 * RETRY_S)  # rounds pass: held, not driven
        assert late.held() == {}
        assert sum(r.holder == late.identity for r in cluster.holders(6).values()) == 2
        assert sizes(replicas) == [2, 2]  # the others drive what they kept
        assert renewals and time.monotonic() - renewals[-1] < 2.0  # it was kept live
    finally:
        stop.set()
        renewer.join(timeout=5)
    cluster.kube.replace(lease_body(live, released_record(LeaseRecord(transitions=7),
                                                          utc_timestamp(digits=6))))
    t0 = time.monotonic()
    converge(cluster, [*replicas, late], [2, 2, 2], timeout=20)
    print(f"driven {time.monotonic() - t0:.2f} s after the other count's Lease was released")
    cluster.sampler.assert_clean()


class Link:
    """A TCP forwarder on loopback between a keeper and the API server: ``cut`` closes every
    connection and resets each new one (the API server is down, as the keeper sees it) until
    ``restore``. Nothing is imitated: the bytes are the API server's own (TLS end to end)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def cut(self) -> None:
        self.down.set()
        with self.lock:
            for s in self.open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.open = []

    def restore(self) -> None:
        self.down.clear()

    def close(self) -> None:
        self.cut()
        self.listener.close()

    def kubeconfig(self, original: str, path: Path) -> str:
        """``original`` with its server moved to this link."""
        config = json.loads(Path(original).read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path.write_text(json.dumps(config))
        return str(path)


def test_an_api_server_outage_gives_the_shards_up_at_the_renew_deadline(
        cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One keeper loses the API server: it says so once, keeps its shards to their renew
    deadline and not past it; the others take them after the lapse; it rejoins when the API
    server answers again."""
    server = json.loads(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]
    host, port = server["server"].removeprefix("https://").rsplit(":", 1)
    link = Link((host, int(port)))
    try:
        others = cluster.start(6, "a", "b")
        cut_off = cluster.start(6, "c", kubeconfig=link.kubeconfig(cluster.kubeconfig,
                                                                  tmp_path / "kc"))[0]
        converge(cluster, [*others, cut_off], [2, 2, 2])
        mine = cut_off.held()
        caplog.set_level(logging.INFO, logger="gitray.engine.shardkeeper")
        caplog.clear()
        t0 = time.monotonic()
        link.cut()
        converge(cluster, others, [3, 3], timeout=30)
        taken = time.monotonic() - t0
        lost = {s: t for t, c in zip(cut_off.told_at, cut_off.changes, strict=True)
                if t >= t0 for s in c.lost}  # (each shard given up at its own deadline:
        assert set(lost) == set(mine), (lost, mine)  # one change for all, or one each)
        lost_at = max(lost.values()) - t0
        assert cut_off.held() == {}
        # given up by its renew deadline (counted from its last renew, before the cut), and
        # before the others could take them (lease duration after they saw that renew)
        assert lost_at <= RENEW_S + 2 * RETRY_S, lost_at
        assert lost_at < taken, (lost_at, taken)
        time.sleep(4 * RETRY_S)  # more failed rounds: still said once
        said = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith(f"the shard Leases of {cut_off.identity}:")]
        assert len(said) == 1, said
        link.restore()
        converge(cluster, [*others, cut_off], [2, 2, 2], timeout=30)
        assert any("can be read and written again" in r.getMessage() for r in caplog.records)
        cluster.sampler.assert_clean()
        print(f"gave up its shards {lost_at:.2f} s after the cut, taken {taken:.2f} s after it")
    finally:
        link.close()


Posted = dict[str, list[tuple[str, str, str]]]


def _two_owners(cluster: Cluster) -> tuple[Posted, Fleet, list[ShardOwner]]:
    """Two replicas sharing 4 shards, each with its ShardOwner (the holder of shard 0 first),
    and what each posted."""
    replicas = cluster.start(4, "a", "b")
    converge(cluster, replicas, [2, 2])
    posted: Posted = {r.identity: [] for r in replicas}
    fleet = Fleet(1, lambda *_: None)
    owners = [ShardOwner(r.keeper, 4, fleet, Metrics(), threading.Event(), lambda: None,
                         lambda *a, r=r: posted[r.identity].append(a)) for r in replicas]
    return posted, fleet, sorted(owners, key=lambda o: 0 not in o.keeper.shards())


def test_the_commit_is_in_sync_once_every_shard_lease_says_so_and_shard_0_posts_it(
        cluster: Cluster) -> None:
    """Each replica marks the shards it found in sync (written with its next renew); the
    holder of shard 0 posts the commit's overall success once, when every shard says that
    commit, and the other replica never does."""
    posted, fleet, owners = _two_owners(cluster)
    first, second = owners
    try:
        first.mark_synced(first.ownership(), "c1")
        for _ in range(3):  # (written with the renews; c1 is not every shard's yet)
            first.attempt()
            second.attempt()
        assert first.keeper.synced is None and not any(posted.values())
        second.mark_synced(second.ownership(), "c1")
        wait_for(lambda: (second.attempt(), first.attempt(), first.keeper.synced)[-1] == "c1",
                 timeout=10, interval=RETRY_S, what="every shard Lease saying c1")
        for _ in range(3):
            first.attempt()
        assert posted[first.keeper.identity] == [("c1", "success",
                                                  "in sync at c1 (all 4 shards)")]
        assert posted[second.keeper.identity] == []
        items, _ = cluster.kube.list(LEASE_API_VERSION, "Lease", namespace=cluster.namespace,
                                     label_selector=lease_selector(BASE))
        said = {(o["metadata"].get("annotations") or {}).get(ANN_SYNCED)
                for o in items if (parse_shard_lease_name(BASE, o["metadata"]["name"])
                                   or (0, 0))[1] == 4}
        assert said == {"c1"}
        # a newer commit: one replica's shards there, the other's not yet: no verdict
        second.mark_synced(second.ownership(), "c2")
        wait_for(lambda: (second.attempt(), first.attempt(), first.keeper.synced)[-1] is None,
                 timeout=10, interval=RETRY_S, what="the shards at two commits")
        assert len(posted[first.keeper.identity]) == 1
    finally:
        fleet.shutdown()
    cluster.sampler.assert_clean()


def test_the_holder_of_shard_0_says_the_newest_commit_pending_until_every_shard_is_in_sync(
        cluster: Cluster) -> None:
    """Every replica plans the newest commit (``applying``); the holder of shard 0 says it is
    pending once, then in sync when every shard's Lease says so; a commit superseded before
    that is an error. The other replica posts nothing."""
    posted, fleet, owners = _two_owners(cluster)
    first, second = owners
    said = posted[first.keeper.identity]

    def both(sha: str) -> None:
        for o in owners:
            o.applying(sha)

    try:
        both("c1")
        for _ in range(3):
            first.attempt()
            second.attempt()
        assert said == [("c1", "pending", "applying c1 across 4 shards")]
        # c2 comes before every shard was in sync at c1 (only the first's shards were)
        first.mark_synced(first.ownership(), "c1")
        first.attempt()
        both("c2")
        first.attempt()
        assert said[1:] == [("c1", "error", "superseded by c2 before every shard was in sync "
                                             "at it"),
                            ("c2", "pending", "applying c2 across 4 shards")]
        for o in owners:
            o.mark_synced(o.ownership(), "c2")
        wait_for(lambda: (second.attempt(), first.attempt(), first.keeper.synced)[-1] == "c2",
                 timeout=10, interval=RETRY_S, what="every shard Lease saying c2")
        for _ in range(3):
            first.attempt()
        assert said[3:] == [("c2", "success", "in sync at c2 (all 4 shards)")]
        # c3 in sync everywhere before the next round: no pending, no error, its success
        both("c3")
        for o in owners:
            o.mark_synced(o.ownership(), "c3")
        wait_for(lambda: (second.attempt(), first.keeper.synced)[-1] == "c3", timeout=10,
                 interval=RETRY_S, what="every shard Lease saying c3")
        first.attempt()
        assert said[4:] == [("c3", "success", "in sync at c3 (all 4 shards)")]
        assert posted[second.keeper.identity] == []
    finally:
        fleet.shutdown()
    cluster.sampler.assert_clean()


def test_gitray_status_names_each_workload_s_shard_and_the_replica_holding_it(
        cluster: Cluster) -> None:
    keys = [ObjectKey("RayService", "team", f"svc-{i}") for i in range(12)]
    assert shard_owners(cluster.kube, cluster.namespace, BASE)(keys[0]) == ""  # not sharded (yet)
    replicas = cluster.start(3, "a", "b")
    converge(cluster, replicas, [1, 2])
    owner = shard_owners(cluster.kube, cluster.namespace, BASE)
    holder = {s: r.identity for r in replicas for s in r.held()}
    for key in keys:
        shard = shard_of(key, 3)
        assert owner(key) == f"{shard}-of-3 {holder[shard]}"
    cluster.sampler.assert_clean()
