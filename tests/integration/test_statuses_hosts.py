"""Statuses and plan comments against the strict local Git host (testenv/githost), which enforces
GitHub's, Gitea's and GitLab's documented limits: a rollout posts each change once, descriptions
fit (GitHub 422s at 141 characters), GitLab's repeated-transition 400 is never triggered, and
500s, hangs and a bad token never reach the sync while the right status ends up on the commit.
Run with ``-s`` to see the request logs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from gitray.core.config import StatusProvider, StatusSettings
from gitray.core.errors import StatusRejected
from gitray.core.model import ObjectKey
from gitray.hosts import api as host_api
from gitray.hosts.comments import marker_for, upsert_plan_comment
from gitray.hosts.publisher import PublishCounts, StatusPublisher, make_publisher
from gitray.hosts.status import CommitStatus, State, context_for, step_description
from testenv.githost import GitHost, Request
from tests.clock import ManualClock

TOKEN = "glpat-Integration-S3cret"
SHA = "89abcdef0123456789abcdef0123456789abcdef"
PR = 12
SERVE_ERROR = (
    "Deploying app 'summarize' failed with exception:\nTraceback (most recent call last):\n"
    '  File "/home/ray/anaconda3/lib/python3.11/site-packages/ray/serve/_private/'
    'application_state.py", line 1034, in build_serve_application\n'
    "ModuleNotFoundError: No module named 'summarize_v2'" + " (details)" * 30
)
FLAVORS = ["github", "gitea", "gitlab"]


@pytest.fixture
def host() -> Iterator[GitHost]:
    with GitHost(token=TOKEN) as running:
        running.add_commit(SHA)
        running.add_issue(PR)
        yield running


def settings_for(host: GitHost, flavor: str) -> StatusSettings:
    url = host.url + ("/api/v4" if flavor == "gitlab" else "")
    return StatusSettings(StatusProvider(flavor), url=url, repository="team/ray-apps")


def status_posts(host: GitHost) -> list[Request]:
    return [r for r in host.log("POST") if "/statuses/" in r.path]


def show(title: str, requests: list[Request]) -> None:
    print(f"\n--- {title}")
    for request in requests:
        print(f"  {request}")


def assert_no_repeats(posts: list[Request]) -> None:
    """No context receives the same state and description twice in a row."""
    last: dict[str, tuple[str, str]] = {}
    for post in posts:
        context = post.body.get("context") or post.body.get("name")
        value = (post.body["state"], post.body.get("description", ""))
        assert last.get(context) != value, f"repeated: {post}"
        last[context] = value


def rollout(publisher: StatusPublisher, *, fail: bool = False) -> None:
    """What the daemon publishes for one commit across several polls (with repeats)."""
    overall = context_for("gitray", None)
    workload = context_for("gitray", ObjectKey("RayService", "ml", "summarize"))
    steps = ["create cluster summarize-x7k2q", "deploy serve config", "switch traffic"]
    for _ in range(2):  # two polls see the same plan
        publisher.publish(CommitStatus(SHA, overall, State.PENDING, "planned: 3 steps"))
        publisher.publish(CommitStatus(SHA, workload, State.PENDING, "planned: 3 steps"))
    for k, step in enumerate(steps, start=1):
        for _ in range(2):  # a step seen by two polls
            publisher.publish(CommitStatus(SHA, workload, State.PENDING,
                                           step_description(k, 3, step)))
        if fail and k == 2:
            for _ in range(3):
                publisher.publish(CommitStatus(SHA, workload, State.FAILURE, SERVE_ERROR))
                publisher.publish(CommitStatus(SHA, overall, State.FAILURE,
                                               "1 of 1 workloads failed"))
            return
    for _ in range(3):
        publisher.publish(CommitStatus(SHA, workload, State.SUCCESS, "converged at 89abcdef"))
        publisher.publish(CommitStatus(SHA, overall, State.SUCCESS, "1 workload converged"))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_rollout_posts_each_change_once(host: GitHost, flavor: str) -> None:
    publisher = make_publisher(settings_for(host, flavor), token=TOKEN, repo_dir=None)
    rollout(publisher)
    posts = status_posts(host)
    show(f"{flavor}: one rollout", host.requests)
    assert_no_repeats(posts)
    assert all(r.status == 201 for r in posts)
    final = {(p.body.get("context") or p.body.get("name")): p.body["state"] for p in posts}
    assert final == {"gitray": "success", "gitray/ml/RayService/summarize": "success"}
    counts = publisher.counts()
    assert counts.failed == 0
    assert counts.posted == len(posts)
    if flavor == "gitlab":  # running keeps its first description: step 2 and 3 are skipped
        assert [p.body["state"] for p in posts if p.body["name"] != "gitray"] == [
            "pending", "running", "success"]
    else:
        assert len(posts) == 2 + 3 + 2


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_failed_rollout_carries_ray_message_within_the_limit(host: GitHost,
                                                               flavor: str) -> None:
    publisher = make_publisher(settings_for(host, flavor), token=TOKEN, repo_dir=None)
    rollout(publisher, fail=True)
    posts = status_posts(host)
    assert_no_repeats(posts)
    failure = [p for p in posts if p.body["state"] in ("failure", "failed")
               and "summarize" in (p.body.get("context") or p.body.get("name"))]
    assert len(failure) == 1
    description = failure[0].body["description"]
    limit = {"github": 140, "gitea": 1024, "gitlab": 255}[flavor]
    assert len(description) <= limit
    assert description.startswith("Deploying app 'summarize' failed with exception:")
    assert "\n" not in description
    assert failure[0].status == 201
    if flavor == "github":
        assert len(description) == 140
        show("github: failure trimmed to 140", [failure[0]])


def test_github_refuses_141_characters_and_the_publisher_sends_140(host: GitHost) -> None:
    raw = httpx.post(f"{host.url}/repos/team/ray-apps/statuses/{SHA}",
                     headers={"Authorization": f"Bearer {TOKEN}"},
                     json={"state": "failure", "context": "gitray", "description": "x" * 141})
    assert raw.status_code == 422
    assert "maximum is 140" in raw.text
    publisher = make_publisher(settings_for(host, "github"), token=TOKEN, repo_dir=None)
    assert publisher.publish(CommitStatus(SHA, "gitray", State.FAILURE, "x" * 141))
    assert len(status_posts(host)[-1].body["description"]) == 140
    assert status_posts(host)[-1].status == 201


def test_gitlab_refuses_a_repeated_transition_and_the_publisher_never_triggers_it(
        host: GitHost) -> None:
    url = f"{host.url}/api/v4/projects/team%2Fray-apps/statuses/{SHA}"
    headers = {"PRIVATE-TOKEN": TOKEN}
    body = {"state": "running", "name": "probe", "description": "step 1/2: a"}
    assert httpx.post(url, headers=headers, json=body).status_code == 201
    again = httpx.post(url, headers=headers, json=body | {"description": "step 2/2: b"})
    assert again.status_code == 400
    assert "Cannot transition status" in again.text

    publisher = make_publisher(settings_for(host, "gitlab"), token=TOKEN, repo_dir=None)
    for _ in range(2):
        rollout(publisher)
        # a second publisher (another replica after failover) repeats the same rollout
        publisher = make_publisher(settings_for(host, "gitlab"), token=TOKEN, repo_dir=None)
    ours = [r for r in status_posts(host) if r.body.get("name") != "probe"]
    show("gitlab: two rollouts by two replicas", ours)
    assert [r.status for r in ours if r.status >= 400] == []
    assert_no_repeats(ours)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_server_errors_are_retried_until_the_status_is_there(host: GitHost,
                                                              flavor: str) -> None:
    clock = ManualClock(0.0)
    settings = settings_for(host, flavor)
    publisher = make_publisher(settings, token=TOKEN, repo_dir=None)
    publisher = StatusPublisher(publisher.provider, clock=clock, secrets=[TOKEN])
    host.fail("POST", "/statuses/", times=2, status=500)
    wanted = CommitStatus(SHA, "gitray", State.SUCCESS, "1 workload converged")
    assert publisher.publish(wanted) is False  # never raises
    for _ in range(5):
        clock.now += 60
        publisher.flush()
    posts = status_posts(host)
    show(f"{flavor}: two 500s then success", posts)
    assert [r.status for r in posts] == [500, 500, 201]
    assert publisher.counts().posted == 1
    assert publisher.counts().failed == 0
    assert publisher.pending() == 0


@pytest.mark.parametrize("flavor", ["github", "gitea"])
def test_a_hanging_host_is_bounded_and_a_late_post_is_not_repeated(
        host: GitHost, flavor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_api, "HTTP_TIMEOUT", httpx.Timeout(0.5))
    clock = ManualClock(0.0)
    provider = make_publisher(settings_for(host, flavor), token=TOKEN, repo_dir=None).provider
    publisher = StatusPublisher(provider, clock=clock)
    publisher.publish(CommitStatus(SHA, "gitray", State.PENDING, "planned: 1 step"))
    host.hang("POST", "/statuses/", times=1, seconds=1.0)
    started = time.monotonic()
    assert publisher.publish(CommitStatus(SHA, "gitray", State.SUCCESS, "converged")) is False
    assert time.monotonic() - started < 1.0  # bounded by the client timeout
    time.sleep(1.2)  # the hung request lands after the client gave up
    clock.now += 60
    assert publisher.flush() == 0
    posts = status_posts(host)
    show(f"{flavor}: a hang, then the retry reads first", host.requests)
    assert [p.body["state"] for p in posts] == ["pending", "success"]
    assert publisher.counts().deduplicated == 1


def test_gitlab_hanging_then_recovering(host: GitHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_api, "HTTP_TIMEOUT", httpx.Timeout(0.5))
    clock = ManualClock(0.0)
    provider = make_publisher(settings_for(host, "gitlab"), token=TOKEN, repo_dir=None).provider
    publisher = StatusPublisher(provider, clock=clock)
    host.hang("GET", "/statuses", times=2, seconds=1.0)
    started = time.monotonic()
    assert publisher.publish(CommitStatus(SHA, "gitray", State.SUCCESS, "converged")) is False
    assert time.monotonic() - started < 1.0
    for _ in range(3):
        clock.now += 60
        publisher.flush()
    assert [p.body["state"] for p in status_posts(host)] == ["success"]
    assert publisher.pending() == 0


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_bad_token_is_logged_once_not_retried(host: GitHost, flavor: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    publisher = make_publisher(settings_for(host, flavor), token="wrong", repo_dir=None)
    assert publisher.publish(CommitStatus(SHA, "gitray", State.SUCCESS, "ok")) is False
    assert publisher.flush() == 0
    assert publisher.counts().failed == 1
    assert len(host.requests) == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "gitray.statuses"]
    assert len(messages) == 1
    assert "HTTP 401" in messages[0]
    assert "\n" not in messages[0]


def test_an_unknown_commit_is_rejected_not_retried(host: GitHost) -> None:
    publisher = make_publisher(settings_for(host, "github"), token=TOKEN, repo_dir=None)
    assert publisher.publish(CommitStatus("f" * 40, "gitray", State.SUCCESS, "ok")) is False
    assert publisher.pending() == 0
    assert publisher.counts().failed == 1


# -- plan comments -------------------------------------------------------------------------------


def seed_foreign_comments(host: GitHost, flavor: str, n: int) -> None:
    for i in range(n):
        host.store.comments.append({"id": host._new_id(), "issue": PR, "flavor": flavor,
                                    "body": f"LGTM {i}", "user": {"login": "someone"}})


@pytest.mark.parametrize("flavor", FLAVORS)
def test_one_plan_comment_per_path_is_kept_up_to_date(host: GitHost, flavor: str) -> None:
    settings = settings_for(host, flavor)
    seed_foreign_comments(host, flavor, 150)  # ours lands beyond the first page
    results = [
        upsert_plan_comment(settings, TOKEN, PR, "apps/ml", "plan A"),
        upsert_plan_comment(settings, TOKEN, PR, "apps/ml", "plan A"),
        upsert_plan_comment(settings, TOKEN, PR, "apps/etl", "plan E"),
    ]
    seed_foreign_comments(host, flavor, 120)
    results.append(upsert_plan_comment(settings, TOKEN, PR, "apps/ml", "plan B"))
    assert results == ["created", "unchanged", "created", "updated"]
    ours = [c for c in host.comments(flavor, PR) if c["body"].startswith("<!-- gitray-plan:")]
    assert sorted(c["body"].splitlines()[0] for c in ours) == [
        marker_for("apps/etl"), marker_for("apps/ml")]
    ml = next(c for c in ours if c["body"].startswith(marker_for("apps/ml")))
    assert ml["body"] == f"{marker_for('apps/ml')}\nplan B\n"
    writes = [r for r in host.requests if r.method in ("POST", "PATCH", "PUT")]
    show(f"{flavor}: comment writes", writes)
    assert [r.method for r in writes] == ["POST", "POST",
                                          "PUT" if flavor == "gitlab" else "PATCH"]


def test_a_plan_longer_than_github_allows_is_truncated(host: GitHost) -> None:
    settings = settings_for(host, "github")
    assert upsert_plan_comment(settings, TOKEN, PR, ".", "~ line\n" * 20000) == "created"
    body = host.comments("github", PR)[0]["body"]
    assert len(body) <= 65536
    assert body.endswith("(plan truncated: see `gitray plan` output for the rest)\n")


def test_a_missing_pull_request_is_one_clear_line(host: GitHost) -> None:
    with pytest.raises(StatusRejected) as info:
        upsert_plan_comment(settings_for(host, "gitlab"), TOKEN, 999, ".", "plan")
    assert "HTTP 404" in str(info.value)
    assert "!999" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_replica_with_fresh_memory_does_not_repeat_what_the_host_shows(
        host: GitHost, flavor: str) -> None:
    first = make_publisher(settings_for(host, flavor), token=TOKEN, repo_dir=None)
    rollout(first)
    before = len(status_posts(host))
    # after a failover the new leader re-publishes the commit's current statuses
    replica = make_publisher(settings_for(host, flavor), token=TOKEN, repo_dir=None)
    workload = context_for("gitray", ObjectKey("RayService", "ml", "summarize"))
    for _ in range(2):
        replica.publish(CommitStatus(SHA, workload, State.SUCCESS, "converged at 89abcdef"))
        replica.publish(CommitStatus(SHA, "gitray", State.SUCCESS, "1 workload converged"))
    assert len(status_posts(host)) == before
    assert replica.counts() == PublishCounts(deduplicated=4)
