"""What gitray says when the API server cannot be reached, and how long a request waits.

Real sockets on loopback: a closed port (connection refused) and a listener that accepts and
never answers (an API server that hangs). No API server is imitated: nothing here answers.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitray.core.errors import TransientError
from gitray.k8s.client import Kube
from gitray.k8s.settings import KubeSettings


def _kubeconfig(tmp_path: Path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: not-a-real-token}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
""")
    return str(path)


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return int(server.getsockname()[1])


def test_a_refused_connection_is_named(tmp_path: Path) -> None:
    kube = Kube.connect(KubeSettings(kubeconfig=_kubeconfig(tmp_path, _closed_port())))
    with pytest.raises(TransientError) as err:
        kube.get("v1", "Namespace", "", "default")
    assert "API server unreachable (cannot connect: [Errno 111] Connection refused)" in str(
        err.value)
    assert "not-a-real-token" not in str(err.value)


def test_an_api_server_that_never_answers_times_out_and_says_so(tmp_path: Path,
                                                                 silent: int) -> None:
    kube = Kube.connect(KubeSettings(kubeconfig=_kubeconfig(tmp_path, silent),
                                     request_timeout_s=0.5))
    with pytest.raises(TransientError, match=r"unreachable \(no answer within the request "
                                             r"timeout\)"):
        kube.get("v1", "Namespace", "", "default")


def test_requests_within_bounds_this_threads_requests_then_restores_the_timeout(
        tmp_path: Path, silent: int) -> None:
    kube = Kube.connect(KubeSettings(kubeconfig=_kubeconfig(tmp_path, silent),
                                     request_timeout_s=60))
    assert kube.timeout == 60
    with kube.requests_within(0.3):
        assert kube.timeout == 0.3
        t0 = time.monotonic()
        with pytest.raises(TransientError, match="no answer within the request timeout"):
            kube.get("v1", "Namespace", "", "default")
        assert time.monotonic() - t0 < 30  # bounded by 0.3 s (plus discovery), not 60 s
    assert kube.timeout == 60
