"""Statuses a shard keeper's round asks for are posted on a thread of their own
(``StatusBridge.post_later``): the round renews the shard Leases and must not wait for the
Git host. Found in test_shard_sync: the holder of shard 0 posted the commit's overall pending
from its round, behind other replicas' pushes to the same notes ref, its Lease lapsed and
another replica took the shard while it still had a run of it started.

Against the strict Git host double (testenv/githost), a hung POST."""

from __future__ import annotations

import time
from pathlib import Path

from gitray.core.config import StatusProvider, StatusSettings
from gitray.daemon.metrics import Metrics
from gitray.daemon.reporting import StatusBridge
from gitray.daemon.settings import DaemonSettings, ExecSettings
from gitray.hosts.publisher import make_publisher
from testenv.githost import GitHost
from testenv.helpers import wait_for

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_post_later_returns_at_once_and_posts_in_order_when_the_host_answers(
        tmp_path: Path) -> None:
    with GitHost(token="t0k") as host:
        host.add_commit(SHA)
        bridge = StatusBridge(DaemonSettings(repo=str(tmp_path / "repo"),
                                             execution=ExecSettings(lease_namespace="gitray")),
                              Metrics())
        bridge.publisher = make_publisher(
            StatusSettings(StatusProvider.GITHUB, url=host.url, repository="o/r"),
            token="t0k", repo_dir=None)
        host.hang("POST", "/statuses/", times=1, seconds=3.0)
        started = time.monotonic()
        bridge.post_later(SHA, None, "pending", "applying 0123456 across 6 shards")
        bridge.post_later(SHA, None, "success", "in sync at 0123456 (all 6 shards)")
        returned = time.monotonic() - started
        assert returned < 0.5, returned  # (the host holds the first POST 3 s)
        wait_for(lambda: len(host.statuses("github", SHA, "gitray")) == 2, timeout=20,
                 interval=0.1, what="both statuses on the host")
        assert [s["state"] for s in host.statuses("github", SHA, "gitray")] == [
            "pending", "success"]
