"""The daemon's HTTP endpoint: /healthz, /readyz, /metrics, the status page (/status,
``gitray.daemon.statuspage``), the plans it links to (/status/plan/<sha>) and the Git push
webhook. I/O.

``/hooks/git`` accepts a push only with a valid signature: GitHub's
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``, Gitea/Forgejo's
``X-Gitea-Signature: <hex>`` (same HMAC), or GitLab's ``X-Gitlab-Token: <secret>``. A bad or
missing signature is 401 and changes nothing; a good one triggers an immediate poll.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gitray.daemon.metrics import Metrics
from gitray.daemon.statuspage import PLAN_PREFIX

__all__ = ["HttpEndpoints", "Probes", "verify_signature"]

log = logging.getLogger("gitray.http")
MAX_BODY = 5 * 1024 * 1024
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def verify_signature(secret: bytes, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether the webhook delivery is signed with ``secret`` (constant-time compare)."""
    if not secret:
        return False
    digest = hmac.new(secret, body, hashlib.sha256).hexdigest()
    github = headers.get("x-hub-signature-256", "")
    if github.startswith("sha256="):
        return hmac.compare_digest(github[7:].lower(), digest)
    gitea = headers.get("x-gitea-signature") or headers.get("x-forgejo-signature")
    if gitea:
        return hmac.compare_digest(gitea.lower(), digest)
    gitlab = headers.get("x-gitlab-token")
    if gitlab:
        return hmac.compare_digest(gitlab.encode(), secret)
    return False


@dataclass
class Probes:
    """What the probes report; set by the daemon."""

    healthy: Callable[[], bool]
    ready: Callable[[], bool]
    leader: Callable[[], bool]
    detail: Callable[[], dict[str, object]]


class HttpEndpoints:
    def __init__(self, address: tuple[str, int], probes: Probes, metrics: Metrics,
                 on_push: Callable[[], None], webhook_secret: bytes | None,
                 page: Callable[[], str] | None = None,
                 plan: Callable[[str], str | None] | None = None) -> None:
        self.probes, self.metrics, self.page, self.plan = probes, metrics, page, plan
        self.on_push, self.secret = on_push, webhook_secret or b""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "gitray"

            def log_message(self, format: str, *args: object) -> None:
                log.debug("http %s", format % args)

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Length", str(len(body)))
                try:
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client went away (its
                    log.debug("http %s: the client went away", self.path)  # timeout ran out)

            def _json(self, code: int, data: object) -> None:
                self._send(code, json.dumps(data, sort_keys=True).encode() + b"\n")

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    ok = outer.probes.healthy()
                    self._json(200 if ok else 503, {"ok": ok})
                elif path == "/readyz":
                    ok = outer.probes.ready()
                    self._json(200 if ok else 503, {"ready": ok, "leader": outer.probes.leader(),
                                                    **outer.probes.detail()})
                elif path in {"/", "/status"} and outer.page is not None:
                    self._send(200, outer.page().encode(), "text/html; charset=utf-8")
                elif path.startswith(PLAN_PREFIX) and outer.plan is not None:
                    sha = path.removeprefix(PLAN_PREFIX)
                    text = outer.plan(sha) if _SHA.fullmatch(sha) else None
                    if text is None:
                        self._json(404, {"error": "no plan of that commit is kept here"})
                    else:
                        self._send(200, text.encode(), "text/plain; charset=utf-8")
                elif path == "/metrics":
                    self._send(200, generate_latest(outer.metrics.registry),
                               CONTENT_TYPE_LATEST)
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != "/hooks/git":
                    self._json(404, {"error": "not found"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    outer.metrics.webhooks.labels("too-large").inc()
                    self._json(413, {"error": "payload too large"})
                    return
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                if not verify_signature(outer.secret, body, headers):
                    outer.metrics.webhooks.labels("rejected").inc()
                    log.warning("webhook rejected: missing or invalid signature")
                    self._json(401, {"error": "invalid signature"})
                    return
                outer.metrics.webhooks.labels("accepted").inc()
                outer.on_push()
                self._json(202, {"accepted": True})

        self.server = ThreadingHTTPServer(address, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="gitray-http",
                                       daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
