"""GitLab commit statuses. Does I/O (HTTP).

GitLab has no "error" state; ours maps to ``canceled`` (gitray reached no verdict on the
commit, like a cancelled job), so ``failed`` always means the change itself failed. Ours
``pending`` maps to ``running`` while a step runs (a description made by ``step_description``)
and to ``pending`` before that. GitLab refuses a transition into the state a status already
has (400 "Cannot transition status"), so it is read before every write and such a post is
skipped: GitLab keeps the first description of a ``running`` status.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from gitray.core.config import StatusProvider
from gitray.hosts.api import HostApi
from gitray.hosts.status import STEP, CommitStatus, State, newer

__all__ = ["GitLabProvider", "gitlab_state"]

log = logging.getLogger("gitray.statuses")

_GITLAB_FROM_OURS = {State.SUCCESS: "success", State.FAILURE: "failed", State.ERROR: "canceled"}
_OURS_FROM_GITLAB = {"pending": State.PENDING, "running": State.PENDING,
                     "success": State.SUCCESS, "failed": State.FAILURE,
                     "canceled": State.ERROR}
# Transitions GitLab refuses while a status is still active (its state machine).
_GITLAB_REFUSED = {("pending", "pending"), ("running", "running"), ("running", "pending")}


def gitlab_state(status: CommitStatus) -> str:
    if status.state is State.PENDING:
        return "running" if STEP.match(status.description) else "pending"
    return _GITLAB_FROM_OURS[status.state]


class GitLabProvider:
    """``POST /projects/:id/statuses/:sha``; description ≤ 255; read before every write."""

    name = "gitlab"
    description_limit = 255
    reads_before_write = True

    def __init__(self, base_url: str, project: str, token: str | None) -> None:
        self.api = HostApi(StatusProvider.GITLAB, base_url, token)
        self.secrets = self.api.secrets
        self.project = quote(project.strip("/"), safe="")

    def _current(self, sha: str, name: str) -> tuple[str, str] | None:
        newest: dict[str, Any] | None = None
        for item in self.api.pages(f"/projects/{self.project}/repository/commits/{sha}/statuses",
                                   params={"name": name}, what=f"reading status {name}"):
            if item.get("name") == name and newer(item, newest):
                newest = item
        if newest is None:
            return None
        return str(newest.get("status")), str(newest.get("description") or "")

    def post(self, status: CommitStatus) -> bool:
        target = gitlab_state(status)
        current = self._current(status.sha, status.context)
        if current is not None:
            if current == (target, status.description):
                return False
            if (current[0], target) in _GITLAB_REFUSED:
                log.debug("gitlab keeps %s %s on %s: it cannot go from %s to %s", status.context,
                          current[0], status.sha[:12], current[0], target)
                return False
        self.api.post_status(f"/projects/{self.project}/statuses/{status.sha}", status,
                             state=target, name=status.context)
        return True

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        current = self._current(sha, context)
        if current is None or current[0] not in _OURS_FROM_GITLAB:
            return None
        return _OURS_FROM_GITLAB[current[0]], current[1]
