"""Start a real Gitea on 127.0.0.1 for tests. Does I/O (processes, files, HTTP).

``Gitea.start(binary, static, workdir)`` writes an ``app.ini`` (sqlite, install lock, no SSH,
offline, a free port), runs ``gitea migrate``, creates an admin user with
``gitea admin user create`` and a token with ``gitea admin user generate-access-token``, then
starts ``gitea web`` and waits for ``/api/healthz``. ``stop()`` ends that process by its PID.
The token is a test credential: the tests check it never shows up in gitray's output.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from testenv.procs import free_port

ADMIN = "gitray-admin"
_TOKEN = re.compile(r"[0-9a-f]{40}")  # an access token as `--raw` prints it


class GiteaStartError(RuntimeError):
    """Gitea did not start; the message names the step and the log file."""


@dataclass
class Gitea:
    binary: Path
    workdir: Path
    port: int
    token: str
    process: subprocess.Popen[bytes]
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "gitea-web.log"

    @classmethod
    def start(cls, binary: Path, static: Path, workdir: Path, host: str = "127.0.0.1") -> Gitea:
        """`host`: the address it listens on (a real node's address makes it reachable from
        pods; the default keeps it on loopback)."""
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        ini = workdir / "app.ini"
        ini.write_text(_app_ini(workdir, static, port, host))
        env = _env(workdir)
        log = workdir / "gitea-setup.log"

        def run(step: str, *args: str) -> str:
            proc = subprocess.run([str(binary), *args, "--config", str(ini)], cwd=workdir,
                                  env=env, capture_output=True, text=True, timeout=300,
                                  check=False)
            with log.open("a") as out:
                out.write(f"$ gitea {args[0]} ...\n{proc.stderr[-4000:]}\n")
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
                raise GiteaStartError(f"gitea {step} failed: {last} (see {log})")
            return proc.stdout

        run("migrate", "migrate")
        password = secrets.token_urlsafe(18)
        run("admin user create", "admin", "user", "create", "--username", ADMIN,
            "--password", password, "--email", "admin@example.invalid", "--admin",
            "--must-change-password=false")
        printed = run("generate-access-token", "admin", "user", "generate-access-token",
                      "--username", ADMIN, "--token-name", "gitray-tests", "--raw",
                      "--scopes", "all")
        token = token_in(printed)
        if token is None:
            raise GiteaStartError(f"gitea generate-access-token printed no token (see {log})")
        out = (workdir / "gitea-web.log").open("ab")
        process = subprocess.Popen([str(binary), "web", "--config", str(ini)], cwd=workdir,
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
        gitea = cls(binary, workdir, port, token, process, host)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise GiteaStartError(f"gitea web exited with {process.returncode} "
                                      f"(see {gitea.log_file})")
            try:
                if httpx.get(f"{gitea.url}/api/healthz", timeout=2).status_code == 200:
                    return gitea
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        gitea.stop()
        raise GiteaStartError(f"gitea web not healthy after 60 s (see {gitea.log_file})")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    # -- API helpers for test setup ----------------------------------------------------------

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{self.url}/api/v1{path}", timeout=30,
                                 headers={"Authorization": f"token {self.token}"}, **kwargs)
        if not response.is_success:
            raise GiteaStartError(f"gitea {method} {path}: HTTP {response.status_code}: "
                                  f"{response.text[:300]}")
        return response.json() if response.content else None

    def clone_url(self, repo: str) -> str:
        """An http URL carrying the admin's token (for git push in test setup)."""
        return f"http://{ADMIN}:{self.token}@{self.host}:{self.port}/{ADMIN}/{repo}.git"


def token_in(printed: str) -> str | None:
    """The access token ``generate-access-token --raw`` printed: as root, Gitea may print its
    "You are running Gitea using the root user ... You have been warned against this." on
    stdout too, before or after it (seen in a full run)."""
    tokens = [word for word in printed.split() if _TOKEN.fullmatch(word)]
    return tokens[-1] if tokens else None


def _env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITEA_")}
    env |= {"GITEA_WORK_DIR": str(workdir), "HOME": str(workdir / "home"), "USER": _user()}
    if os.getuid() == 0:  # CI containers run as root; Gitea refuses that unless told
        env["GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT"] = "true"
    (workdir / "home").mkdir(exist_ok=True)
    return env


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root" if os.getuid() == 0 else str(os.getuid())


def _app_ini(workdir: Path, static: Path, port: int, host: str) -> str:
    return f"""\
APP_NAME = gitray tests
RUN_USER = {_user()}
RUN_MODE = prod
WORK_PATH = {workdir}

[server]
PROTOCOL = http
HTTP_ADDR = {host}
HTTP_PORT = {port}
DOMAIN = {host}
ROOT_URL = http://{host}:{port}/
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
APP_DATA_PATH = {workdir}/data
STATIC_ROOT_PATH = {static}

[database]
DB_TYPE = sqlite3
PATH = {workdir}/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = {workdir}/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = {secrets.token_hex(32)}
INTERNAL_TOKEN = {secrets.token_urlsafe(64)}
PASSWORD_HASH_ALGO = pbkdf2_hi

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
ENABLE_NOTIFY_MAIL = false

[mailer]
ENABLED = false

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[queue]
TYPE = level
DATADIR = {workdir}/data/queues

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[cron]
ENABLED = false

[webhook]
ALLOWED_HOST_LIST = loopback

[migrations]
ALLOW_LOCALNETWORKS = true

[log]
MODE = file
LEVEL = Warn
ROOT_PATH = {workdir}/log

[api]
MAX_RESPONSE_ITEMS = 50
DEFAULT_PAGING_NUM = 30
"""
