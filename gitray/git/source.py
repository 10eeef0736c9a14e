"""Reading a repository revision into a ``Snapshot``: the Git and filesystem side. Does I/O.

Three sources, one result (``gitray.plans.load.Snapshot``, paths relative to the directory asked
for):

- a local directory, no revision: its working tree, as it is on disk (need not be a Git repo);
- a local directory and a revision: the tree of that commit under that directory, read from the
  object database of the enclosing repository (the work tree is never touched);
- a URL (``https://``, ``ssh://``, ``git@host:path``, ``file://``): fetched into a bare cache
  (``~/.cache/gitray/repos/<hash>``), then read like the above; a local bare repository is read
  in place.

Nothing outside the directory is read: symlinks are resolved and refused when they leave it, and
files over the size limits are listed with a ``problem`` instead of being read. Credentials in
http(s) URLs reach git only through its environment (``gitray.core.credentials``): never argv,
the cache's config, logs or error messages. Signatures and ancestry: ``gitray.git.signing``.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from gitray.core.credentials import git_auth, redact_url
from gitray.core.errors import SourceError
from gitray.core.snapshot import (
    MANIFEST_SUFFIXES,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_TOTAL_BYTES,
    RepoFile,
    Snapshot,
    is_manifest_name,
)

__all__ = [
    "WORKTREE",
    "Fetched",
    "default_cache_dir",
    "fetch_branch",
    "is_url",
    "read_snapshot",
    "read_staged",
    "resolve_revision",
]

WORKTREE = "worktree"
# The loader enforces its limits on the files in scope; these bound what is read at all.
READ_MAX_FILES = 4 * MAX_FILES
READ_MAX_BYTES = 2 * MAX_TOTAL_BYTES
FETCH_TIMEOUT_S = 300
_SYMLINK_HOPS = 8
_SUFFIXES = tuple(suffix.encode() for suffix in MANIFEST_SUFFIXES)
_MODE_SYMLINK = 0o120000
_SCP_LIKE = re.compile(r"^[\w.+-]+@[\w.-]+:(?!//)")


def is_url(repo: str) -> bool:
    return "://" in repo or bool(_SCP_LIKE.match(repo))


def default_cache_dir(url: str, root: Path | None = None) -> Path:
    """Where the bare clone of ``url`` lives: ``<root>/repos/<digest>``, ``root`` being
    ``--cache-dir`` or ``~/.cache/gitray``. Always a directory gitray creates itself: git
    refuses a repository owned by another user ("dubious ownership"), and a mounted volume's
    root (an emptyDir under ``fsGroup``) belongs to root."""
    digest = hashlib.sha256(redact_url(url).encode()).hexdigest()[:16]
    return (root or Path.home() / ".cache" / "gitray") / "repos" / digest


def read_snapshot(
    repo: str, revision: str | None = None, *, cache_dir: Path | None = None,
    previous: Snapshot | None = None,
) -> Snapshot:
    """The files of ``repo`` at ``revision`` (None: the working tree, or a remote's HEAD).

    ``previous``: a snapshot read before (e.g. the last revision synced); a file whose blob id
    it already holds is not read again, so a revision that changed one file reads one blob.
    """
    reuse = previous.blob_data() if previous is not None else {}
    if is_url(repo):
        bare = _fetch(repo, cache_dir or default_cache_dir(repo))
        # the cache holds the remote's branches as local ones: "origin/main" is "main" there
        wanted = (revision or _head_branch(bare)).removeprefix("origin/")
        return _read_revision(bare, "", wanted, redact_url(repo), reuse)
    directory = Path(repo)
    if not directory.is_dir():
        raise SourceError(f"{repo}: not a directory (give a repository directory or a URL)")
    bare_repo = _open_bare(directory)
    if bare_repo is not None:
        return _read_revision(bare_repo, "", revision or "HEAD", repo, reuse)
    if revision is None:
        return _read_worktree(directory, repo)
    found = _enclosing_repo(directory, repo)
    top = Path(found.working_tree_dir or directory).resolve()
    prefix = directory.resolve().relative_to(top).as_posix()
    return _read_revision(found, "" if prefix == "." else prefix, revision, repo, reuse)


@dataclass(frozen=True)
class Fetched:
    """A remote fetched into its bare cache, and the commit its branch points at."""

    cache: Path
    sha: str
    branch: str


def fetch_branch(url: str, branch: str | None = None, *,
                 cache_dir: Path | None = None) -> Fetched:
    """Fetch ``url`` into its bare cache and resolve ``branch`` (None: the remote's HEAD).

    Cheap when nothing changed (one ``git fetch``); read the commit afterwards with
    ``read_snapshot(str(fetched.cache), fetched.sha)``, which does not fetch again."""
    cache = cache_dir or default_cache_dir(url)
    bare = _fetch(url, cache)
    wanted = (branch or _head_branch(bare)).removeprefix("origin/")
    return Fetched(cache, _commit(bare, wanted, redact_url(url)).hexsha, wanted)


def resolve_revision(repo: str, revision: str) -> str:
    """The full commit SHA ``revision`` names in the local repository ``repo``."""
    directory = Path(repo)
    if not directory.is_dir():
        raise SourceError(f"{repo}: not a directory")
    found = _open_bare(directory) or _enclosing_repo(directory, repo)
    return _commit(found, revision, repo).hexsha


# -- working tree ---------------------------------------------------------------------------


@dataclass
class _Budget:
    files: int = 0
    size: int = 0
    blobs_read: int = 0  # blobs whose bytes came from Git (not reused)

    def refuse(self, size: int) -> str | None:
        if self.files >= READ_MAX_FILES:
            return f"not read: more than {READ_MAX_FILES} YAML files in the repository"
        if self.size + size > READ_MAX_BYTES:
            return f"not read: the repository's YAML files exceed {_mib(READ_MAX_BYTES)}"
        self.files += 1
        self.size += size
        return None


def _read_worktree(directory: Path, shown: str) -> Snapshot:
    root = os.path.realpath(directory)
    files: list[RepoFile] = []
    budget = _Budget()
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            if not is_manifest_name(name):
                continue
            full = os.path.join(current, name)
            relative = Path(os.path.relpath(full, root)).as_posix()
            files.append(_read_file(root, full, relative, budget))
    files.sort(key=lambda f: f.path)
    return Snapshot(WORKTREE, _worktree_label(directory, shown), tuple(files))


def _read_file(root: str, full: str, relative: str, budget: _Budget) -> RepoFile:
    target = full
    if os.path.islink(full):
        target = os.path.realpath(full)
        if os.path.commonpath([root, target]) != root:
            return RepoFile(relative, None, "symlink to a path outside the repository")
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        return RepoFile(relative, None, f"cannot be opened: {err.strerror or err}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return RepoFile(relative, None, "not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            return RepoFile(relative, None, _too_big(info.st_size))
        refused = budget.refuse(info.st_size)
        if refused:
            return RepoFile(relative, None, refused)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:  # it grew while we looked
            return RepoFile(relative, None, _too_big(len(data)))
        return RepoFile(relative, data)
    finally:
        os.close(fd)


def _worktree_label(directory: Path, shown: str) -> str:
    name = shown.rstrip("/") or shown
    try:
        found = git.Repo(directory, search_parent_directories=True)
        head = found.head.commit.hexsha[:7]
        branch = "" if found.head.is_detached else f" on {found.active_branch.name}"
        return f"{name} (working tree, HEAD {head}{branch})"
    except (InvalidGitRepositoryError, NoSuchPathError, ValueError, TypeError, GitCommandError):
        return f"{name} (working tree)"


# -- a revision -----------------------------------------------------------------------------


def _open_bare(directory: Path) -> git.Repo | None:
    if not (directory / "HEAD").is_file() or not (directory / "objects").is_dir():
        return None
    try:
        found = git.Repo(directory)
    except (InvalidGitRepositoryError, NoSuchPathError):
        return None
    return found if found.bare else None


def _enclosing_repo(directory: Path, shown: str) -> git.Repo:
    try:
        return git.Repo(directory, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError) as e:
        raise SourceError(
            f"{shown}: not inside a Git repository, so a revision cannot be read "
            "(leave out --revision to read the files on disk)"
        ) from e


def _commit(found: git.Repo, revision: str, shown: str) -> git.Commit:
    if revision.startswith("-") or "\x00" in revision:
        raise SourceError(f"{shown}: {revision!r} is not a revision")
    try:
        commit = found.commit(revision)
    except (git.BadName, ValueError, GitCommandError, IndexError) as e:
        raise SourceError(f"{redact_url(shown)}: unknown revision {revision!r}") from e
    return commit


def _read_revision(found: git.Repo, prefix: str, revision: str, shown: str,
                   reuse: dict[str, bytes]) -> Snapshot:
    commit = _commit(found, revision, shown)
    files, blobs_read = _read_tree(found, commit.tree, prefix, shown, commit.hexsha[:7], reuse)
    label = f"{commit.hexsha[:7]} ({revision})"
    return Snapshot(commit.hexsha, label, files, blobs_read=blobs_read)


def read_staged(repo: str) -> Snapshot:
    """The files staged in the index of the Git repository enclosing the directory ``repo``
    (under it), exactly as the next commit would hold them: for a pre-commit hook. The index
    is written as a tree (``git write-tree``, what committing does first); nothing else."""
    directory = Path(repo)
    if not directory.is_dir():
        raise SourceError(f"{repo}: not a directory")
    found = _enclosing_repo(directory, repo)
    top = Path(found.working_tree_dir or directory).resolve()
    prefix = directory.resolve().relative_to(top).as_posix()
    try:
        sha = found.git.write_tree()
    except GitCommandError as e:
        raise SourceError(f"{repo}: the staged files cannot be read: "
                          f"{_git_reason(e, repo)}") from e
    files, blobs_read = _read_tree(found, found.tree(sha), "" if prefix == "." else prefix,
                                   repo, "the index", {})
    return Snapshot(WORKTREE, f"{repo.rstrip('/') or repo} (staged)", files,
                    blobs_read=blobs_read)


def _read_tree(found: git.Repo, root: git.Tree, prefix: str, shown: str, where: str,
               reuse: dict[str, bytes]) -> tuple[tuple[RepoFile, ...], int]:
    if prefix:
        try:
            top = root / prefix
        except KeyError as e:
            raise SourceError(f"{shown}: directory {prefix!r} does not exist at {where}") from e
        if top.type != "tree":
            raise SourceError(f"{shown}: {prefix!r} is not a directory at {where}")
    tree = _Tree(_ls_tree(found, root.hexsha, prefix, shown), prefix)
    files: list[RepoFile] = []
    budget = _Budget()
    for path, entry in tree.manifests():
        if entry.kind == "blob":
            files.append(_read_entry(found, tree, path, entry, budget, reuse))
    files.sort(key=lambda f: f.path)
    return tuple(files), budget.blobs_read


@dataclass(frozen=True)
class _Entry:
    mode: int
    kind: str  # "blob", "tree" or "commit" (a submodule)
    sha: str
    size: int  # -1 unless a blob


def _ls_tree(found: git.Repo, sha: str, prefix: str, shown: str) -> list[bytes]:
    """The records of every entry under ``prefix`` at commit ``sha`` (trees too): one
    ``git ls-tree`` gives ids, modes and sizes without a request per object."""
    args = ["git", "ls-tree", "-r", "-t", "-l", "-z", "--full-tree", sha]
    if prefix:
        args += ["--", f"{prefix}/"]
    try:
        raw = found.git.execute(args, stdout_as_string=False)
    except GitCommandError as e:
        raise SourceError(f"{redact_url(shown)}: cannot list {sha[:7]}: "
                          f"{_git_reason(e, shown)}") from e
    assert isinstance(raw, bytes)
    return [record for record in raw.split(b"\0") if record]


class _Tree:
    """``ls-tree`` records by path relative to the prefix. Only manifest-named entries are
    decoded up front (a repository may hold many other files); the full index is built only
    when a symlink needs resolving."""

    def __init__(self, records: list[bytes], prefix: str) -> None:
        self._records = records
        self._cut = len(prefix) + 1 if prefix else 0
        self._index: dict[str, _Entry] | None = None

    def _parse(self, record: bytes) -> tuple[str, _Entry]:
        head, _, name = record.partition(b"\t")
        mode, kind, object_id, size = head.split()
        return (name.decode("utf-8", "replace")[self._cut:],
                _Entry(int(mode, 8), kind.decode(), object_id.decode(),
                       int(size) if size != b"-" else -1))

    def manifests(self) -> list[tuple[str, _Entry]]:
        found = []
        for record in self._records:
            if record.lower().endswith(_SUFFIXES):
                path, entry = self._parse(record)
                if is_manifest_name(path):
                    found.append((path, entry))
        return found

    def get(self, path: str) -> _Entry | None:
        if self._index is None:
            self._index = dict(self._parse(record) for record in self._records)
        return self._index.get(path)


def _blob_bytes(found: git.Repo, sha: str) -> bytes:
    data: bytes = found.odb.stream(bytes.fromhex(sha)).read()
    return data


def _read_entry(found: git.Repo, tree: _Tree, relative: str, entry: _Entry,
                budget: _Budget, reuse: dict[str, bytes]) -> RepoFile:
    seen, path = 0, relative
    while entry.mode == _MODE_SYMLINK:
        seen += 1
        if seen > _SYMLINK_HOPS:
            return RepoFile(relative, None, "too many levels of symlinks")
        if entry.size > 4096:
            return RepoFile(relative, None, "symlink to a path outside the repository")
        link = _blob_bytes(found, entry.sha).decode("utf-8", "replace")
        target = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
        if link.startswith("/") or target == ".." or target.startswith("../"):
            return RepoFile(relative, None, "symlink to a path outside the repository")
        resolved = tree.get(target)
        if resolved is None:
            return RepoFile(relative, None, "symlink to a file that does not exist")
        if resolved.kind != "blob":
            return RepoFile(relative, None, "symlink to something that is not a file")
        entry, path = resolved, target
    known = reuse.get(entry.sha)
    size = len(known) if known is not None else entry.size
    if size > MAX_FILE_BYTES:
        return RepoFile(relative, None, _too_big(size))
    refused = budget.refuse(size)
    if refused:
        return RepoFile(relative, None, refused)
    if known is None:
        budget.blobs_read += 1
        known = _blob_bytes(found, entry.sha)
    return RepoFile(relative, known, blob=entry.sha)


# -- remote ---------------------------------------------------------------------------------


def _fetch(url: str, cache: Path) -> git.Repo:
    """A bare cache of ``url`` with its branches and tags up to date; HEAD = remote HEAD."""
    shown = redact_url(url)
    # credentials reach git through its environment only (gitray.core.credentials)
    auth = git_auth(url)
    clean, env, helper = auth.url, auth.env, auth.args
    try:
        if _open_bare(cache) is None:
            cache.mkdir(parents=True, exist_ok=True)
            found = git.Repo.init(cache, bare=True)
        else:
            found = git.Repo(cache)
        found.git.execute(
            ["git", *helper, "fetch", "--prune", "--tags", "--force", "--", clean,
             "+refs/heads/*:refs/heads/*"],
            env=env,
            kill_after_timeout=FETCH_TIMEOUT_S,
        )
        head = str(
            found.git.execute(
                ["git", *helper, "ls-remote", "--symref", "--", clean, "HEAD"],
                env=env,
                kill_after_timeout=FETCH_TIMEOUT_S,
            )
        )
    except GitCommandError as err:
        # Not chained: git's own message may repeat the URL with its credentials; the
        # reason kept is redacted.
        raise SourceError(f"cannot fetch {shown}: {_git_reason(err, url)}") from None
    except OSError as err:
        raise SourceError(f"cannot fetch {shown}: {err.strerror or err}") from err
    match = re.search(r"^ref: (refs/heads/\S+)\s+HEAD", head, re.MULTILINE)
    if match:
        found.git.symbolic_ref("HEAD", match.group(1))
    return found


def _head_branch(found: git.Repo) -> str:
    try:
        return str(found.head.reference.name)
    except (TypeError, ValueError):
        return "HEAD"


def _git_reason(err: GitCommandError, url: str) -> str:
    text = err.stderr if isinstance(err.stderr, str) else str(err.stderr or "")
    lines = [
        line.strip().removeprefix("stderr:").strip(" '")
        for line in text.splitlines()
        if line.strip()
    ]
    reason = next((line for line in lines if line.startswith("fatal:")), lines[-1] if lines else "")
    reason = redact_url(reason.replace(url, redact_url(url))) or f"git exited with {err.status}"
    return reason.removeprefix("fatal: ")


def _too_big(size: int) -> str:
    return f"file is {size / (1024 * 1024):.1f} MiB, over the {_mib(MAX_FILE_BYTES)} limit"


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB".replace(".0 MiB", " MiB")
