"""Secrets never leak (issue 6, item 9). A Git token lives in the remote URL
(``http://gitray:<token>@127.0.0.1:<port>/remote.git``, served by the real ``git http-backend``
behind a small Basic-auth HTTP server below) and a status token reaches a strict local Git host
(``testenv/githost``, GitHub flavour) that refuses any other token. Every output channel is then
driven — successes, an invalid revision, a Git outage with the token refused, a status host
answering 500 — and searched for either token:

daemon logs at debug level (text and JSON), CLI output and errors (validate, plan text and
JSON, apply, status, unreachable and refusing remotes), commit statuses, the PR plan comment
(``gitray plan --comment``), /metrics, /readyz, /healthz, run records and every other ConfigMap,
the Lease, Kubernetes Events, and the on-disk Git caches.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from testenv.githost.server import GitHost
from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump, gitray_config
from testenv.procs import free_port
from tests.integration.chaos import Replica, start_replica
from tests.integration.gitops import REPO_ROOT, GitOpsRepo, Gitray

GIT_USER = "gitray"
GIT_TOKEN = "gtok" + secrets.token_hex(12)
STATUS_TOKEN = "stok" + secrets.token_hex(12)
TOKENS = (GIT_TOKEN, STATUS_TOKEN)
PR = 7


@dataclass
class GitHttp:
    """``git http-backend`` (real Git's smart HTTP) behind HTTP Basic auth, on 127.0.0.1."""

    root: Path
    reject: bool = False  # answer 401 to everyone (the token was revoked)
    authorized: int = 0
    refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, token: str = GIT_TOKEN, repo: str = "remote.git") -> str:
        return f"http://{GIT_USER}:{token}@127.0.0.1:{self.port}/{repo}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self
        expected = "Basic " + base64.b64encode(f"{GIT_USER}:{GIT_TOKEN}".encode()).decode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._cgi()

            def do_POST(self) -> None:
                self._cgi()

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    for _ in range(1_000_000):
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _cgi(self) -> None:
                body = self._body()
                with outer._lock:
                    ok = not outer.reject and self.headers.get("Authorization") == expected
                    if ok:
                        outer.authorized += 1
                    else:
                        outer.refused += 1
                if not ok:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path, _, query = self.path.partition("?")
                env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(outer.root),
                       "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path, "QUERY_STRING": query,
                       "REQUEST_METHOD": self.command, "REMOTE_USER": GIT_USER,
                       "REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": str(len(body)),
                       "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                       "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                       "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
                out = subprocess.run(["git", "http-backend"], input=body, env=env,
                                     capture_output=True, timeout=60, check=False).stdout
                sep = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
                head, _, payload = out.partition(sep)
                status, headers = 200, []
                for line in head.decode("latin-1").splitlines():
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


def configmap(ns: str, name: str, value: str) -> str:
    return dump({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": name, "namespace": ns}, "data": {"value": value}})


@dataclass
class Setup:
    env: TestEnv
    ns: str
    tmp: Path
    bare: Path
    work: GitOpsRepo
    git_http: GitHttp
    host: GitHost
    channels: dict[str, str] = field(default_factory=dict)  # channel -> everything it said

    def push(self, message: str, files: dict[str, str | None]) -> str:
        sha = self.work.commit(message, files)
        self.host.add_commit(sha)
        self.work.git("push", "-q", str(self.bare), "main")
        return sha

    def record(self, channel: str, text: str) -> None:
        self.channels[channel] = self.channels.get(channel, "") + text + "\n"


@pytest.fixture
def setup(testenv: TestEnv, namespace: str, tmp_path: Path) -> Iterator[Setup]:
    root = tmp_path / "served"
    root.mkdir()
    bare = root / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    git_http = GitHttp(root)
    with GitHost(token=STATUS_TOKEN) as host:
        host.add_issue(PR)
        try:
            yield Setup(testenv, namespace, tmp_path, bare, GitOpsRepo(tmp_path / "work"),
                        git_http, host)
        finally:
            git_http.close()


def start_daemon(s: Setup, log_format: str, name: str) -> Replica:
    token_file = s.tmp / "status-token"
    token_file.write_text(STATUS_TOKEN + "\n")
    token_args = ("--status-token-file", str(token_file)) if log_format == "json" else ()
    env = {"NO_COLOR": "1"}
    if not token_args:
        env["GITRAY_STATUS_TOKEN"] = STATUS_TOKEN
    return start_replica(s.env.kubeconfig, s.ns, s.git_http.url(), s.tmp, name,
                         extra=("--drift-every", "2", *token_args, "--log-format", log_format,
                                "--log-level", "debug"), env=env)


def synced(sync: Replica, sha: str) -> bool:
    return sync.metric("gitray_last_synced_revision_info", f'revision="{sha}"') == 1


def collect_daemon(s: Setup, sync: Replica, name: str) -> None:
    for path in ("/metrics", "/readyz", "/healthz"):
        s.record(f"{name} {path}", "\n".join(str(x) for x in sync.get(path)))


def stop(s: Setup, sync: Replica, name: str) -> None:
    collect_daemon(s, sync, name)
    sync.terminate()
    s.record(f"{name} log", sync.logs())


def collect_cluster(s: Setup) -> None:
    from kubernetes import client

    api = s.env.api_client
    for cm in s.env.core.list_namespaced_config_map(s.ns).items:
        s.record("ConfigMaps (run records and workloads)",
                 json.dumps(api.sanitize_for_serialization(cm)))
    for event in s.env.core.list_namespaced_event(s.ns).items:
        s.record("Kubernetes Events", json.dumps(api.sanitize_for_serialization(event)))
    for lease in client.CoordinationV1Api(api).list_namespaced_lease(s.ns).items:
        s.record("Lease", json.dumps(api.sanitize_for_serialization(lease)))


def collect_files(s: Setup, channel: str, directory: Path) -> None:
    """Everything git and gitray keep on disk for a remote (config, FETCH_HEAD, logs...)."""
    for path in sorted(directory.rglob("*")):
        if path.is_file() and "objects" not in path.relative_to(directory).parts:
            s.record(channel, f"{path}: " + path.read_bytes().decode("utf-8", "replace"))


def cli(s: Setup, name: str, *args: str, env: dict[str, str] | None = None,
        expect: int | None = 0) -> subprocess.CompletedProcess[str]:
    gitray = Gitray(s.env.kubeconfig, s.ns)
    command, *rest = args
    argv = gitray.argv(command, *rest)
    if command == "validate":  # needs no cluster, takes no --kubeconfig
        argv = [sys.executable, "-m", "gitray", command, *rest]
    r = subprocess.run(argv, capture_output=True, text=True,
                       check=False, timeout=300, env={**gitray.env(), **(env or {}),
                                                      "HOME": str(s.tmp / "home")},
                       stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
    # (what gitray printed, not the command line, which holds the token by design)
    s.record(f"CLI {name}", f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    if expect is not None:
        assert r.returncode == expect, s.channels[f"CLI {name}"]
    assert "Traceback" not in r.stderr, r.stderr
    return r


def test_tokens_never_appear_in_any_output(setup: Setup) -> None:
    s = setup
    ns = s.ns
    config = gitray_config(allowedNamespaces=[ns], status={
        "provider": "github", "url": s.host.url, "repository": "acme/ray-gitops"})
    first = s.push("first", {"gitray.yaml": config, "a.yaml": configmap(ns, "a", "1"),
                             "b.yaml": configmap(ns, "b", "1")})

    # -- the daemon, text logs at debug level, the status token from the environment -------
    text = start_daemon(s, "text", "daemon-text")
    try:
        wait_for(lambda: synced(text, first) or None, timeout=120, what="first sync")
        wait_for(lambda: any(st["state"] == "success" for st in
                             s.host.statuses("github", first, "gitray")) or None, timeout=30)
        invalid = s.push("invalid", {"c.yaml": configmap("kube-system", "c", "1")})
        wait_for(lambda: s.host.statuses("github", invalid, "gitray") or None, timeout=60,
                 what="failure status of the invalid revision")
        # The Git host refuses the token for a while: fetch errors on every channel.
        errors = text.metric("gitray_git_errors_total")
        s.git_http.reject = True
        wait_for(lambda: text.metric("gitray_git_errors_total") >= errors + 2 or None,
                 timeout=60, what="git errors")
        collect_daemon(s, text, "daemon-text (git refused)")
        assert "cannot fetch" in json.loads(text.get("/readyz")[1])["git"]
        s.git_http.reject = False
        # The status host fails: retries, then success.
        s.host.fail("POST", "/statuses/", times=2, status=500)
        second = s.push("second", {"c.yaml": None, "a.yaml": configmap(ns, "a", "2")})
        wait_for(lambda: synced(text, second) or None, timeout=60, what="second sync")
        wait_for(lambda: any(st["state"] == "success" for st in
                             s.host.statuses("github", second, "gitray")) or None, timeout=60)
    finally:
        stop(s, text, "daemon-text")

    # -- the daemon, JSON logs at debug level, the status token from a file ---------------
    js = start_daemon(s, "json", "daemon-json")
    try:
        third = s.push("third", {"b.yaml": configmap(ns, "b", "3")})
        wait_for(lambda: synced(js, third) or None, timeout=120, what="third sync")
        wait_for(lambda: any(st["state"] == "success" for st in
                             s.host.statuses("github", third, "gitray")) or None, timeout=30)
        s.git_http.reject = True
        errors = js.metric("gitray_git_errors_total")
        wait_for(lambda: js.metric("gitray_git_errors_total") >= errors + 2 or None,
                 timeout=60, what="git errors")
        collect_daemon(s, js, "daemon-json (git refused)")
        s.git_http.reject = False
    finally:
        stop(s, js, "daemon-json")
    for line in s.channels["daemon-json log"].splitlines():
        if line:
            json.loads(line)  # really JSON

    # -- the CLI, with the same URL and tokens ---------------------------------------------
    url = s.git_http.url()
    env = {"GITRAY_STATUS_TOKEN": STATUS_TOKEN}
    cli(s, "validate", "validate", "--repo", url)
    r = cli(s, "validate invalid", "validate", "--repo", url, "--revision", invalid, expect=1)
    assert "kube-system" in r.stderr
    r = cli(s, "plan json", "plan", "--repo", url, "--format", "json", "--against", "live")
    assert json.loads(r.stdout)["revision"] == third
    cli(s, "plan text", "plan", "--repo", url, "--against", "empty")
    r = cli(s, "plan comment", "plan", "--repo", str(s.work.path), "--against", "live",
            "--comment", "--pr", str(PR), env=env)
    assert s.host.comments("github", PR), r.stderr
    token_file = s.tmp / "comment-token"
    token_file.write_text(STATUS_TOKEN)
    s.host.fail("PATCH", "/issues/comments/", times=1, status=422)
    s.work.commit("touch", {"b.yaml": configmap(ns, "b", "4")})
    r = cli(s, "plan comment refused", "plan", "--repo", str(s.work.path), "--comment",
            "--pr", str(PR), "--status-token-file", str(token_file), expect=1)
    assert "HTTP 422" in r.stderr
    s.work.git("reset", "-q", "--hard", third)
    cli(s, "apply", "apply", "--repo", url, "--yes")
    cli(s, "status", "status", "--repo", url)
    s.git_http.reject = True
    r = cli(s, "plan, token refused", "plan", "--repo", url, expect=1)
    assert "cannot fetch" in r.stderr
    s.git_http.reject = False
    cli(s, "plan, unknown repository", "plan", "--repo", s.git_http.url(repo="nope.git"),
        expect=1)
    closed = f"http://{GIT_USER}:{GIT_TOKEN}@127.0.0.1:{free_port()}/remote.git"
    cli(s, "plan, nobody listening", "plan", "--repo", closed, expect=1)
    cli(s, "sync, bad address", "sync", "--repo", url, "--http-address", "nowhere",
        env=env, expect=1)

    # -- statuses, comments, cluster objects, caches --------------------------------------
    s.record("commit statuses", json.dumps(s.host.store.statuses))
    s.record("PR comments", json.dumps(s.host.store.comments))
    collect_cluster(s)
    for name in ("cache-daemon-text", "cache-daemon-json", "home"):
        collect_files(s, f"files under {name}", s.tmp / name)

    # Every channel said something, and the tokens really were in use.
    assert s.git_http.authorized > 0 and s.git_http.refused > 0
    used = [r for r in s.host.log() if r.headers.get("authorization") ==
            f"Bearer {STATUS_TOKEN}" and r.status < 300]
    assert used, "the status token was never used"
    states = {st["state"] for st in s.host.store.statuses}
    assert {"pending", "success", "failure"} <= states, states
    assert "kube-system" in s.channels["commit statuses"]
    assert "gitray" in s.channels["Kubernetes Events"]
    assert "gitray-run-" in s.channels["ConfigMaps (run records and workloads)"]
    assert "DEBUG" in s.channels["daemon-text log"]
    assert '"level": "debug"' in s.channels["daemon-json log"]
    assert "gitray_git_errors_total" in s.channels["daemon-text /metrics"]
    assert len(s.channels) >= 20, sorted(s.channels)
    assert all(s.channels[c].strip() for c in s.channels), "a channel said nothing"
    assert "config" in s.channels["files under home"]  # the CLI's URL cache was searched
    assert leaks({"canary": f"url http://u:{GIT_TOKEN}@h/"}) and leaks({"c": STATUS_TOKEN})
    found = leaks(s.channels)
    assert not found, "\n".join(found)
    print("\nCHANNELS SEARCHED: " + ", ".join(sorted(s.channels)))


def leaks(channels: dict[str, str]) -> list[str]:
    """Where either token (or its start, as a cut-off line would show) appears."""
    return [f"{channel}: {token[:4]}… in {text!r}"[:2000] for channel, text in
            channels.items() for token in TOKENS for form in (token, token[:16])
            if form in text]
