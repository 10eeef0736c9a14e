"""gitray.daemon.newer: while a pass waits on an upgrade, does a newer commit on the branch
supersede that workload's run? Real git (a bare remote, pushes); no cluster involved."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from gitray.core.model import ObjectKey
from gitray.daemon.newer import NewerCommit, Source
from gitray.engine.apply import desired_from
from gitray.git.source import fetch_branch, read_snapshot
from gitray.plans.load import LoadMemo
from gitray.plans.rayservice.planner import desired_hash
from testenv.manifests import dump, gitray_config
from testenv.rayservices import example_rayservice
from tests.integration.gitops import GitOpsRepo

NS = "team-a"
KEY = ObjectKey("RayService", NS, "serve-demo")


class Remote:
    def __init__(self, tmp_path: Path) -> None:
        self.bare = tmp_path / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.bare)],
                       check=True)
        self.work = GitOpsRepo(tmp_path / "work")
        self.work.git("remote", "add", "origin", str(self.bare))
        self.cache = tmp_path / "cache"

    def push(self, files: dict[str, str | None]) -> str:
        sha = self.work.commit("change", files)
        self.work.git("push", "-q", "origin", "main")
        return sha


class FakeTime:
    """Monotonic time the test moves (only the check's throttle reads it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _svc(image: str = "rayproject/ray:2.60.0") -> str:
    return dump(example_rayservice(NS, image=image))


def _start(remote: Remote, poke: threading.Event, clock: FakeTime,
           every_s: float = 5.0) -> tuple[NewerCommit, str]:
    """A pass of the branch's current head: its check, and the hash its run is planned for."""
    fetched = fetch_branch(f"file://{remote.bare}", "main", cache_dir=remote.cache)
    snapshot = read_snapshot(str(fetched.cache), fetched.sha)
    memo = LoadMemo()
    desired = desired_from(snapshot, {}, memo)
    (svc,) = [w for w in desired.workloads if w.key == KEY]
    source = Source(f"file://{remote.bare}", "main", remote.cache, {}, None)
    return NewerCommit(source, fetched.sha, snapshot, memo, every_s, poke, clock), \
        desired_hash(svc.spec)


def _setup(tmp_path: Path) -> tuple[Remote, threading.Event, FakeTime]:
    remote = Remote(tmp_path)
    remote.push({"gitray.yaml": gitray_config("10s", NS), "svc.yaml": _svc()})
    remote.push({"svc.yaml": _svc("localhost/gitray-ray:2.60.0")})  # the upgrade under way
    return remote, threading.Event(), FakeTime()


def test_a_revert_supersedes_the_run_once_the_poll_interval_has_passed(tmp_path: Path) -> None:
    remote, poke, clock = _setup(tmp_path)
    check, planned = _start(remote, poke, clock)
    assert check(KEY, planned) is None  # nothing new
    revert = remote.push({"svc.yaml": _svc()})
    clock.now += 4.9
    assert check(KEY, planned) is None  # not fetched yet: within the poll interval
    clock.now += 0.2
    reason = check(KEY, planned)
    assert reason == (f"Git moved on to {revert[:7]}, which wants another spec for "
                      f"RayService {NS}/serve-demo")


def test_a_webhook_makes_the_next_check_fetch_at_once(tmp_path: Path) -> None:
    remote, poke, clock = _setup(tmp_path)
    check, planned = _start(remote, poke, clock, every_s=3600)
    remote.push({"svc.yaml": _svc("localhost/gitray-ray:other")})
    assert check(KEY, planned) is None
    poke.set()
    assert check(KEY, planned) is not None
    assert not poke.is_set()


def test_a_newer_commit_that_leaves_the_spec_alone_supersedes_nothing(tmp_path: Path) -> None:
    remote, poke, clock = _setup(tmp_path)
    check, planned = _start(remote, poke, clock, every_s=0)
    remote.push({"README.md": "docs only\n"})
    assert check(KEY, planned) is None
    other = example_rayservice(NS, image="rayproject/ray:2.60.0")
    other["metadata"]["name"] = "another"
    remote.push({"other.yaml": dump(other)})  # another workload changes
    assert check(KEY, planned) is None
    assert check(ObjectKey("RayService", NS, "another"), "planned-for-something-else")


def test_an_invalid_or_removing_commit_supersedes_nothing(tmp_path: Path) -> None:
    """Its own pass refuses (invalid) or plans (removal) it; the upgrade under way finishes."""
    remote, poke, clock = _setup(tmp_path)
    check, planned = _start(remote, poke, clock, every_s=0)
    remote.push({"svc.yaml": _svc() + "  broken: [\n"})
    assert check(KEY, planned) is None
    remote.push({"svc.yaml": None})
    assert check(KEY, planned) is None
    remote.push({"svc.yaml": _svc()})  # valid again, and a revert: now it counts
    assert check(KEY, planned) is not None


def test_the_branch_moving_back_to_the_passs_own_commit_supersedes_nothing(
        tmp_path: Path) -> None:
    remote, poke, clock = _setup(tmp_path)
    check, planned = _start(remote, poke, clock, every_s=0)
    head = remote.work.git("rev-parse", "HEAD").strip()
    remote.push({"svc.yaml": _svc()})
    assert check(KEY, planned) is not None
    remote.work.git("push", "-q", "-f", "origin", f"{head}:main")
    assert check(KEY, planned) is None
