"""Commit statuses as git notes (``refs/notes/gitray``), pushed to the remote. Does I/O
(``git`` subprocesses).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import subprocess
import threading
import time
from pathlib import Path

from gitray.core.credentials import git_auth, redact_secrets
from gitray.core.errors import StatusRejected, TransientError
from gitray.core.timefmt import utc_timestamp
from gitray.hosts.status import CommitStatus, State

__all__ = ["GIT_TIMEOUT_S", "NOTES_REF", "GitNotesProvider"]

log = logging.getLogger("gitray.statuses")

GIT_TIMEOUT_S = 60.0
NOTES_REF = "refs/notes/gitray"
_GIT_IDENTITY = {"GIT_AUTHOR_NAME": "gitray", "GIT_AUTHOR_EMAIL": "gitray@localhost",
                 "GIT_COMMITTER_NAME": "gitray", "GIT_COMMITTER_EMAIL": "gitray@localhost"}
_REMOTE_NOTES = "refs/notes/gitray-remote"
_STALE_LOCK_AFTER = 3  # consecutive "lock file exists" refusals before calling it stale


class GitNotesProvider:
    """Status records as JSON lines in ``refs/notes/gitray`` (one note per commit, the newest
    record per context), pushed to ``remote``. A rejected push is resolved by fetching the
    remote notes, merging them (``cat_sort_uniq``: every line of both sides kept) and pushing
    again; readers take the newest record per context, so nothing is lost in a race."""

    name = "git-notes"
    description_limit = 1024
    reads_before_write = True
    push_attempts = 10

    def __init__(self, repo_dir: Path, remote: str = "origin") -> None:
        self.repo_dir = repo_dir
        auth = git_auth(remote)  # credentials through git's environment only
        self._env = {**os.environ, **_GIT_IDENTITY, **auth.env}
        self._helper = list(auth.args)
        self.secrets: tuple[str, ...] = auth.secrets
        self.remote = auth.url
        self._lock = threading.Lock()

    def _git(self, *args: str, stdin: str | None = None, check: bool = True,
             ) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(["git", *self._helper, *args], cwd=self.repo_dir,
                                  env=self._env, input=stdin, capture_output=True, text=True,
                                  timeout=GIT_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as e:
            raise TransientError(f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f}s") from e
        except OSError as err:
            raise StatusRejected(f"cannot run git in {self.repo_dir}: {err.strerror}") from err
        if check and proc.returncode != 0:
            lines = (proc.stderr.strip() or proc.stdout.strip() or "failed").splitlines()
            errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
            reason = redact_secrets(" ".join((errors or lines)[0].split()), self.secrets)
            err_type = TransientError if args[0] in ("push", "fetch") else StatusRejected
            raise err_type(f"git {args[0]} ({self.name}): {reason}")
        return proc

    def records(self, sha: str) -> dict[str, dict[str, str]]:
        """The newest record per context in the local note of ``sha``."""
        proc = self._git("notes", f"--ref={NOTES_REF}", "show", sha, check=False)
        newest: dict[str, dict[str, str]] = {}
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or "context" not in record:
                continue
            known = newest.get(record["context"])
            if known is None or str(record.get("at", "")) >= str(known.get("at", "")):
                newest[record["context"]] = record
        return newest

    def post(self, status: CommitStatus) -> bool:
        with self._lock:
            records = self.records(status.sha)
            known = records.get(status.context)
            if known and (known.get("state"), known.get("description")) == (
                    status.state, status.description):
                self._push()  # an earlier push may have failed
                return False
            records[status.context] = {
                "context": status.context, "state": str(status.state),
                "description": status.description, "target_url": status.target_url,
                "at": utc_timestamp(digits=6),
            }
            text = "".join(json.dumps(records[c], sort_keys=True) + "\n" for c in sorted(records))
            self._git("notes", f"--ref={NOTES_REF}", "add", "-f", "-F", "-", status.sha,
                      stdin=text)
            self._push()
            return True

    def _push(self) -> None:
        locked = 0
        for attempt in range(self.push_attempts):
            proc = self._git("push", "--quiet", self.remote, f"{NOTES_REF}:{NOTES_REF}",
                             check=False)
            if proc.returncode == 0:
                return
            lock = re.search(r"Unable to create '([^']*\.lock)': File exists", proc.stderr)
            locked = locked + 1 if lock else 0
            if lock and locked >= _STALE_LOCK_AFTER:
                # A concurrent push holds the lock for milliseconds; one that outlives a few
                # attempts was left by a push that crashed. Merging again cannot help.
                raise TransientError(
                    f"git push ({self.name}): the remote's {NOTES_REF} is locked "
                    f"({redact_secrets(lock.group(1), self.secrets)} exists; left by a crashed "
                    "push? remove it on the Git server)")
            if lock:
                time.sleep(random.uniform(0.05, 0.2 * locked))
                continue
            if not re.search(r"rejected|non-fast-forward|fetch first|cannot lock ref",
                             proc.stderr):
                self._git("push", "--quiet", self.remote, f"{NOTES_REF}:{NOTES_REF}")
                return
            log.debug("notes push rejected (attempt %d): %s", attempt + 1,
                      redact_secrets(" | ".join(proc.stderr.strip().splitlines()), self.secrets))
            # Writers racing for the ref: back off a little, jittered, then merge theirs.
            time.sleep(random.uniform(0.0, 0.05 * (attempt + 1)))
            self._merge_remote()
        raise TransientError(f"git push ({self.name}): still rejected after "
                             f"{self.push_attempts} merges with the remote notes")

    def _merge_remote(self) -> None:
        self._git("fetch", "--quiet", self.remote, f"+{NOTES_REF}:{_REMOTE_NOTES}")
        have_local = self._git("rev-parse", "--verify", "--quiet", NOTES_REF,
                               check=False).returncode == 0
        if have_local:
            self._git("notes", f"--ref={NOTES_REF}", "merge", "--quiet", "-s", "cat_sort_uniq",
                      _REMOTE_NOTES)
        else:
            self._git("update-ref", NOTES_REF, _REMOTE_NOTES)

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        record = self.records(sha).get(context)
        if record is None or record.get("state") not in set(State):
            return None
        return State(record["state"]), str(record.get("description", ""))
