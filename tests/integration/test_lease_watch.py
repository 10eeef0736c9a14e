"""The Lease watch and watch shutdown, against the real kube-apiserver (issue 15, item 4).

- ``LeaseWatch`` reports the record it first reads, each renewal, a release (holder empty)
  and a deletion (None), in that order, and after the Lease is created again it goes on
  reporting (it reads again after the watch ends);
- ``Kube.close_watches`` ends a watch blocked waiting for events (``Interrupted``) and refuses
  new ones, while other requests of that client still work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gitray.core.errors import Interrupted
from gitray.k8s.client import Kube
from gitray.k8s.election import LEASE_API_VERSION, LeaseRecord, LeaseSettings
from gitray.k8s.lease import Lease
from gitray.k8s.leasewatch import LeaseWatch
from gitray.k8s.settings import KubeSettings
from testenv.helpers import TestEnv, wait_for


@pytest.fixture
def kubes(testenv: TestEnv) -> Iterator[list[Kube]]:
    made: list[Kube] = []
    yield made
    for kube in made:
        kube.close()


def connect(testenv: TestEnv, kubes: list[Kube]) -> Kube:
    kube = Kube.connect(KubeSettings(kubeconfig=str(testenv.kubeconfig), request_timeout_s=5))
    kubes.append(kube)
    return kube


def test_the_lease_watch_reports_renewals_a_release_and_a_deletion(
        testenv: TestEnv, namespace: str, kubes: list[Kube]) -> None:
    # (a renew deadline of 2 s passed in a clean-clone run with the machine 95 % busy: the
    # test's process got no CPU for it; nothing here waits for a Lease to lapse)
    settings = LeaseSettings(namespace=namespace, identity="a", lease_duration_s=15,
                             renew_deadline_s=10.0, retry_period_s=0.5)
    lease = Lease(connect(testenv, kubes), settings)
    assert lease.try_acquire_or_renew()
    seen: list[LeaseRecord | None] = []
    lock = threading.Lock()

    def note(record: LeaseRecord | None) -> None:
        with lock:
            seen.append(record)

    def holders() -> list[str | None]:
        with lock:
            return [r.holder if r is not None else None for r in seen]

    watch = LeaseWatch(connect(testenv, kubes), settings, note)
    watch.start()
    try:
        wait_for(lambda: holders() or None, timeout=30, what="the first record")
        assert holders()[0] == "a"
        lease.start_renewing()
        wait_for(lambda: len(holders()) >= 3 or None, timeout=30, what="two renewals seen")
        assert lease.release()
        wait_for(lambda: "" in holders() or None, timeout=30, what="the release seen")
        admin = connect(testenv, kubes)
        admin.delete(LEASE_API_VERSION, "Lease", namespace, "gitray")
        wait_for(lambda: None in holders() or None, timeout=30, what="the deletion seen")
        got = holders()
        assert set(got[:got.index("")]) == {"a"}, got
        assert got.index("") < got.index(None), got
        # created again by another elector: the watch reports it too
        b = Lease(connect(testenv, kubes),
                  LeaseSettings(namespace=namespace, identity="b", lease_duration_s=15,
                                renew_deadline_s=10.0, retry_period_s=0.5))
        assert b.try_acquire_or_renew()
        wait_for(lambda: "b" in holders() or None, timeout=60, what="the new Lease seen")
    finally:
        watch.stop()
        lease.stop_renewing()


def test_close_watches_ends_a_blocked_watch_and_refuses_new_ones(
        testenv: TestEnv, namespace: str, kubes: list[Kube]) -> None:
    kube = connect(testenv, kubes)
    outcome: list[BaseException | str] = []
    started = threading.Event()

    def watch_quiet_namespace() -> None:
        try:
            started.set()
            for _ in kube.watch("v1", "ConfigMap", namespace,
                                field_selector="metadata.name=nothing-here", timeout_s=300):
                pass
            outcome.append("ended without an error")
        except BaseException as e:  # the test reports whatever it got
            outcome.append(e)

    thread = threading.Thread(target=watch_quiet_namespace, daemon=True)
    thread.start()
    started.wait(10)
    # the watch is open (a request counted) and blocked: nothing happens in this namespace
    wait_for(lambda: kube.requests >= 2 or None, timeout=30, what="the watch request sent")
    assert thread.is_alive()
    kube.close_watches()
    thread.join(60)
    assert not thread.is_alive(), "close_watches() did not end the watch"
    assert len(outcome) == 1 and isinstance(outcome[0], Interrupted), outcome
    with pytest.raises(Interrupted):
        next(iter(kube.watch("v1", "ConfigMap", namespace)))
    # other requests still work
    assert kube.list("v1", "ConfigMap", namespace=namespace)[0] is not None
