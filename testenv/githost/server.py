"""A strict test double of a Git host's REST API, on 127.0.0.1. Does I/O (a socket, threads).

Implements, as documented by each host:

- GitHub (no prefix): ``POST /repos/{o}/{r}/statuses/{sha}`` (422 when the description is over
  140 characters, the context over 255, the state unknown or the commit unknown),
  ``GET /repos/{o}/{r}/commits/{ref}/statuses`` (newest first, ``per_page``/``page``, Link),
  issue comments: ``GET|POST /repos/{o}/{r}/issues/{n}/comments``,
  ``PATCH /repos/{o}/{r}/issues/comments/{id}``. Token: ``Authorization: Bearer|token``.
- Gitea (``/api/v1``): the same shapes (``limit``/``page``; statuses listed oldest first;
  issue comments not paginated, as in Gitea; ``warning`` state). Token: ``Authorization: token``.
- GitLab (``/api/v4``): ``POST /projects/:id/statuses/:sha`` (400 "Cannot transition status"
  when an active status would move to the state it has or back from running to pending; 400 on a
  description over 255), ``GET /projects/:id/repository/commits/:sha/statuses`` (latest per name
  unless ``all``; ``name`` filter; ``X-Next-Page``), MR notes ``GET|POST
  /projects/:id/merge_requests/:iid/notes``, ``PUT .../notes/:note_id``. Token: ``PRIVATE-TOKEN``.

Everything is logged in ``requests`` (method, path, status, JSON body, headers). ``fail`` and
``hang`` inject faults on matching requests.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

GITHUB_DESCRIPTION_MAX = 140
GITHUB_CONTEXT_MAX = 255
GITLAB_DESCRIPTION_MAX = 255
_ACTIVE = ("pending", "running")
# GitLab's state machine: from an active status, these targets are refused.
_GITLAB_EVENT = {"pending": "enqueue", "running": "run", "success": "succeed",
                 "failed": "drop", "canceled": "cancel", "skipped": "skip"}
_GITLAB_ALLOWED = {("pending", "running"), ("pending", "success"), ("pending", "failed"),
                   ("pending", "canceled"), ("pending", "skipped"), ("running", "success"),
                   ("running", "failed"), ("running", "canceled")}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    status: int
    body: Any
    headers: dict[str, str]

    def __str__(self) -> str:
        shown = json.dumps(self.body, sort_keys=True) if self.body is not None else ""
        q = f"?{self.query}" if self.query else ""
        return f"{self.method} {self.path}{q} -> {self.status} {shown}".rstrip()


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    times: int
    status: int = 500
    hang_s: float = 0.0


@dataclass
class _Store:
    commits: set[str] = field(default_factory=set)
    issues: set[int] = field(default_factory=set)
    statuses: list[dict[str, Any]] = field(default_factory=list)  # every flavour; "flavor" key
    comments: list[dict[str, Any]] = field(default_factory=list)
    next_id: int = 1


class _Reply(Exception):
    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or {}


class GitHost:
    """``with GitHost(token="...") as host:`` — ``host.url`` is the base of every flavour."""

    def __init__(self, token: str, *, login: str = "gitray") -> None:
        self.token = token
        self.login = login
        self.store = _Store()
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> GitHost:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- test controls -----------------------------------------------------------------------

    def add_commit(self, sha: str) -> str:
        self.store.commits.add(sha)
        return sha

    def add_issue(self, number: int) -> int:
        self.store.issues.add(number)
        return number

    def fail(self, method: str, pattern: str, *, times: int, status: int = 500) -> None:
        self.faults.append(Fault(method, re.compile(pattern), times, status=status))

    def hang(self, method: str, pattern: str, *, times: int, seconds: float) -> None:
        self.faults.append(Fault(method, re.compile(pattern), times, hang_s=seconds))

    def log(self, method: str | None = None, contains: str = "") -> list[Request]:
        with self._lock:
            return [r for r in self.requests
                    if (method is None or r.method == method) and contains in r.path]

    def statuses(self, flavor: str, sha: str, context: str) -> list[dict[str, Any]]:
        key = "name" if flavor == "gitlab" else "context"
        return [s for s in self.store.statuses
                if s["flavor"] == flavor and s["sha"] == sha and s[key] == context]

    def comments(self, flavor: str, number: int) -> list[dict[str, Any]]:
        return [c for c in self.store.comments if c["flavor"] == flavor and c["issue"] == number]

    # -- HTTP --------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = {"_unparsable": raw.decode(errors="replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload, extra = host._dispatch(self.command, split.path, split.query,
                                                        body, headers)
                with host._lock:
                    host.requests.append(Request(self.command, unquote(split.path),
                                                 split.query, status, body, headers))
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (a hang longer than its timeout)

            do_GET = do_POST = do_PATCH = do_PUT = _serve

        return Handler

    def _dispatch(self, method: str, path: str, query: str, body: Any,
                  headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and fault.pattern.search(path):
                fault.times -= 1
                if fault.hang_s:
                    time.sleep(fault.hang_s)
                    break  # then answer normally (the client has usually gone)
                return fault.status, {"message": "Internal Server Error"}, {}
        segments = [unquote(s) for s in path.strip("/").split("/")]
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        try:
            with self._lock:
                if segments[:2] == ["api", "v4"]:
                    self._auth(headers.get("private-token"), "gitlab")
                    self._gitlab(method, segments[2:], params, body or {})
                elif segments[:2] == ["api", "v1"]:
                    self._auth(_bearer(headers.get("authorization")), "gitea")
                    self._github_like("gitea", method, segments[2:], params, body or {})
                else:
                    self._auth(_bearer(headers.get("authorization")), "github")
                    self._github_like("github", method, segments, params, body or {})
        except _Reply as reply:
            return reply.status, reply.body, reply.headers
        return 404, {"message": "Not Found"}, {}

    def _auth(self, given: str | None, flavor: str) -> None:
        if given != self.token:
            message = {"github": "Bad credentials", "gitea": "token is required",
                       "gitlab": "401 Unauthorized"}[flavor]
            raise _Reply(401, {"message": message})

    def _new_id(self) -> int:
        self.store.next_id += 1
        return self.store.next_id

    # -- GitHub and Gitea --------------------------------------------------------------------

    def _github_like(self, flavor: str, method: str, seg: list[str], params: dict[str, str],
                     body: dict[str, Any]) -> None:
        if len(seg) == 5 and seg[0] == "repos" and seg[3] == "statuses" and method == "POST":
            self._post_status(flavor, seg[4], body)
        if (len(seg) == 6 and seg[0] == "repos" and seg[3] == "commits"
                and seg[5] == "statuses" and method == "GET"):
            found = [s for s in self.store.statuses if s["flavor"] == flavor and s["sha"] == seg[4]]
            found.sort(key=lambda s: s["id"], reverse=flavor == "github")
            size_param = "per_page" if flavor == "github" else "limit"
            self._page(found, params, size_param, default=30)
        if len(seg) == 6 and seg[0] == "repos" and seg[3] == "issues" and seg[5] == "comments":
            number = int(seg[4])
            if number not in self.store.issues:
                raise _Reply(404, {"message": "Not Found"})
            if method == "GET":
                found = self.comments(flavor, number)
                if flavor == "gitea":  # Gitea lists every comment of an issue at once
                    raise _Reply(200, found)
                self._page(found, params, "per_page", default=30)
            if method == "POST":
                text = body.get("body")
                if not isinstance(text, str) or not text:
                    raise _Reply(422, {"message": "Validation Failed: body is missing"})
                if flavor == "github" and len(text) > 65536:
                    raise _Reply(422, {"message": "Validation Failed: body is too long "
                                                  "(maximum is 65536 characters)"})
                comment = {"id": self._new_id(), "issue": number, "flavor": flavor,
                           "body": text, "user": {"login": self.login}}
                self.store.comments.append(comment)
                raise _Reply(201, comment)
        if (len(seg) == 6 and seg[0] == "repos" and seg[3:5] == ["issues", "comments"]
                and method == "PATCH"):
            for comment in self.store.comments:
                if comment["flavor"] == flavor and comment["id"] == int(seg[5]):
                    text = body.get("body")
                    if not isinstance(text, str) or not text:
                        raise _Reply(422, {"message": "Validation Failed: body is missing"})
                    comment["body"] = text
                    raise _Reply(200, comment)
            raise _Reply(404, {"message": "Not Found"})

    def _post_status(self, flavor: str, sha: str, body: dict[str, Any]) -> None:
        if sha not in self.store.commits:
            if flavor == "github":
                raise _Reply(422, {"message": f"No commit found for SHA: {sha}"})
            raise _Reply(404, {"message": "object does not exist"})
        states = {"error", "failure", "pending", "success"} | (
            {"warning"} if flavor == "gitea" else set())
        state = body.get("state")
        description = str(body.get("description") or "")
        context = str(body.get("context") or "default")
        if state not in states:
            raise _Reply(422, {"message": "Validation Failed", "errors": [
                {"resource": "Status", "field": "state", "code": "invalid"}]})
        if flavor == "github" and len(description) > GITHUB_DESCRIPTION_MAX:
            raise _Reply(422, {"message": "Validation Failed", "errors": [
                {"resource": "Status", "code": "custom", "field": "description",
                 "message": "description is too long (maximum is 140 characters)"}]})
        if flavor == "github" and len(context) > GITHUB_CONTEXT_MAX:
            raise _Reply(422, {"message": "Validation Failed", "errors": [
                {"resource": "Status", "code": "custom", "field": "context",
                 "message": "context is too long (maximum is 255 characters)"}]})
        # Gitea's API names the state field "status" (GitHub: "state").
        status = {"id": self._new_id(), "flavor": flavor, "sha": sha,
                  ("state" if flavor == "github" else "status"): state,
                  "context": context, "description": description,
                  "target_url": body.get("target_url") or ""}
        self.store.statuses.append(status)
        raise _Reply(201, status)

    def _page(self, items: list[dict[str, Any]], params: dict[str, str], size_param: str,
              *, default: int) -> None:
        size = min(int(params.get(size_param, default)), 100)
        page = max(int(params.get("page", 1)), 1)
        chunk = items[(page - 1) * size: page * size]
        headers = {"X-Total-Count": str(len(items))}
        if page * size < len(items):
            headers["Link"] = f'<{self.url}/?page={page + 1}>; rel="next"'
            headers["X-Next-Page"] = str(page + 1)
        raise _Reply(200, chunk, headers)

    # -- GitLab ------------------------------------------------------------------------------

    def _gitlab(self, method: str, seg: list[str], params: dict[str, str],
                body: dict[str, Any]) -> None:
        if len(seg) < 2 or seg[0] != "projects":
            return
        if len(seg) == 4 and seg[2] == "statuses" and method == "POST":
            self._gitlab_post_status(seg[3], body)
        if (len(seg) == 6 and seg[2:4] == ["repository", "commits"] and seg[5] == "statuses"
                and method == "GET"):
            found = [s for s in self.store.statuses
                     if s["flavor"] == "gitlab" and s["sha"] == seg[4]
                     and ("name" not in params or s["name"] == params["name"])]
            if params.get("all") not in ("true", "1"):
                latest: dict[str, dict[str, Any]] = {}
                for s in found:
                    latest[s["name"]] = s
                found = list(latest.values())
            self._page(found, params, "per_page", default=20)
        if len(seg) >= 5 and seg[2] == "merge_requests" and seg[4] == "notes":
            number = int(seg[3])
            if number not in self.store.issues:
                raise _Reply(404, {"message": "404 Not found"})
            if method == "GET" and len(seg) == 5:
                self._page(self.comments("gitlab", number), params, "per_page", default=20)
            if method == "POST" and len(seg) == 5:
                text = body.get("body")
                if not isinstance(text, str) or not text:
                    raise _Reply(400, {"message": "400 Bad request - note is blank"})
                note = {"id": self._new_id(), "issue": number, "flavor": "gitlab", "body": text,
                        "author": {"username": self.login}}
                self.store.comments.append(note)
                raise _Reply(201, note)
            if method == "PUT" and len(seg) == 6:
                for note in self.comments("gitlab", number):
                    if note["id"] == int(seg[5]):
                        note["body"] = body.get("body") or note["body"]
                        raise _Reply(200, note)
                raise _Reply(404, {"message": "404 Note Not Found"})

    def _gitlab_post_status(self, sha: str, body: dict[str, Any]) -> None:
        if sha not in self.store.commits:
            raise _Reply(404, {"message": "404 Commit Not Found"})
        state = body.get("state")
        if state not in _GITLAB_EVENT:
            raise _Reply(400, {"error": "state does not have a valid value"})
        name = str(body.get("name") or body.get("context") or "default")
        description = body.get("description") or ""
        if len(description) > GITLAB_DESCRIPTION_MAX:
            raise _Reply(400, {"message": {"description": [
                "is too long (maximum is 255 characters)"]}})
        active = [s for s in self.store.statuses if s["flavor"] == "gitlab" and s["sha"] == sha
                  and s["name"] == name and s["status"] in _ACTIVE]
        if active:
            current = active[-1]
            if (current["status"], state) not in _GITLAB_ALLOWED:
                raise _Reply(400, {"message": (
                    f"Cannot transition status via :{_GITLAB_EVENT[state]} from "
                    f":{current['status']} (Reason(s): Status cannot transition via "
                    f"\"{_GITLAB_EVENT[state]}\")")})
            current.update(status=state, description=description)
            raise _Reply(201, current)
        status = {"id": self._new_id(), "flavor": "gitlab", "sha": sha, "name": name,
                  "status": state, "description": description,
                  "target_url": body.get("target_url")}
        self.store.statuses.append(status)
        raise _Reply(201, status)


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token if scheme.lower() in ("bearer", "token") else None
