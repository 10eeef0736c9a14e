"""Benchmark 5 — Git: the poll's cost on a big repository, with and without a new commit.

A bare remote generated with ``git fast-import``: ``commits`` commits over ``files`` files
in 50 directories (up to 5,000 files: 4/5 YAML ConfigMaps, 1/5 other files; above that 1/5
YAML — 4,000 of 20,000 — as gitray reads at most 5,000 YAML files), every commit after the
first changing one file. The daemon's poll is ``fetch_branch`` (git fetch + ls-remote into a
bare cache); on a new commit it reads the revision (``read_snapshot``, given the snapshot of
the revision before: only blobs it does not hold are read) and loads it (``load_snapshot``:
parse + validate, with the per-file memo keyed by blob id). Measured in this process, as the
daemon calls them:

- first fetch into an empty cache (a clone);
- ``fetch_branch`` with nothing new (``reps`` times);
- one new commit changing one file, pushed to the remote: ``fetch_branch``, then
  ``read_snapshot`` of the new revision cold and with the previous snapshot (and how many
  blobs that read), then ``load_snapshot`` cold and with the memo (``reps`` times);
- for comparison, what detecting only the changed paths costs: ``git diff-tree`` between the
  two commits.

Run at two repository sizes to show what the cost scales with.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import OUT, git, say

DIRS = 50


def _configmap(i: int, version: int) -> bytes:
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:05d}\n"
            f"  namespace: bench-{i % 10:02d}\ndata:\n  version: \"{version}\"\n"
            f"  payload: \"{'x' * 200}\"\n").encode()


def _other(i: int, version: int) -> bytes:
    return f"# notes {i} v{version}\n{'y' * 300}\n".encode()


def _is_yaml(i: int, files: int) -> bool:
    return i % 5 != 4 if files <= 5000 else i % 5 == 0


def _path(i: int, files: int) -> str:
    ext = "yaml" if _is_yaml(i, files) else "md"
    return f"d{i % DIRS:02d}/f{i:05d}.{ext}"


def _content(i: int, version: int, files: int) -> bytes:
    return _configmap(i, version) if _is_yaml(i, files) else _other(i, version)


def _data(b: bytes) -> bytes:
    return b"data %d\n" % len(b) + b + b"\n"


def generate(bare: Path, commits: int, files: int, start: int = 1_700_000_000) -> float:
    """A bare repository with ``commits`` commits over ``files`` files; returns seconds."""
    if bare.exists():
        shutil.rmtree(bare)
    t0 = time.monotonic()
    git(bare.parent, "init", "-q", "--bare", "-b", "main", str(bare))
    chunks: list[bytes] = []
    config = (b"apiVersion: gitray.io/v1alpha1\nkind: Config\nallowedNamespaces: ['bench-*']\n"
              b"instance: bench-git\n")
    versions = [0] * files
    for c in range(commits):
        head = b"commit refs/heads/main\nmark :%d\n" % (c + 1)
        head += b"committer bench <bench@gitray.io> %d +0000\n" % (start + c)
        head += _data(b"commit %d" % c)
        if c:
            head += b"from :%d\n" % c
        chunks.append(head)
        if c == 0:
            chunks.append(b"M 100644 inline gitray.yaml\n" + _data(config))
            for i in range(files - 1):
                chunks.append(f"M 100644 inline {_path(i, files)}\n".encode()
                              + _data(_content(i, 0, files)))
        else:
            i = (c * 7919) % (files - 1)
            versions[i] += 1
            chunks.append(f"M 100644 inline {_path(i, files)}\n".encode()
                          + _data(_content(i, versions[i], files)))
        chunks.append(b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=bare, input=b"".join(chunks),
                   check=True)
    git(bare, "repack", "-adq")
    return time.monotonic() - t0


def add_commit(bare: Path, n: int, files: int) -> str:
    """One more commit on main changing one YAML file (fast-import, straight into the
    remote)."""
    i = (n * 104729) % (files - 1)
    while not _is_yaml(i, files):
        i = (i + 1) % (files - 1)
    stream = (b"commit refs/heads/main\n"
              + b"committer bench <bench@gitray.io> %d +0000\n" % int(time.time())
              + _data(b"poll %d" % n) + b"from refs/heads/main^0\n"
              + f"M 100644 inline {_path(i, files)}\n".encode()
              + _data(_content(i, 10_000 + n, files))
              + b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=bare, input=stream, check=True)
    return git(bare, "rev-parse", "main")


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def measure(commits: int, files: int, reps: int) -> dict[str, Any]:
    from gitray.git.source import fetch_branch, read_snapshot
    from gitray.plans.load import LoadMemo, load_snapshot

    work = OUT / f"git-{commits}x{files}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    bare, cache = work / "remote.git", work / "cache"
    gen = generate(bare, commits, files)
    size_kb = sum(p.stat().st_size for p in bare.rglob("*") if p.is_file()) // 1024
    url = f"file://{bare}"
    clone_s, fetched = _timed(lambda: fetch_branch(url, "main", cache_dir=cache))
    nochange = [_timed(lambda: fetch_branch(url, "main", cache_dir=cache))[0]
                for _ in range(reps)]
    fetch1, read1, reuse1, load1, memo1, difft = [], [], [], [], [], []
    blobs_read: list[int] = []
    yaml_files = workloads = 0
    old = fetched.sha
    # as the daemon keeps them: the snapshot and the memo of the revision it synced before
    previous = read_snapshot(str(cache), old)
    memo = LoadMemo()
    load_snapshot(previous, {}, memo)
    for r in range(reps):
        new = add_commit(bare, r, files)
        s, f = _timed(lambda: fetch_branch(url, "main", cache_dir=cache))
        assert f.sha == new
        fetch1.append(s)
        s, snap = _timed(lambda sha=new: read_snapshot(str(cache), sha))
        read1.append(s)
        s, reused = _timed(lambda sha=new, p=previous: read_snapshot(str(cache), sha,
                                                                      previous=p))
        reuse1.append(s)
        assert reused == snap
        blobs_read.append(reused.blobs_read)
        s, result = _timed(lambda snap=snap: load_snapshot(snap, {}))
        load1.append(s)
        s, memoized = _timed(lambda snap=reused: load_snapshot(snap, {}, memo))
        memo1.append(s)
        assert memoized == result and memo.hits >= len(snap.files) - 2, memo.hits  # 1 changed
        if result.diagnostics:
            raise RuntimeError(f"generated repo invalid: {result.diagnostics[:3]}")
        s, _ = _timed(lambda o=old, n=new: git(cache, "diff-tree", "-r", "--name-only", o, n))
        difft.append(s)
        yaml_files, workloads = len(snap.files), len(result.workloads)
        old, previous = new, reused
    med = statistics.median
    return {"commits": commits, "files": files, "yaml_files": yaml_files,
            "workloads": workloads, "generate_s": round(gen, 1), "pack_kb": size_kb,
            "clone_s": round(clone_s, 3),
            "fetch_nochange_s": round(med(nochange), 3),
            "fetch_nochange_runs": [round(x, 3) for x in nochange],
            "fetch_onechange_s": round(med(fetch1), 3),
            "read_snapshot_s": round(med(read1), 3),
            "read_reuse_s": round(med(reuse1), 3),
            "blobs_read": blobs_read,
            "load_snapshot_s": round(med(load1), 3),
            "load_memo_s": round(med(memo1), 3),
            "diff_tree_s": round(med(difft), 4),
            "poll_nochange_s": round(med(nochange), 3),
            "poll_onechange_cold_s": round(med(fetch1) + med(read1) + med(load1), 3),
            "poll_onechange_s": round(med(fetch1) + med(reuse1) + med(memo1), 3),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def run(sizes: list[tuple[int, int]], reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": []}
    for commits, files in sizes:
        say(f"git: {commits} commits x {files} files")
        r = measure(commits, files, reps)
        say(f"  no change {r['poll_nochange_s']}s; one file changed: fetch "
            f"{r['fetch_onechange_s']}s + read {r['read_snapshot_s']}s cold, "
            f"{r['read_reuse_s']}s reusing blobs ({r['blobs_read']} read) + load "
            f"{r['load_snapshot_s']}s cold, {r['load_memo_s']}s with the daemon's memo; "
            f"load average {r['load_average']}")
        out["sizes"].append(r)
    return out


def table(res: dict[str, Any]) -> str:
    rows = ["| commits x files (YAML files; workloads) | pack | first fetch (clone) "
            "| poll, nothing new: fetch_branch | one file changed: fetch_branch "
            "| + read_snapshot cold | + read_snapshot given the previous one (blobs read) "
            "| + load_snapshot cold | + load_snapshot with the memo "
            "| = poll with a change (as the daemon) | (git diff-tree of the two commits) "
            "| load average (1/5/15 min) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["sizes"]:
        reuse = (f"{1000 * r['read_reuse_s']:.0f} ms ({', '.join(map(str, r['blobs_read']))})"
                 if "read_reuse_s" in r else "-")
        rows.append(
            f"| {r['commits']} x {r['files']} ({r['yaml_files']}; {r['workloads']}) "
            f"| {r['pack_kb'] / 1024:.1f} MiB | {r['clone_s']:.2f} s "
            f"| {1000 * r['fetch_nochange_s']:.0f} ms | {1000 * r['fetch_onechange_s']:.0f} ms "
            f"| {1000 * r['read_snapshot_s']:.0f} ms | {reuse} "
            f"| {1000 * r['load_snapshot_s']:.0f} ms "
            f"| {1000 * r.get('load_memo_s', float('nan')):.0f} ms "
            f"| {1000 * r['poll_onechange_s']:.0f} ms | {1000 * r['diff_tree_s']:.1f} ms "
            f"| {' / '.join(str(x) for x in r.get('load_average', [])) or '-'} |")
    return "\n".join(rows)
