"""The PR preview at scale: ``gitray plan --against HEAD~1`` of N RayServices + N RayClusters
(5 documents per file), offline: no API server.

    python -m bench.plan_preview --n 10000                       # this checkout, text and json
    python -m bench.plan_preview --n 10000 --compare /tmp/old    # and an older checkout's code

A real Git repository with two commits (benchmark 1's ``Fleet``: the base revision, then 5 %
of the workloads changed, half with a new image: blue-green upgrades), generated once per N
under bench/out/preview-N and reused. Each checkout's CLI runs under /usr/bin/time (wall, CPU,
its own peak RSS) for ``--format text`` and ``--format json``; the sha256 of each output shows
both checkouts print the same plan.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from bench.common import OUT, REPO, Fleet, changed_indexes, git, run_measured, say, write_files


def prepare(n: int) -> Path:
    root = OUT / f"preview-{n}"
    if (root / ".git").is_dir() and git(root, "rev-list", "--count", "HEAD") == "2":
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    git(root, "init", "-q")
    for message, fleet in (("base", Fleet(n)), ("head", Fleet(n, changed_indexes(n)))):
        for child in root.iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        write_files(root, fleet.files())
        git(root, "add", "-A")
        git(root, "commit", "-qm", message)
    return root


def measure(src: Path, repo: Path, fmt: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src), "NO_COLOR": "1"}
    env.pop("KUBECONFIG", None)
    m = run_measured([sys.executable, "-m", "gitray", "plan", "--repo", str(repo),
                      "--against", "HEAD~1", "--format", fmt], env=env, cwd=src)
    if m.returncode != 0:
        raise RuntimeError(f"gitray plan failed ({m.returncode}): {m.stderr[-2000:]}")
    return {"code": str(src), "format": fmt, "wall_s": round(m.wall_s, 2),
            "cpu_s": round(m.user_s + m.sys_s, 2), "peak_rss_mb": round(m.max_rss_mb),
            "load": round(m.loadavg, 1), "output_mb": round(len(m.stdout) / 2**20, 1),
            "sha256": hashlib.sha256(m.stdout.encode()).hexdigest()[:12]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--compare", type=Path, action="append", default=[],
                        help="another checkout whose gitray/ to measure too")
    args = parser.parse_args()
    repo = prepare(args.n)
    rows = [measure(src, repo, fmt) for src in (REPO, *args.compare) for fmt in ("text", "json")]
    for row in rows:
        say(json.dumps(row))
    (OUT / f"plan_preview-{args.n}.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
