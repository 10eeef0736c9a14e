"""Leader election with epoch and fencing, against the real kube-apiserver.

Each elector has its own Kube client (its own connection), as separate processes would.
Tests that wait for a takeover shorten the durations to 3 s / 2 s / 0.5 s; the others use
client-go's 15 s / 10 s / 2 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitray.core.errors import LeaseBusyError, LeaseLostError
from gitray.k8s.client import Kube
from gitray.k8s.election import LeaseSettings
from gitray.k8s.lease import Lease
from gitray.k8s.settings import KubeSettings
from testenv.helpers import TestEnv, wait_for
from tests.clock import ManualClock

REPO = Path(__file__).resolve().parents[2]
LEASE_S, RENEW_S, RETRY_S = 3, 2.0, 0.5  # shortened durations, where a test asks for them


class Electors:
    """Makes electors on Leases of one namespace, each with its own client."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.made: dict[int, tuple[Lease, Kube]] = {}

    def __call__(self, identity: str, *, name: str = "gitray",
                 clock: Callable[[], float] = time.monotonic, short: bool = False,
                 request_timeout_s: float = 5) -> Lease:
        kube = Kube.connect(KubeSettings(kubeconfig=self.kubeconfig,
                                         request_timeout_s=request_timeout_s))
        if short:
            settings = LeaseSettings(namespace=self.namespace, name=name, identity=identity,
                                     lease_duration_s=LEASE_S, renew_deadline_s=RENEW_S,
                                     retry_period_s=RETRY_S)
        else:
            settings = LeaseSettings(namespace=self.namespace, name=name, identity=identity)
        lease = Lease(kube, settings, clock=clock)
        self.made[id(lease)] = (lease, kube)
        return lease

    def kube(self, lease: Lease) -> Kube:
        return self.made[id(lease)][1]

    def close(self) -> None:
        for lease, kube in self.made.values():
            lease.stop_renewing()
            kube.close()


@pytest.fixture
def electors(testenv: TestEnv, namespace: str) -> Iterator[Electors]:
    made = Electors(str(testenv.kubeconfig), namespace)
    yield made
    made.close()


def live_spec(testenv: TestEnv, namespace: str, name: str = "gitray") -> dict[str, object]:
    kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig)))
    try:
        return dict(kube.get("coordination.k8s.io/v1", "Lease", namespace, name)["spec"])
    finally:
        kube.close()


def test_only_one_of_two_electors_leads(electors: Electors, testenv: TestEnv,
                                        namespace: str) -> None:
    a, b = electors("a"), electors("b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert (a.is_leader, b.is_leader) == (True, False)
    assert b.holder == "a"
    assert a.epoch == 0
    a.ensure_held()
    with pytest.raises(LeaseLostError, match="not held by this process"):
        b.ensure_held()
    with pytest.raises(LeaseLostError, match="cannot renew"):
        b.start_renewing()
    spec = live_spec(testenv, namespace)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseTransitions"] == 0
    assert spec["leaseDurationSeconds"] == 15
    # renewing keeps the epoch
    assert a.try_acquire_or_renew()
    assert a.epoch == 0
    assert live_spec(testenv, namespace)["leaseTransitions"] == 0


def test_racing_electors_never_both_win(electors: Electors) -> None:
    for round_ in range(5):
        name = f"race-{round_}"
        pair = [electors(f"x{round_}", name=name), electors(f"y{round_}", name=name)]
        start = threading.Barrier(2)
        wins: list[bool] = [False, False]

        def attempt(i: int, pair: list[Lease] = pair, wins: list[bool] = wins,
                    start: threading.Barrier = start) -> None:
            start.wait()
            wins[i] = pair[i].try_acquire_or_renew()

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(wins) == 1, f"round {round_}: wins {wins}"
        assert sum(e.is_leader for e in pair) == 1


def test_takeover_after_the_lease_duration_increments_the_epoch(
        electors: Electors, testenv: TestEnv, namespace: str) -> None:
    a_clock = ManualClock()  # a stays "awake" locally: only the remote check can fence it
    a = electors("a", clock=a_clock, short=True)
    b = electors("b", short=True)
    assert a.acquire(timeout_s=5) == 0
    a.start_renewing()
    time.sleep(1)
    a.stop_renewing()  # a stops renewing (but does not release)
    waits: list[tuple[str, float]] = []
    started = time.monotonic()
    assert b.acquire(timeout_s=15, on_wait=lambda holder, s: waits.append((holder, s))) == 1
    took = time.monotonic() - started
    assert took >= LEASE_S
    assert took < LEASE_S + 5
    assert waits
    assert waits[0][0] == "a"
    assert b.is_leader
    spec = live_spec(testenv, namespace)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    # a still believes it leads (its clock says it renewed just now) ...
    assert a.is_leader
    requests = electors.kube(a).requests
    # ... but the remote check fences it
    with pytest.raises(LeaseLostError, match=r"now held by b \(epoch 1\)") as info:
        a.ensure_held()
    assert "\n" not in str(info.value)
    assert electors.kube(a).requests > requests
    assert not a.is_leader
    assert not a.try_acquire_or_renew()  # b's claim is fresh
    assert live_spec(testenv, namespace)["holderIdentity"] == "b"


def test_a_standby_knows_when_the_holder_it_saw_lapses(electors: Electors) -> None:
    a = electors("a", short=True)
    b_clock = ManualClock()
    b = electors("b", clock=b_clock, short=True)
    assert b.lapses_in() is None  # nothing read yet
    assert a.acquire(timeout_s=5) == 0  # a holds and never renews
    assert not b.try_acquire_or_renew()
    assert b.lapses_in() == LEASE_S  # counted from when b saw the record, by b's clock
    b_clock.advance(1.0)
    assert not b.try_acquire_or_renew()  # the same record again: no extension
    assert b.lapses_in() == LEASE_S - 1.0
    b_clock.advance(LEASE_S)
    assert b.lapses_in() == 0.0
    assert b.try_acquire_or_renew()
    assert b.lapses_in() is None  # b holds it now


def test_a_paused_leader_refuses_before_any_request(electors: Electors,
                                                    testenv: TestEnv, namespace: str) -> None:
    clock = ManualClock()
    a = electors("a", clock=clock)
    assert a.acquire(timeout_s=5) == 0
    a.ensure_held()
    clock.advance(9.9)
    a.ensure_held()  # within the 10 s renew deadline
    clock.advance(0.2)  # "woke up" 10.1 s after the last renew
    requests = electors.kube(a).requests
    with pytest.raises(LeaseLostError, match=r"renew deadline .*paused") as info:
        a.ensure_held()
    assert "\n" not in str(info.value)
    assert electors.kube(a).requests == requests  # refused locally, no network call
    assert not a.is_leader
    # the Lease itself still names a: the refusal was a local decision
    assert live_spec(testenv, namespace)["holderIdentity"] == "a"
    # taking it back is a new term, so work begun in the old one stays fenced
    assert a.try_acquire_or_renew()
    assert a.epoch == 1
    assert live_spec(testenv, namespace)["leaseTransitions"] == 1


def test_release_hands_over_at_once(electors: Electors, testenv: TestEnv,
                                    namespace: str) -> None:
    a, b = electors("a"), electors("b")  # client-go durations: 15 s lease
    assert a.acquire(timeout_s=5) == 0
    a.start_renewing()
    with pytest.raises(LeaseBusyError, match="held by a; gave up after 0 s") as info:
        b.acquire(timeout_s=0)
    assert "\n" not in str(info.value)
    assert a.release()
    assert not a.is_leader
    spec = live_spec(testenv, namespace)
    assert "holderIdentity" not in spec
    assert spec["leaseDurationSeconds"] == 1
    started = time.monotonic()
    assert b.acquire(timeout_s=0) == 1
    assert time.monotonic() - started < 2
    with pytest.raises(LeaseLostError):
        a.ensure_held()
    assert not a.release()  # nothing left to release
    assert b.holder == "b"
    assert a.holder == ""  # a saw its own release


def test_renewing_holds_the_lease_past_its_duration(electors: Electors,
                                                    testenv: TestEnv, namespace: str) -> None:
    a, b = electors("a", short=True), electors("b", short=True)
    lost: list[str] = []
    assert a.acquire(timeout_s=5) == 0
    a.start_renewing(on_lost=lost.append)
    with pytest.raises(LeaseBusyError, match="held by a"):
        b.acquire(timeout_s=LEASE_S * 2)
    assert a.is_leader
    assert not lost
    a.ensure_held()
    spec = live_spec(testenv, namespace)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("a", 0)


def test_a_leader_whose_renewals_hang_steps_down_within_the_renew_deadline(
        electors: Electors, testenv: TestEnv, namespace: str) -> None:
    a, b = electors("a", short=True), electors("b", short=True)
    lost: list[tuple[float, str]] = []
    assert a.acquire(timeout_s=5) == 0
    a.start_renewing(on_lost=lambda reason: lost.append((time.monotonic(), reason)))
    time.sleep(1)
    assert a.is_leader
    # partition a from the API server: its requests now go to a socket that accepts
    # connections and never answers, so a renew hangs for the whole 5 s request timeout
    with socket.create_server(("127.0.0.1", 0)) as blackhole:
        cut = time.monotonic()
        electors.kube(a).api_client.configuration.host = \
            f"https://127.0.0.1:{blackhole.getsockname()[1]}"
        wait_for(lambda: lost, timeout=10, interval=0.05, what="a to step down")
    when, reason = lost[0]
    assert when - cut <= RENEW_S + 0.5
    assert "renew deadline" in reason and "request has waited" in reason, reason
    assert len(lost) == 1
    assert not a.is_leader
    with pytest.raises(LeaseLostError, match="not held by this process"):
        a.ensure_held()
    # b takes over once a's last renewal is a lease duration old
    assert b.acquire(timeout_s=10) == 1


class SlowLink:
    """A TCP forwarder on loopback to the real API server that holds each request a client
    sends for `delay` seconds while `slow` is set: an API server that answers, late (TLS passes
    through untouched)."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream, self.delay = upstream, delay
        self.slow = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def between(cls, kube: Kube, delay: float) -> SlowLink:
        """A link from ``kube`` (from now on) to the API server it was talking to."""
        host, port = kube.api_client.configuration.host.removeprefix("https://").rsplit(":", 1)
        link = cls((host, int(port)), delay)
        kube.api_client.configuration.host = f"https://127.0.0.1:{link.port}"
        return link

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False),
                             daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, held: bool) -> None:
        last = 0.0
        try:
            while chunk := src.recv(65536):
                # a request's first chunk is held (the rest of it, and a TLS handshake's
                # later flights, follow within milliseconds and are not held again)
                if held and self.slow.is_set() and time.monotonic() - last > 0.2:
                    time.sleep(self.delay)
                dst.sendall(chunk)
                last = time.monotonic()
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self.server.close()


def test_a_slow_api_server_is_given_the_renew_deadline_not_the_request_timeout(
        electors: Electors, testenv: TestEnv, namespace: str) -> None:
    """Each request of a renew may take what is left of the renew deadline (client-go's renew
    runs under a context of that deadline): with every request answered 1.5 s late, past this
    client's 1 s request timeout, the leader keeps the Lease through a 12 s slow spell (beyond
    the 10 s renew deadline), and steps down when the API server stops answering at all."""
    a = electors("a", request_timeout_s=1)
    kube = electors.kube(a)
    link = SlowLink.between(kube, delay=1.5)
    lost: list[str] = []
    try:
        assert a.acquire(timeout_s=5) == 0
        a.start_renewing(on_lost=lost.append)
        link.slow.set()
        time.sleep(0.5)  # the connection acquire used is quiet again: its next request is held
        with pytest.raises(Exception, match="no answer within the request timeout"):
            kube.get("v1", "Namespace", "", namespace)  # other requests keep the 1 s timeout
        time.sleep(12)
        link.slow.clear()
        assert not lost, lost
        assert a.is_leader
        a.ensure_held()
        spec = live_spec(testenv, namespace)
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("a", 0)
        # no answer at all: the renew deadline still ends it, naming why
        link.delay, cut = 30.0, time.monotonic()
        link.slow.set()
        wait_for(lambda: lost, timeout=15, interval=0.05, what="a to step down")
        assert time.monotonic() - cut <= 10 + 0.5
        assert "renew deadline" in lost[0] and "no answer within" in lost[0], lost
    finally:
        a.stop_renewing()
        link.close()


class CountingKube:
    """The elector's real client, its Lease reads and writes counted (a spy: every request
    reaches the API server)."""

    def __init__(self, kube: Kube) -> None:
        self.kube, self.gets, self.replaces = kube, 0, 0

    def get_or_none(self, *args: Any) -> Any:
        self.gets += 1
        return self.kube.get_or_none(*args)

    def replace(self, body: Any) -> Any:
        self.replaces += 1
        return self.kube.replace(body)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


def test_the_holder_renews_by_one_write_and_reads_only_when_someone_else_wrote(
        electors: Electors, testenv: TestEnv, namespace: str) -> None:
    """client-go's fast path: a renew replaces the Lease as this holder last wrote it, no read
    first; when another writer changed the Lease (here an annotation: the holder is the same),
    that write fails its compare-and-swap, and the renew reads the Lease and writes again."""
    a = electors("a", short=True)
    spy = CountingKube(electors.kube(a))
    a._kube = spy  # type: ignore[assignment]
    assert a.acquire(timeout_s=5) == 0
    a.start_renewing()
    renewed = live_spec(testenv, namespace)["renewTime"]
    wait_for(lambda: spy.replaces >= 5, timeout=10, interval=0.05, what="five renews")
    assert live_spec(testenv, namespace)["renewTime"] != renewed
    assert spy.gets == 1, spy.gets  # the acquire's read; none by the renews
    kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig)))
    try:
        kube.patch("coordination.k8s.io/v1", "Lease", namespace, "gitray",
                   {"metadata": {"annotations": {"example.com/note": "seen"}}})
    finally:
        kube.close()
    wait_for(lambda: spy.gets == 2, timeout=5, interval=0.05, what="a renew that reads")
    writes = spy.replaces
    wait_for(lambda: spy.replaces >= writes + 3, timeout=5, interval=0.05, what="more renews")
    assert spy.gets == 2, spy.gets  # one read after the failed write, then writes alone
    assert a.is_leader
    a.ensure_held()


def test_renews_that_the_api_server_answers_late_follow_each_other_at_once(
        electors: Electors, testenv: TestEnv, namespace: str) -> None:
    """An API server that answers every request 4.5 s late (the request timeout is 5 s) with
    client-go's 15 s / 10 s / 2 s: a renew is one request, and the next one starts when it
    ends (it is due 2 s after the last one began), so a renew succeeds every ~4.5 s and the
    leader keeps the Lease through a 25 s slow spell. A renew that read first (9 s) and then
    paused 2 s would see the 10 s renew deadline pass."""
    a = electors("a")
    link = SlowLink.between(electors.kube(a), delay=4.5)
    lost: list[str] = []
    try:
        assert a.acquire(timeout_s=5) == 0
        a.start_renewing(on_lost=lost.append)
        link.slow.set()
        times: list[object] = []
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and not lost:
            spec = live_spec(testenv, namespace)
            if not times or spec["renewTime"] != times[-1]:
                times.append(spec["renewTime"])
            time.sleep(0.2)
        link.slow.clear()
        assert not lost, lost
        assert a.is_leader
        assert len(times) >= 4, times  # renewTimes seen during the slow spell
    finally:
        a.stop_renewing()
        link.close()


def test_a_leader_whose_lease_was_taken_steps_down_on_its_next_renewal(
        electors: Electors, testenv: TestEnv, namespace: str) -> None:
    a = electors("a", short=True)
    lost: list[str] = []
    released: list[bool] = []

    def on_lost(reason: str) -> None:  # what a daemon does: note it, then let go
        lost.append(reason)
        released.append(a.release())

    assert a.acquire(timeout_s=5) == 0
    a.start_renewing(on_lost=on_lost)
    # someone (an operator with kubectl) hands the Lease to another holder
    kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig)))
    try:
        kube.patch("coordination.k8s.io/v1", "Lease", namespace, "gitray",
                   {"spec": {"holderIdentity": "intruder", "leaseTransitions": 7}})
    finally:
        kube.close()
    wait_for(lambda: released, timeout=5, interval=0.05, what="a to step down and release")
    assert "held by intruder (epoch 7)" in lost[0]
    assert released == [False]  # not a's to release any more (and no deadlock)
    assert not a.is_leader
    assert live_spec(testenv, namespace)["holderIdentity"] == "intruder"


def test_the_same_holder_in_another_epoch_is_fenced(electors: Electors, testenv: TestEnv,
                                                    namespace: str) -> None:
    a = electors("a")
    assert a.acquire(timeout_s=5) == 0
    kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig)))
    try:
        kube.patch("coordination.k8s.io/v1", "Lease", namespace, "gitray",
                   {"spec": {"leaseTransitions": 7}})
    finally:
        kube.close()
    with pytest.raises(LeaseLostError, match="moved on to epoch 7"):
        a.ensure_held()
    assert not a.is_leader


PAUSED_CHILD = """
import sys
from gitray.core.errors import LeaseLostError
from gitray.k8s.client import Kube, KubeSettings
from gitray.k8s.lease import Lease, LeaseSettings

kube = Kube.connect(KubeSettings(kubeconfig=sys.argv[1], request_timeout_s=5))
lease = Lease(kube, LeaseSettings(namespace=sys.argv[2], identity="paused",
                                  lease_duration_s=3, renew_deadline_s=2.0, retry_period_s=0.5))
lease.acquire(timeout_s=5)
lease.start_renewing()
print("held", lease.epoch, flush=True)
sys.stdin.readline()  # SIGSTOPped here, then continued
before = kube.requests
try:
    lease.ensure_held()
    print("acted", flush=True)
except LeaseLostError as e:
    print("refused", kube.requests - before, e, flush=True)
"""


def test_a_process_woken_from_sigstop_refuses_to_act(electors: Electors, testenv: TestEnv,
                                                     namespace: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSED_CHILD, str(testenv.kubeconfig), namespace],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().split() == ["held", "0"]
        os.kill(child.pid, signal.SIGSTOP)
        b = electors("b", short=True)
        assert b.acquire(timeout_s=10) == 1  # the paused holder's lease lapses
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("go\n")
        child.stdin.flush()
        words = child.stdout.readline().split(maxsplit=2)
        assert words[:2] == ["refused", "0"], words  # refused before any request
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
    spec = live_spec(testenv, namespace)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
