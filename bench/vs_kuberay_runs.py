"""Benchmark 6 over several runs: one table per scenario, each row's figures run by run.

    python3 -m bench.vs_kuberay_runs OUT1 OUT2 OUT3 > runs.md

Each OUT is a ``GITRAY_BENCH_OUT`` directory of ``bench/run --only kuberay`` (its
``kuberay.json``). A cell lists the runs' figures in order ("17.8; 17.9; 18.1"), then, for
times, their median where every run gave one; a scenario a run did not include shows "-".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.common import run_by_run
from bench.vs_kuberay import ROWS, SCENARIOS, TITLES, _cell

__all__ = ["runs_tables"]


def _figures(runs: list[dict[str, Any]], scenario: str, controller: str, key: str) -> str:
    cells, numbers = [], []
    for run in runs:
        data = (run.get("scenarios") or {}).get(scenario)
        if data is None:
            cells.append("-")
            continue
        result = data.get(controller) or {}
        value = result.get(key)
        cells.append(_cell(result, key))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers.append(float(value))
    return run_by_run(cells, numbers if key.endswith("_s") else [], len(runs))


def runs_tables(runs: list[dict[str, Any]], names: list[str]) -> str:
    """Markdown: per scenario any run has, its rows with every run's figures. Pure."""
    seen = [s for s in SCENARIOS if any(s in (r.get("scenarios") or {}) for r in runs)]
    out = [f"Runs, in order: {', '.join(names)}.", ""]
    for scenario in seen:
        dates = [((r.get("scenarios") or {}).get(scenario) or {}).get("date_utc", "-")
                 for r in runs]
        out += [f"#### {TITLES.get(scenario, scenario)}", "",
                f"Runs at {', '.join(str(d) for d in dates)}.", "",
                "| | KubeRay | gitray |", "|---|---|---|"]
        for label, key in ROWS.get(scenario, []):
            out.append(f"| {label} | {_figures(runs, scenario, 'KubeRay', key)} | "
                       f"{_figures(runs, scenario, 'gitray', key)} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [json.loads((Path(d) / "kuberay.json").read_text()) for d in argv]
    print(runs_tables(runs, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
