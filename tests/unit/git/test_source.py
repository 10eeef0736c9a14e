"""Reading snapshots from real Git repositories and directories (no fakes of git)."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gitray.core.credentials import redact_url as redact
from gitray.core.errors import SourceError
from gitray.core.snapshot import MAX_FILE_BYTES, RepoFile, Snapshot
from gitray.git.source import (
    default_cache_dir,
    fetch_branch,
    is_url,
    read_snapshot,
    resolve_revision,
)

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV},
        capture_output=True, text=True, check=True,
    )
    return result.stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def source_repo(tmp_path: Path) -> Path:
    """A real repository: ops/ holds manifests over two commits, tagged v1 at the first."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, {"README.md": "# repo\n", "ops/svc.yaml": "v: 1\n", "ops/sub/c.yml": "c: 1\n",
                  "top.yaml": "top: 1\n"}, "first")
    git(repo, "tag", "v1")
    commit(repo, {"ops/svc.yaml": "v: 2\n"}, "second")
    return repo


def contents(snapshot: Snapshot) -> dict[str, bytes | str | None]:
    return {f.path: f.data if f.problem is None else f.problem for f in snapshot.files}


def test_a_working_tree_is_read_as_it_is_on_disk(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": "a: 1\n", "d/b.yml": "b: 1\n", "notes.txt": "x",
                     ".git/config.yaml": "not: me\n", ".github/ci.yaml": "on: push\n"})
    snapshot = read_snapshot(str(tmp_path))
    assert snapshot.revision == "worktree"
    assert snapshot.label == f"{tmp_path} (working tree)"
    assert contents(snapshot) == {
        ".github/ci.yaml": b"on: push\n", "a.yaml": b"a: 1\n", "d/b.yml": b"b: 1\n",
    }


def test_a_working_tree_inside_git_mentions_head(source_repo: Path) -> None:
    (source_repo / "ops" / "svc.yaml").write_text("v: uncommitted\n")
    snapshot = read_snapshot(str(source_repo / "ops"))
    head = git(source_repo, "rev-parse", "--short=7", "HEAD")
    assert snapshot.revision == "worktree"
    assert snapshot.label.endswith(f"(working tree, HEAD {head} on main)")
    assert contents(snapshot) == {"svc.yaml": b"v: uncommitted\n", "sub/c.yml": b"c: 1\n"}


@pytest.mark.parametrize(
    ("make_link", "problem"),
    [
        pytest.param(lambda d: os.symlink("/etc/passwd", d / "passwd.yaml"),
                     "symlink to a path outside the repository", id="symlink to /etc/passwd"),
        pytest.param(lambda d: os.symlink("../../outside.yaml", d / "sub" / "up.yaml"),
                     "symlink to a path outside the repository", id="relative symlink upwards"),
        pytest.param(lambda d: os.mkfifo(d / "pipe.yaml"), "not a regular file",
                     id="a named pipe is not opened for reading"),
        pytest.param(lambda d: os.truncate(_touch(d / "big.yaml"), 50 * 1024 * 1024),
                     "file is 50.0 MiB, over the 4 MiB limit", id="a 50 MB file"),
    ],
)
def test_a_working_tree_file_that_must_not_be_read(
    tmp_path: Path, make_link: Callable[[Path], object], problem: str
) -> None:
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside.yaml").write_text("secret: 1\n")
    make_link(root)
    (only,) = read_snapshot(str(root)).files
    assert only.data is None
    assert only.problem == problem


def _touch(path: Path) -> Path:
    path.touch()
    return path


def test_a_symlinked_directory_is_not_walked(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, {"secret.yaml": "s: 1\n"})
    root = tmp_path / "repo"
    root.mkdir()
    os.symlink(outside, root / "linked")
    os.symlink(outside, root / "linked.yaml")
    assert read_snapshot(str(root)).files == ()


def test_a_symlink_inside_the_working_tree_is_followed(tmp_path: Path) -> None:
    write(tmp_path, {"real/a.yaml": "a: 1\n"})
    os.symlink("real/a.yaml", tmp_path / "link.yaml")
    assert contents(read_snapshot(str(tmp_path)))["link.yaml"] == b"a: 1\n"


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    (tmp_path / "edge.yaml").write_bytes(b"#" * MAX_FILE_BYTES)
    (only,) = read_snapshot(str(tmp_path)).files
    assert only.problem is None
    assert only.data is not None and len(only.data) == MAX_FILE_BYTES


@pytest.mark.parametrize(
    ("revision", "svc"),
    [
        pytest.param("HEAD", b"v: 2\n", id="HEAD"),
        pytest.param("HEAD~1", b"v: 1\n", id="HEAD~1"),
        pytest.param("main", b"v: 2\n", id="a branch"),
        pytest.param("v1", b"v: 1\n", id="a tag"),
    ],
)
def test_a_revision_is_read_under_a_subdirectory(
    source_repo: Path, revision: str, svc: bytes
) -> None:
    (source_repo / "ops" / "svc.yaml").write_text("v: dirty\n")  # never seen, never touched
    snapshot = read_snapshot(str(source_repo / "ops"), revision)
    sha = git(source_repo, "rev-parse", revision + "^{commit}")
    assert snapshot.revision == sha
    assert snapshot.label == f"{sha[:7]} ({revision})"
    assert contents(snapshot) == {"svc.yaml": svc, "sub/c.yml": b"c: 1\n"}
    assert (source_repo / "ops" / "svc.yaml").read_text() == "v: dirty\n"
    assert git(source_repo, "status", "--porcelain") == "M ops/svc.yaml"


def test_a_full_sha_and_resolve_revision(source_repo: Path) -> None:
    first = git(source_repo, "rev-parse", "HEAD~1")
    assert resolve_revision(str(source_repo / "ops"), "HEAD~1") == first
    assert read_snapshot(str(source_repo), first).revision == first


def test_symlinks_in_a_revision_resolve_inside_the_tree_only(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo, {"ops/real.yaml": "r: 1\n", "secret.yaml": "s: 1\n"})
    os.symlink("/etc/passwd", repo / "ops" / "passwd.yaml")
    os.symlink("real.yaml", repo / "ops" / "inside.yaml")
    os.symlink("../secret.yaml", repo / "ops" / "up.yaml")
    os.symlink("missing.yaml", repo / "ops" / "dangling.yaml")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "links")
    assert contents(read_snapshot(str(repo / "ops"), "HEAD")) == {
        "dangling.yaml": "symlink to a file that does not exist",
        "inside.yaml": b"r: 1\n",
        "passwd.yaml": "symlink to a path outside the repository",
        "real.yaml": b"r: 1\n",
        "up.yaml": "symlink to a path outside the repository",
    }


def test_a_big_blob_in_a_revision_is_not_read(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "big.yaml").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "big")
    assert read_snapshot(str(repo), "HEAD").files == (
        RepoFile("big.yaml", None, "file is 4.0 MiB, over the 4 MiB limit"),
    )


@pytest.mark.parametrize(
    ("where", "revision", "message"),
    [
        pytest.param("repo", "no-such-branch", "repo: unknown revision 'no-such-branch'",
                     id="an unknown revision"),
        pytest.param("repo", "--output=/tmp/x", "is not a revision", id="an option as revision"),
        pytest.param("plain", "HEAD", "plain: not inside a Git repository",
                     id="a revision of a directory outside Git"),
        pytest.param("missing", None, "missing: not a directory", id="a missing directory"),
        pytest.param("repo/gone", "HEAD", "directory 'gone' does not exist at",
                     id="a subdirectory missing at the revision"),
    ],
)
def test_source_errors_are_one_clear_line(
    source_repo: Path, where: str, revision: str | None, message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = source_repo.parent
    (base / "plain").mkdir()
    (source_repo / "gone").mkdir()
    monkeypatch.chdir(base)
    with pytest.raises(SourceError) as caught:
        read_snapshot(where, revision)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_url_is_cloned_into_a_bare_cache_and_fetched_again(
    source_repo: Path, tmp_path: Path
) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(source_repo), str(remote))
    cache = tmp_path / "cache"
    url = remote.as_uri()

    first = read_snapshot(url, cache_dir=cache)
    assert first.revision == git(source_repo, "rev-parse", "HEAD")
    assert first.label == f"{first.revision[:7]} (main)"
    assert contents(first)["ops/svc.yaml"] == b"v: 2\n"
    assert git(cache, "rev-parse", "--is-bare-repository") == "true"

    new = commit(source_repo, {"ops/svc.yaml": "v: 3\n"}, "third")
    git(source_repo, "push", "-q", str(remote), "main")
    again = read_snapshot(url, "origin/main", cache_dir=cache)
    assert again.revision == new
    assert contents(again)["ops/svc.yaml"] == b"v: 3\n"
    assert read_snapshot(url, "v1", cache_dir=cache).revision == git(source_repo, "rev-parse",
                                                                     "v1^{commit}")


def test_a_local_bare_repository_is_read_in_place(source_repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(source_repo), str(remote))
    snapshot = read_snapshot(str(remote), "HEAD~1")
    assert contents(snapshot)["ops/svc.yaml"] == b"v: 1\n"


def test_credentials_never_appear_in_errors_or_the_cache(tmp_path: Path) -> None:
    url = "https://robot:s3cr3t-t0ken@127.0.0.1:9/org/repo.git"  # nothing listens on port 9
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as caught:
        read_snapshot(url, cache_dir=cache)
    message = str(caught.value)
    assert message.startswith("cannot fetch https://***@127.0.0.1:9/org/repo.git: ")
    assert "s3cr3t" not in message and "robot" not in message
    for path in cache.rglob("*"):
        if path.is_file():
            assert b"s3cr3t" not in path.read_bytes(), path
    assert default_cache_dir(url) == default_cache_dir(url.replace("s3cr3t-t0ken", "other"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:pw@host/r.git", "https://***@host/r.git"),
        ("https://token@host/r.git", "https://***@host/r.git"),
        ("fatal: unable to access 'https://u:p@h/x/': refused", "fatal: unable to access "
         "'https://***@h/x/': refused"),
        ("ssh://git@host:22/r.git", "ssh://***@host:22/r.git"),
        ("https://host/r.git", "https://host/r.git"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("repo", "expected"),
    [("https://h/r.git", True), ("file:///srv/r.git", True), ("git@github.com:o/r.git", True),
     ("ssh://git@h/r", True), ("examples-repo", False), ("/abs/dir", False),
     ("./user@host:dir", False)],
)
def test_is_url(repo: str, expected: bool) -> None:
    assert is_url(repo) is expected


class _AuthRecorder(BaseHTTPRequestHandler):
    """A Git HTTP remote on loopback that wants Basic auth, and remembers what it was sent."""

    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization", ""))
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="gitray-test"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def auth_server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Recorder", (_AuthRecorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_url_credentials_reach_the_server_but_not_argv_errors_or_cache(
    auth_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    host, seen = auth_server
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as caught:
        read_snapshot(f"http://robot:s3cr3t%2Fx@{host}/org/repo.git", cache_dir=cache)
    expected = "Basic " + base64.b64encode(b"robot:s3cr3t/x").decode()
    assert expected in seen  # the credential helper handed them to git
    message = str(caught.value)
    assert message.startswith(f"cannot fetch http://***@{host}/org/repo.git: ")
    assert "s3cr3t" not in message
    for path in cache.rglob("*"):
        if path.is_file():
            assert b"s3cr3t" not in path.read_bytes(), path


def test_a_cache_dir_another_user_owns_still_works(source_repo: Path, tmp_path: Path) -> None:
    """`--cache-dir` is often a volume whose root another user owns (in deploy/, an emptyDir
    under fsGroup belongs to root while gitray runs as 10001). git refuses a repository there
    ("dubious ownership"), so gitray keeps its clone in a directory it creates itself."""
    assert os.geteuid() == 0, "this test chowns a directory to another user: run it as root"
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(source_repo), str(remote))
    url = remote.as_uri()
    # the premise: a repository at the root of a directory another user owns is refused
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    git(foreign, "init", "-q", "--bare")
    os.chown(foreign, 12345, 12345)
    refused = subprocess.run(["git", "-C", str(foreign), "rev-parse", "--git-dir"],
                             env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                             check=False)
    assert refused.returncode != 0 and "dubious ownership" in refused.stderr, refused
    # gitray with such a directory as --cache-dir
    volume = tmp_path / "volume"
    volume.mkdir()
    os.chown(volume, 12345, 12345)
    volume.chmod(0o777)
    cache = default_cache_dir(url, volume)
    assert cache.parent.parent == volume
    fetched = fetch_branch(url, "main", cache_dir=cache)
    assert fetched.sha == git(source_repo, "rev-parse", "HEAD")
    assert contents(read_snapshot(str(fetched.cache), fetched.sha))["ops/svc.yaml"] == b"v: 2\n"
