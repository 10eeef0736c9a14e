"""Smoke check of the benchmark scripts (the only part of bench/ meant for CI).

Runs ``bench/run --tiny`` (every benchmark at the smallest sizes, a few minutes: the upgrade
benchmark starts two real Ray heads) and checks that each benchmark produced numbers. No
timing is asserted. Starts and stops an environment of its own without the real node (the
benchmarks run Ray heads through kwok and the Ray pod runner; their upgrade changes the image
to a tag only the runner knows, which the real node cannot pull), or uses the one in
$GITRAY_BENCH_STATE when set — never the suite's $GITRAY_TESTENV_STATE, which has the real
node.

    python -m pytest bench/smoke_test.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_run_tiny_produces_numbers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    state = os.environ.get("GITRAY_BENCH_STATE") or str(tmp_path / "env")
    r = subprocess.run([sys.executable, str(REPO / "bench" / "run"), "--tiny",
                        "--state-dir", state], cwd=REPO, capture_output=True, text=True,
                       timeout=2400, env={**os.environ, "GITRAY_BENCH_OUT": str(out)},
                       check=False)
    assert r.returncode == 0, f"bench/run --tiny failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    res = json.loads((out / "results.json").read_text())

    plan = next(iter(res["plan"]["sizes"].values()))
    assert plan["gitray"]["wall_s"] > 0 and plan["gitray"]["max_rss_mb"] > 0
    assert plan["gitray"]["client"] and plan["kubectl"]["wall_s"] > 0

    steady = next(iter(res["steady"].values()))
    assert steady["polls"] > 0 and steady["cpu_ms_per_poll"] is not None

    upgrade = res["upgrade"]["samples"]
    assert {s["kind"] for s in upgrade} == {"cluster change", "serve-only"}
    assert all(s.get("total_s") for s in upgrade)

    failover = res["failover"]
    for case in ("handover", "crash"):
        assert failover[case]["holder_s"]["n"] >= 1 and failover[case]["resumed_s"]["n"] >= 1

    git = res["git"]["sizes"][0]
    assert git["fetch_nochange_s"] > 0 and git["read_snapshot_s"] > 0

    table = (out / "results.md").read_text()
    for title in ("Plan at scale", "Steady state", "Upgrade overhead", "Failover", "Git"):
        assert title in table
