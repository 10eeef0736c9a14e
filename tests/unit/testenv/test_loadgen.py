"""The bounded load generator of the test environment (testenv/load.py), on loopback."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from testenv import procs
from testenv.load import MAX_COUNT, LoadGenerator, check_target


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 500 if self.path.startswith("/err") else 200
        body = b"hello" if status == 200 else b"boom"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_counts_every_answer(server: str) -> None:
    result = LoadGenerator(f"{server}/ok?x=1", rate=100, count=40).start().wait()
    assert (result.sent, result.ok, result.failed) == (40, 40, 0)
    assert result.bodies == {"hello": 40}
    assert len(result.latencies_ms) == 40
    assert "sent 40, 2xx 40, failed 0 (none)" in result.summary()


def test_non_2xx_and_refused_are_failures(server: str) -> None:
    errors = LoadGenerator(f"{server}/err", rate=100, count=10).start().wait()
    assert (errors.sent, errors.ok, errors.failures) == (10, 0, {"http 500": 10})
    closed = procs.free_port()  # nothing listens there
    refused = LoadGenerator(f"http://127.0.0.1:{closed}/", rate=100, count=5).start().wait()
    assert (refused.sent, refused.ok, refused.failures) == (5, 0, {"refused": 5})


def test_stop_ends_it_early(server: str) -> None:
    load = LoadGenerator(f"{server}/ok", rate=5, count=1000).start()
    result = load.stop()
    assert result.sent < 1000
    assert result.ok + result.failed == result.sent


@pytest.mark.parametrize("url", [
    "http://10.0.0.1:8000/", "http://192.168.1.1/", "http://8.8.8.8/", "http://example.com/",
    "https://127.0.0.1/", "http://198.20.0.1/", "http://[::1]:80/",
])
def test_refuses_any_address_outside_the_environment(url: str) -> None:
    with pytest.raises(ValueError):
        LoadGenerator(url, rate=1, count=1)


def test_bounds() -> None:
    assert check_target("http://198.19.0.12:8000/greet?name=Ada") == (
        "198.19.0.12", 8000, "/greet?name=Ada")
    with pytest.raises(ValueError):
        LoadGenerator("http://127.0.0.1:1/", rate=1, count=MAX_COUNT + 1)
    with pytest.raises(ValueError):
        LoadGenerator("http://127.0.0.1:1/", rate=10_000, count=1)
