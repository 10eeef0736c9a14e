"""Commit statuses: context names, trimming, GitLab's states, redaction, tokens, and the
publisher's de-duplication and retry queue (against a scripted provider), plus the secrets test
against the strict local Git host (testenv/githost) on every path: success, 401, 500, timeouts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gitray.core.config import StatusProvider, StatusSettings
from gitray.core.credentials import redact_secrets as redact
from gitray.core.errors import ConfigError, StatusRejected, TransientError
from gitray.core.model import ObjectKey
from gitray.hosts import api as host_api
from gitray.hosts import comments as host_comments
from gitray.hosts.api import auth_headers, token_from
from gitray.hosts.comments import marker_for, upsert_plan_comment
from gitray.hosts.gitlab import gitlab_state
from gitray.hosts.notes import GitNotesProvider
from gitray.hosts.publisher import PublishCounts, StatusPublisher, make_publisher
from gitray.hosts.status import (
    CommitStatus,
    NullProvider,
    State,
    context_for,
    step_description,
    trim,
)
from testenv.githost import GitHost
from tests.clock import ManualClock

SHA = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "ghp_S3cretT0ken/with+odd=chars"


# -- naming, trimming, mapping ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "key", "expected"),
    [
        ("gitray", ObjectKey("RayService", "ml", "serve"), "gitray/ml/RayService/serve"),
        ("gitray", None, "gitray"),
        ("gitray-eu/", ObjectKey("RayJob", "default", "train"), "gitray-eu/default/RayJob/train"),
        ("", None, "gitray"),
    ],
    ids=["workload", "overall", "custom prefix, trailing slash", "empty prefix"],
)
def test_context_names(prefix: str, key: ObjectKey | None, expected: str) -> None:
    assert context_for(prefix, key) == expected


def test_a_short_description_is_kept() -> None:
    assert trim("converged at abc123", 140) == "converged at abc123"


def test_a_long_description_is_cut_to_the_limit_with_an_ellipsis() -> None:
    cut = trim("x" * 500, 140)
    assert len(cut) == 140
    assert cut.endswith("…")


def test_a_multiline_reason_becomes_one_line() -> None:
    reason = "Traceback (most recent call last):\n  File \"app.py\"\nImportError: no module"
    assert trim(reason, 140) == (
        'Traceback (most recent call last): File "app.py" ImportError: no module')


def test_exactly_the_limit_is_not_cut() -> None:
    assert trim("y" * 140, 140) == "y" * 140


@pytest.mark.parametrize(
    ("state", "description", "expected"),
    [
        (State.PENDING, "planned: 3 steps", "pending"),
        (State.PENDING, step_description(2, 5, "create cluster serve-abc12"), "running"),
        (State.SUCCESS, "converged", "success"),
        (State.FAILURE, "Serve app DEPLOY_FAILED", "failed"),
        (State.ERROR, "API server unreachable", "canceled"),
    ],
    ids=["planned is pending", "a running step is running", "success", "failure is failed",
         "error is canceled"],
)
def test_gitlab_state_mapping(state: State, description: str, expected: str) -> None:
    assert gitlab_state(CommitStatus(SHA, "gitray", state, description)) == expected


# -- secrets helpers -----------------------------------------------------------------------------


def test_redact_replaces_the_secret_and_its_url_encoded_form() -> None:
    text = f"auth {TOKEN} url https://x/?t={httpx.QueryParams({'t': TOKEN})['t']}"
    encoded = "ghp_S3cretT0ken%2Fwith%2Bodd%3Dchars"
    shown = redact(f"{text} {encoded}", [TOKEN])
    assert TOKEN not in shown
    assert encoded not in shown
    assert shown.count("***") == 3


def test_redact_ignores_empty_secrets() -> None:
    assert redact("nothing to hide", ["", ""]) == "nothing to hide"


def test_token_file_wins_over_the_environment(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITRAY_STATUS_TOKEN", "from-env")
    file = tmp_path / "token"
    file.write_text("  from-file\n")
    assert token_from("GITRAY_STATUS_TOKEN", str(file)) == "from-file"
    assert token_from("GITRAY_STATUS_TOKEN", None) == "from-env"
    monkeypatch.setenv("GITRAY_STATUS_TOKEN", "  \n")
    assert token_from("GITRAY_STATUS_TOKEN", None) is None


def test_an_unreadable_token_file_is_one_line_without_content(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        token_from("X", str(tmp_path / "missing"))
    assert str(info.value).count("\n") == 0
    assert "missing" in str(info.value)


@pytest.mark.parametrize(
    ("provider", "header"),
    [
        (StatusProvider.GITHUB, ("Authorization", "Bearer t0k")),
        (StatusProvider.GITEA, ("Authorization", "token t0k")),
        (StatusProvider.GITLAB, ("PRIVATE-TOKEN", "t0k")),
    ],
)
def test_the_token_header_per_host(provider: StatusProvider, header: tuple[str, str]) -> None:
    assert auth_headers(provider, "t0k") == dict([header])
    assert auth_headers(provider, None) == {}


# -- the publisher -----------------------------------------------------------------------------


@dataclass
class Scripted:
    """A provider whose answers are scripted: each post pops the next outcome."""

    name: str = "scripted"
    description_limit: int = 140
    reads_before_write: bool = False
    secrets: tuple[str, ...] = ()
    outcomes: list[Exception | None] = field(default_factory=list)
    shown: dict[tuple[str, str], tuple[State, str]] = field(default_factory=dict)
    posts: list[CommitStatus] = field(default_factory=list)
    reads: int = 0

    def post(self, status: CommitStatus) -> bool:
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        self.posts.append(status)
        self.shown[(status.sha, status.context)] = (status.state, status.description)
        return True

    def latest(self, sha: str, context: str) -> tuple[State, str] | None:
        self.reads += 1
        return self.shown.get((sha, context))


def status(state: State = State.PENDING, description: str = "planned",
           context: str = "gitray") -> CommitStatus:
    return CommitStatus(SHA, context, state, description)


def test_the_same_state_and_description_is_posted_once() -> None:
    provider = Scripted()
    publisher = StatusPublisher(provider, clock=ManualClock())
    assert publisher.publish(status()) is True
    assert publisher.publish(status()) is False
    assert publisher.publish(status(State.PENDING, "step 1/2: x")) is True
    assert publisher.publish(status(State.PENDING, "step 1/2: x")) is False
    assert [p.description for p in provider.posts] == ["planned", "step 1/2: x"]
    assert publisher.counts() == PublishCounts(posted=2, deduplicated=2)


def test_dedup_compares_the_trimmed_description() -> None:
    provider = Scripted()
    publisher = StatusPublisher(provider, clock=ManualClock())
    publisher.publish(status(State.FAILURE, "e" * 300))
    publisher.publish(status(State.FAILURE, "e" * 301))  # same once trimmed to 140
    assert len(provider.posts) == 1
    assert len(provider.posts[0].description) == 140


def test_a_fresh_publisher_reads_what_the_host_shows_before_posting() -> None:
    provider = Scripted()
    StatusPublisher(provider, clock=ManualClock()).publish(status(State.SUCCESS, "converged"))
    again = StatusPublisher(provider, clock=ManualClock())  # e.g. after a restart or failover
    assert again.publish(status(State.SUCCESS, "converged")) is False
    assert len(provider.posts) == 1


def test_contexts_are_deduplicated_separately() -> None:
    provider = Scripted()
    publisher = StatusPublisher(provider, clock=ManualClock())
    publisher.publish(status(context="gitray"))
    publisher.publish(status(context="gitray/default/RayService/a"))
    assert len(provider.posts) == 2


def test_a_transient_failure_is_retried_by_flush_after_the_backoff() -> None:
    clock = ManualClock()
    provider = Scripted(outcomes=[TransientError("HTTP 500"), TransientError("timed out")])
    publisher = StatusPublisher(provider, clock=clock, backoff_s=(5, 20))
    assert publisher.publish(status(State.SUCCESS, "converged")) is False
    assert publisher.pending() == 1
    assert publisher.flush() == 1  # not due yet
    clock.now += 5
    assert publisher.flush() == 1  # second failure: queued again for 20 s
    clock.now += 19
    assert publisher.flush() == 1
    clock.now += 1
    assert publisher.flush() == 0
    assert [p.state for p in provider.posts] == [State.SUCCESS]
    assert publisher.counts() == PublishCounts(posted=1, retried=2)


def test_retries_are_bounded() -> None:
    clock = ManualClock()
    provider = Scripted(outcomes=[TransientError("HTTP 503")] * 10)
    publisher = StatusPublisher(provider, clock=clock, max_attempts=3, backoff_s=(1,))
    publisher.publish(status())
    for _ in range(5):
        clock.now += 1
        publisher.flush()
    assert publisher.pending() == 0
    assert publisher.counts().failed == 1
    assert provider.posts == []


def test_a_newer_status_replaces_one_waiting_for_a_retry() -> None:
    clock = ManualClock()
    provider = Scripted(outcomes=[TransientError("HTTP 502")])
    publisher = StatusPublisher(provider, clock=clock, backoff_s=(1,))
    publisher.publish(status(State.PENDING, "step 1/2: a"))
    publisher.publish(status(State.SUCCESS, "converged"))
    clock.now += 5
    publisher.flush()
    assert [(p.state, p.description) for p in provider.posts] == [(State.SUCCESS, "converged")]


def test_a_rejected_status_is_dropped_not_retried() -> None:
    provider = Scripted(outcomes=[StatusRejected("HTTP 422: description too long")])
    publisher = StatusPublisher(provider, clock=ManualClock())
    assert publisher.publish(status()) is False
    assert publisher.pending() == 0
    assert publisher.counts().failed == 1


def test_an_unexpected_provider_bug_never_reaches_the_sync() -> None:
    provider = Scripted(outcomes=[KeyError("id")])
    publisher = StatusPublisher(provider, clock=ManualClock())
    assert publisher.publish(status()) is False
    assert publisher.counts().failed == 1


def test_the_none_provider_publishes_nothing() -> None:
    publisher = make_publisher(StatusSettings(), token=None, repo_dir=None)
    assert isinstance(publisher.provider, NullProvider)
    assert publisher.publish(status()) is False
    assert publisher.counts() == PublishCounts()


@pytest.mark.parametrize(
    "settings",
    [
        StatusSettings(StatusProvider.GITEA, url="", repository="o/r"),
        StatusSettings(StatusProvider.GITHUB, repository=""),
        StatusSettings(StatusProvider.GITHUB, url="ftp://x", repository="o/r"),
        StatusSettings(StatusProvider.GIT_NOTES),
    ],
    ids=["gitea without url", "github without repository", "not http", "notes without clone"],
)
def test_missing_settings_are_config_errors(settings: StatusSettings) -> None:
    with pytest.raises(ConfigError):
        make_publisher(settings, token=TOKEN, repo_dir=None)


def test_a_secret_inside_a_description_is_redacted_before_posting() -> None:
    provider = Scripted()
    publisher = StatusPublisher(provider, clock=ManualClock(), secrets=[TOKEN])
    publisher.publish(status(State.FAILURE, f"git said: https://x:{TOKEN}@host failed"))
    assert TOKEN not in provider.posts[0].description


def test_plan_comment_marker_cannot_be_closed_by_the_path() -> None:
    assert marker_for("apps/ml") == "<!-- gitray-plan:apps/ml -->"
    assert "-->" not in marker_for("evil-->path")[:-3]


# -- secrets: every path against the strict Git host -------------------------------------------


@pytest.fixture
def host() -> Iterator[GitHost]:
    with GitHost(token=TOKEN) as running:
        running.add_commit(SHA)
        running.add_issue(3)
        yield running


@pytest.mark.parametrize("flavor", ["github", "gitea", "gitlab"])
def test_the_token_never_appears_in_logs_errors_statuses_or_comments(
        host: GitHost, flavor: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    monkeypatch.setattr(host_api, "HTTP_TIMEOUT", httpx.Timeout(0.3))
    url = host.url + ("/api/v4" if flavor == "gitlab" else "")
    settings = StatusSettings(StatusProvider(flavor), url=url, repository="o/r")
    seen: list[str] = []

    good = make_publisher(settings, token=TOKEN, repo_dir=None)
    good.publish(CommitStatus(SHA, "gitray", State.PENDING, "planned"))
    good.publish(CommitStatus(SHA, "gitray", State.FAILURE, f"the token {TOKEN} leaked in a reason",
                              target_url=f"http://x/?t={TOKEN}"))
    host.fail("POST", "/statuses/", times=1, status=500)
    good.publish(CommitStatus(SHA, "gitray/a", State.ERROR, "API trouble"))
    host.hang("POST", "/statuses/", times=1, seconds=1.0)
    good.publish(CommitStatus(SHA, "gitray/b", State.ERROR, "API trouble"))
    good.flush(wait=False)
    bad = make_publisher(settings, token=TOKEN + "-wrong", repo_dir=None)
    bad.publish(CommitStatus(SHA, "gitray", State.SUCCESS, "ok"))
    seen.append(repr(bad.counts()))

    upsert_plan_comment(settings, TOKEN, 3, "apps", f"plan mentioning {TOKEN}?")
    for token, pr in ((TOKEN + "-wrong", 3), (TOKEN, 404)):
        with pytest.raises(StatusRejected) as info:
            upsert_plan_comment(settings, token, pr, "apps", "plan")
        seen.append(str(info.value))
        assert "\n" not in str(info.value)
    monkeypatch.setattr(host_comments, "RETRY_DELAYS_S", (0.01, 0.01))
    host.fail("GET", "/comments|/notes", times=3, status=500)
    with pytest.raises(TransientError) as transient:
        upsert_plan_comment(settings, TOKEN, 3, "apps", "plan")
    seen.append(str(transient.value))
    host.hang("GET", "/comments|/notes", times=3, seconds=1.0)
    with pytest.raises(TransientError) as timeout:
        upsert_plan_comment(settings, TOKEN, 3, "apps", "plan")
    seen.append(str(timeout.value))

    seen += [r.getMessage() for r in caplog.records]
    seen += [str(r.body) for r in host.requests]  # what the host stored and shows
    assert any("HTTP 401" in s for s in seen)
    assert any("timed out" in s for s in seen)
    assert any("HTTP 500" in s for s in seen)
    encoded = httpx.QueryParams({"t": TOKEN})["t"]
    for text in seen:
        assert TOKEN not in text
        assert "S3cretT0ken" not in text, text
        assert encoded not in text


def test_a_stale_lock_on_the_remote_notes_is_reported_not_merged_around(tmp_path: Path) -> None:
    import subprocess

    def git(*args: str, cwd: Path = tmp_path) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q", "--bare", "remote.git")
    work = tmp_path / "work"
    git("init", "-q", str(work))
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x",
        cwd=work)
    sha = git("rev-parse", "HEAD", cwd=work)
    lock = tmp_path / "remote.git" / "refs" / "notes" / "gitray.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()  # what a push that crashed leaves behind
    provider = GitNotesProvider(work, str(tmp_path / "remote.git"))
    status = CommitStatus(sha, "gitray", State.SUCCESS, "converged")
    with pytest.raises(TransientError, match=r"refs/notes/gitray is locked .*gitray\.lock"):
        provider.post(status)
    lock.unlink()
    assert provider.post(CommitStatus(sha, "gitray", State.FAILURE, "later")) is True


@pytest.mark.parametrize("flavor", ["github", "gitea", "gitlab"])
def test_a_plan_comment_survives_transient_errors_and_a_lost_answer_without_a_duplicate(
        host: GitHost, flavor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_api, "HTTP_TIMEOUT", httpx.Timeout(0.3))
    monkeypatch.setattr(host_comments, "RETRY_DELAYS_S", (0.01, 0.01))
    url = host.url + ("/api/v4" if flavor == "gitlab" else "")
    settings = StatusSettings(StatusProvider(flavor), url=url, repository="o/r")
    retries: list[tuple[str, float]] = []

    def retry(reason: str, delay: float) -> None:
        retries.append((reason, delay))

    # a 500 then a timed-out listing: the third attempt creates the comment
    host.fail("GET", "/comments|/notes", times=1, status=500)
    host.hang("GET", "/comments|/notes", times=1, seconds=1.0)
    assert upsert_plan_comment(settings, TOKEN, 3, "apps", "plan v1", on_retry=retry) == "created"
    assert [("HTTP 500" in r, "timed out" in r) for r, _ in retries] == [(True, False),
                                                                       (False, True)]
    # the host stored the write but its answer was lost: the retry finds it, no duplicate
    # (the retry waits longer than the host's hang, so the write is stored by then)
    monkeypatch.setattr(host_comments, "RETRY_DELAYS_S", (1.5, 1.5))
    host.hang("PUT" if flavor == "gitlab" else "PATCH", "/comments|/notes", times=1, seconds=1.0)
    host.hang("POST", "/comments|/notes", times=1, seconds=1.0)
    for path, body in (("apps", "plan v2"), ("etl", "plan E")):
        retries.clear()
        assert upsert_plan_comment(settings, TOKEN, 3, path, body, on_retry=retry) == "unchanged"
        assert len(retries) == 1
        mine = [c for c in host.comments(flavor, 3) if c["body"].startswith(marker_for(path))]
        assert len(mine) == 1 and body in mine[0]["body"]
    # a refusal is not retried
    retries.clear()
    with pytest.raises(StatusRejected):
        upsert_plan_comment(settings, TOKEN + "-wrong", 3, "apps", "plan", on_retry=retry)
    assert retries == []
