"""A bounded HTTP load generator for the test environment (stdlib only).

Fixed rate, fixed count, a per-request timeout and a hard cap on both: it stops by itself. It
only sends to the environment's own addresses — loopback, the real node's pods
(198.18.0.0/16) and its Services (198.19.0.0/16) — and refuses any other URL before sending
anything. Each request uses a new connection (as a fresh client would), so a Service switch is
seen by new connections through kube-proxy's current rules.

    with LoadGenerator("http://198.19.0.12:8000/greet?name=Ada", rate=20, count=600) as load:
        ...                                  # the upgrade under test
    print(load.result().summary())           # sent, 2xx, failed (by kind), p50/p99 ms
"""

from __future__ import annotations

import http.client
import ipaddress
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

ALLOWED = [ipaddress.ip_network(n) for n in ("127.0.0.0/8", "198.18.0.0/16", "198.19.0.0/16")]
MAX_COUNT = 20_000
MAX_RATE = 200.0
MAX_TIMEOUT = 10.0


def check_target(url: str) -> tuple[str, int, str]:
    """(host, port, path) of an http:// URL on an allowed address; ValueError otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http://<ip>:<port>/... URLs: {url!r}")
    try:
        addr = ipaddress.ip_address(parts.hostname)
    except ValueError:
        raise ValueError(f"an IP address is required (no name lookups): {url!r}") from None
    if not any(addr in net for net in ALLOWED):
        raise ValueError(f"{addr} is not one of the environment's addresses "
                         f"({', '.join(map(str, ALLOWED))})")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.hostname, parts.port or 80, path


@dataclass
class LoadResult:
    sent: int = 0
    ok: int = 0  # answered 2xx
    failures: Counter[str] = field(default_factory=Counter)  # kind -> count
    latencies_ms: list[float] = field(default_factory=list)  # of the 2xx answers
    bodies: Counter[str] = field(default_factory=Counter)  # distinct 2xx bodies (first 80 chars)
    seconds: float = 0.0
    # (wall-clock time the request was sent, its 2xx body or "!<failure kind>"), in send order
    timeline: list[tuple[float, str]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100.0 * len(ordered)))]

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        return (f"sent {self.sent}, 2xx {self.ok}, failed {self.failed} ({kinds}), "
                f"p50 {self.percentile(50):.1f} ms, p99 {self.percentile(99):.1f} ms, "
                f"in {self.seconds:.1f} s")


class LoadGenerator:
    """Sends `count` GETs to `url` at `rate` per second from a small thread pool."""

    def __init__(self, url: str, rate: float, count: int, timeout: float = 2.0,
                 workers: int = 16) -> None:
        self.host, self.port, self.path = check_target(url)
        if not 0 < rate <= MAX_RATE:
            raise ValueError(f"rate must be in (0, {MAX_RATE}]")
        if not 0 < count <= MAX_COUNT:
            raise ValueError(f"count must be in (0, {MAX_COUNT}]")
        self.rate, self.count = rate, count
        self.timeout = min(timeout, MAX_TIMEOUT)
        self.workers = max(1, min(workers, 64))
        self._result = LoadResult()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="load-generator")

    # -- one request ------------------------------------------------------------------------
    def _one(self) -> None:
        sent_at = time.time()
        t0 = time.monotonic()
        kind, body = "", ""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", self.path, headers={"Connection": "close"})
            resp = conn.getresponse()
            data = resp.read(4096)
            if 200 <= resp.status < 300:
                body = data.decode(errors="replace")[:80]
            else:
                kind = f"http {resp.status}"
        except ConnectionRefusedError:
            kind = "refused"
        except ConnectionResetError:
            kind = "reset"
        except TimeoutError:
            kind = "timeout"
        except (OSError, http.client.HTTPException) as exc:
            kind = type(exc).__name__
        finally:
            conn.close()
        elapsed = (time.monotonic() - t0) * 1000.0
        with self._lock:
            self._result.timeline.append((sent_at, f"!{kind}" if kind else body))
            if kind:
                self._result.failures[kind] += 1
            else:
                self._result.ok += 1
                self._result.latencies_ms.append(elapsed)
                self._result.bodies[body] += 1

    def _run(self) -> None:
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="load") as pool:
            for i in range(self.count):
                if self._stop.is_set():
                    break
                delay = start + i / self.rate - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
                with self._lock:
                    self._result.sent += 1
                pool.submit(self._one)
        self._result.seconds = time.monotonic() - start

    # -- use ------------------------------------------------------------------------------
    def start(self) -> LoadGenerator:
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> LoadResult:
        """Wait until every request was sent and answered (bounded by count/rate + timeout)."""
        limit = timeout if timeout is not None else self.count / self.rate + self.timeout + 30
        self._thread.join(limit)
        return self.result()

    def stop(self) -> LoadResult:
        """Stop sending now; wait for requests in flight."""
        self._stop.set()
        self._thread.join(self.timeout + 30)
        return self.result()

    def result(self) -> LoadResult:
        with self._lock:
            r = self._result
            return LoadResult(r.sent, r.ok, Counter(r.failures), list(r.latencies_ms),
                              Counter(r.bodies), r.seconds, sorted(r.timeline))

    def __enter__(self) -> LoadGenerator:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.wait()
