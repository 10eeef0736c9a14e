"""The ``daemon`` fixture: a ``gitray sync`` Daemon with its HTTP server and scheduler started
and nothing else. No API server is needed: its Kubernetes client connects lazily (its
kubeconfig names a closed loopback port) and nothing holds a Lease."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitray.daemon.daemon import Daemon
from gitray.daemon.settings import DaemonSettings
from gitray.engine.wiring import ExecSettings
from gitray.k8s.settings import KubeSettings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """``make_daemon(shards=1)``: a Daemon, stopped at the end of the test if still running."""
    made: list[Daemon] = []

    def make(shards: int = 1) -> Daemon:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{_closed_port()}"}}}}]
users: [{{name: u, user: {{}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
""")
        settings = DaemonSettings(
            repo=str(tmp_path / "repo"), http_host="127.0.0.1", http_port=0,
            execution=ExecSettings(lease_namespace="gitray", identity="replica-a"),
            kube=KubeSettings(kubeconfig=str(kubeconfig)), cache_dir=tmp_path / "cache",
            shards=shards)
        d = Daemon(settings)
        d.http.start()
        d.scheduler.start()
        made.append(d)
        return d
    yield make
    for d in made:
        if d.scheduler.running:
            d.stop()


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon()
