"""Benchmark 6's tables over several runs (bench/vs_kuberay_runs.py, pure)."""

from __future__ import annotations

from typing import Any

from bench.vs_kuberay_runs import runs_tables


def run(switched: float, sent: int, scenarios: tuple[str, ...] = ("image",)) -> dict[str, Any]:
    result = {"switched_s": switched, "clusters_created": 1,
              "requests": {"failed": 0, "sent": sent, "failures": {}}}
    return {"scenarios": {s: {"date_utc": "d", "KubeRay": result, "gitray": result}
                          for s in scenarios}}


def test_each_row_lists_every_run_and_the_median_of_times() -> None:
    text = runs_tables([run(17.8, 800), run(18.4, 810), run(17.9, 805, ("image", "serve"))],
                       ["a", "b", "c"])
    assert "| change -> serve Service on the new cluster only (s) | 17.8; 18.4; 17.9 " \
           "(median 17.9) |" in text
    assert "| failed requests / sent | 0 / 800; 0 / 810; 0 / 805 |" in text
    assert "| clusters created | 1; 1; 1 |" in text  # (no median of counts)
    # a scenario only one run had: the others show "-", and no median
    assert "#### Serve-config-only change" in text
    assert "| change -> app RUNNING with the new config (s) | -; -; - |" in text


def incremental(to_100: float | None, ended: float | None, failed: int) -> dict[str, Any]:
    result = {"to_100_s": to_100, "ended_s": ended, "end": "new" if to_100 else "old",
              "requests": {"sent": 1000, "failed": failed}}
    return {"runs": {"good/KubeRay": result, "bad/gitray": {**result, "to_100_s": None}}}


def test_benchmark_7_over_runs_lists_each_run_and_the_median_where_every_run_gave_one() -> None:
    from bench.incremental import runs_table

    text = runs_table([incremental(65.7, 131.9, 0), incremental(66.1, 132.4, 0),
                       incremental(64.9, None, 2)])
    assert "| good/KubeRay | 65.7; 66.1; 64.9 (median 65.7) | 131.9; 132.4; > 600 | " \
           "0 / 1000; 0 / 1000; 2 / 1000 | new; new; new |" in text
    assert "| bad/gitray | never; never; never | 131.9; 132.4; > 600 |" in text
