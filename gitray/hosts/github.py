"""GitHub and Gitea/Forgejo commit statuses (the same API shape). Does I/O (HTTP)."""

from __future__ import annotations

from typing import Any

from gitray.core.config import StatusProvider
from gitray.hosts.api import HostApi, api_base_url, repo_path
from gitray.hosts.status import CommitStatus, State, newer

__all__ = ["GitHubProvider", "GiteaProvider"]


class GitHubProvider:
    """``POST /repos/{owner}/{repo}/statuses/{sha}``; description ≤ 140, context ≤ 255."""

    name = "github"
    description_limit = 140
    reads_before_write = False
    context_limit = 255
    _kind = StatusProvider.GITHUB
    def __init__(self, base_url: str, repository: str, token: str | None) -> None:
        self.api = HostApi(self._kind, base_url, token)
        self.secrets = self.api.secrets
        self.repo = repo_path(repository)

    def post(self, status: CommitStatus) -> bool:
        self.api.post_status(f"/repos/{self.repo}/statuses/{status.sha}", status,
                             state=str(status.state),
                             context=status.context[: self.context_limit])
        return True

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        what = f"reading status {context} on {sha[:12]}"
        newest: dict[str, Any] | None = None
        # The highest id is the status the host shows; list order differs between hosts.
        for item in self.api.pages(f"/repos/{self.repo}/commits/{sha}/statuses",
                                   what=what, per_page_param=self._per_page):
            if item.get("context") == context and newer(item, newest):
                newest = item
        if newest is None:
            return None
        # GitHub names the field "state", Gitea "status".
        shown = newest.get("state", newest.get("status"))
        state = {s.value: s for s in State}.get(str(shown))
        return None if state is None else (state, str(newest.get("description") or ""))

    _per_page = "per_page"


class GiteaProvider(GitHubProvider):
    """Gitea/Forgejo: the GitHub shape under ``/api/v1`` (plus a ``warning`` state we never use)."""

    name = "gitea"
    description_limit = 1024
    _kind = StatusProvider.GITEA
    _per_page = "limit"

    def __init__(self, base_url: str, repository: str, token: str | None) -> None:
        super().__init__(api_base_url(StatusProvider.GITEA, base_url), repository, token)
