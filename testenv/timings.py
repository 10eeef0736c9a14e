"""The timing summary printed at the end of every ``scripts/test`` run (stdlib only).

``scripts/test`` sets ``$GITRAY_TIMINGS`` to a fresh directory; three writers fill it:

- ``phases.tsv``  ``<phase> <seconds> <exit code>`` per step of scripts/test (``phase``);
- ``build.tsv``   ``<component> <seconds|cached>`` per component of ``scripts/testenv build``
                  (``note_build``, called by testenv/build.py and traefik.py, writing
                  to ``$GITRAY_BUILD_TIMINGS``, which scripts/test sets for the build alone);
- ``pytest-<pid>.json`` per test module: seconds (setup + call + teardown of its tests, so
                  a session fixture's start-up counts in the first module that needs it) and
                  outcomes, written by this module loaded as a pytest plugin
                  (``-p testenv.timings``), one file per pytest run (scripts/test runs
                  pytest in phases); with pytest-xdist, by the controller, which receives
                  every worker's reports; and each module's span: the lane (xdist worker)
                  that ran it, its first test's start and its last test's end, from which
                  the summary says when each lane ended and when the longest modules ran;
                  and each failed test's one-line reason (where, and the exception's first
                  line), listed again at the end of the summary: a CI log cut in the middle
                  (as CI shows a long one) keeps its end.

``python3 -m testenv.timings DIR TOTAL_SECONDS`` prints the summary; its last line is the
plain ``pytest: N passed, N failed[, N skipped]`` line when pytest ran. Nothing here asserts a
duration: figures are printed, never checked (benchmarks live in bench/).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ENV_VAR = "GITRAY_TIMINGS"


def _dir() -> Path | None:
    value = os.environ.get(ENV_VAR)
    return Path(value) if value else None


BUILD_VAR = "GITRAY_BUILD_TIMINGS"  # set by scripts/test for its build phase alone


def note_build(component: str, seconds: float | None) -> None:
    """Record one build component of this run: its seconds, or None when it was cached (only
    in scripts/test's build phase: a test that runs a build must not add rows)."""
    path = os.environ.get(BUILD_VAR)
    if not path:
        return
    with Path(path).open("a") as fh:
        fh.write(f"{component}\t{'cached' if seconds is None else f'{seconds:.1f}'}\n")


# ---- the pytest plugin ------------------------------------------------------------------------

_MODULES: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
_SPANS: dict[str, list[Any]] = {}  # module -> [lane, first start, last stop] (epoch seconds)
_FAILED: list[str] = []  # one line per failed report: "<node id> (<phase>): <where>: <why>"
REASON_CHARS = 300  # of a failure's first line
_STARTED = time.monotonic()


def _lane(report: Any) -> str:
    """The pytest-xdist worker that ran the report's test (``gw0``...), ``main`` without."""
    return str(getattr(report, "worker_id", None) or "main")


def pytest_runtest_logreport(report: Any) -> None:
    module = str(report.nodeid).split("::", 1)[0]
    row = _MODULES[module]
    row["seconds"] += float(report.duration)
    start, stop = float(getattr(report, "start", 0) or 0), float(getattr(report, "stop", 0) or 0)
    if start > 0 and stop >= start:
        span = _SPANS.setdefault(module, [_lane(report), start, stop])
        span[1], span[2] = min(span[1], start), max(span[2], stop)
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "failed" if report.outcome == "failed" else str(report.outcome)
        row[outcome] += 1
    elif report.when == "teardown" and report.failed:
        row["failed"] += 1  # an error in teardown fails the run too
    if report.failed:
        _FAILED.append(failure_line(report))


def failure_line(report: Any) -> str:
    """``<node id> (<phase>): <line in the test's module>: <the exception's first line>``:
    the line is the deepest frame in the test's own module (where a test called the wait
    that timed out), else where the exception was raised; the phase is said unless it was
    the test's call."""
    longrepr = getattr(report, "longrepr", None)
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        lines = str(crash.message).strip().splitlines()
        where = f"{Path(str(crash.path)).name}:{crash.lineno}: "
        module = str(report.nodeid).split("::", 1)[0]
        entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", None) or []
        for entry in reversed(entries):
            loc = getattr(entry, "reprfileloc", None)
            if loc is not None and str(loc.path).endswith(module):
                where = f"{Path(module).name}:{loc.lineno}: "
                break
    else:
        where, lines = "", str(longrepr or "").strip().splitlines()[-1:]
    why = lines[0] if lines else "(no message)"
    if len(why) > REASON_CHARS:
        why = why[:REASON_CHARS] + " ..."
    phase = "" if report.when == "call" else f" (error in {report.when})"
    return f"{report.nodeid}{phase}: {where}{why}"


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    where = _dir()
    if where is None or hasattr(session.config, "workerinput"):  # an xdist worker
        return
    data = {"wall_seconds": round(time.monotonic() - _STARTED, 1), "exit": int(exitstatus),
            "modules": {m: {k: round(v, 1) for k, v in row.items()}
                        for m, row in sorted(_MODULES.items())},
            "spans": {m: [lane, round(a, 1), round(b, 1)]
                      for m, (lane, a, b) in sorted(_SPANS.items())},
            "failures": list(_FAILED)}
    (where / f"pytest-{os.getpid()}.json").write_text(json.dumps(data, indent=1) + "\n")


# ---- the summary ------------------------------------------------------------------------------


def _rows(path: Path) -> list[list[str]]:
    if not path.is_file():
        return []
    return [line.split("\t") for line in path.read_text().splitlines() if line.strip()]


SLOWEST_SHOWN = 20  # modules listed one per line; the rest summed in one line
SPANS_SHOWN = 5  # the longest modules of a run in lanes, with when they ran


def lanes(spans: dict[str, list[Any]]) -> list[str]:
    """When each lane of one pytest run in lanes ended, its last module, and when the longest
    modules ran (seconds from the run's first test): whether a long module began late and
    held one lane while the other had nothing left. Empty for a run in one process."""
    if len({lane for lane, _, _ in spans.values()}) < 2:
        return []
    t0 = min(a for _, a, _ in spans.values())
    out = [f"lanes of one run ({len(spans)} modules; seconds from its first test)"]
    for lane in sorted({lane for lane, _, _ in spans.values()}):
        mine = {m: (a, b) for m, (w, a, b) in spans.items() if w == lane}
        last = max(mine, key=lambda m: mine[m][1])
        out.append(f"  {lane}: ended at {mine[last][1] - t0:.0f} ({len(mine)} modules; "
                   f"last {last})")
    longest = sorted(spans.items(), key=lambda kv: kv[1][1] - kv[1][2])[:SPANS_SHOWN]
    for module, (lane, a, b) in longest:
        out.append(f"  {module:<58} {lane} {a - t0:>5.0f}-{b - t0:.0f}")
    return out


def summary(where: Path, total: float) -> list[str]:
    """Slowest modules first, then the phases (and build components), the failed tests'
    one-line reasons, the total and the ``pytest:`` line: the end of a CI log (often all that
    is shown) carries the figures and what failed."""
    out = ["", "==> timing summary (seconds)"]
    counts: dict[str, int] = defaultdict(int)
    runs = [json.loads(run.read_text()) for run in sorted(where.glob("pytest-*.json"))]
    modules: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for run in runs:  # a module can have tests in two runs (e.g. its own_node test apart)
        for module, row in run["modules"].items():
            for key, value in row.items():
                modules[module][key] += value
    if runs:
        ordered = sorted(modules.items(), key=lambda kv: -kv[1].get("seconds", 0))
        out.append(f"pytest per module ({len(modules)} modules, slowest first; seconds in the "
                   "module's tests, lanes overlap)")
        for module, row in ordered[:SLOWEST_SHOWN]:
            tests = int(sum(v for k, v in row.items() if k != "seconds"))
            out.append(f"  {module:<58} {row.get('seconds', 0):>6.0f}  ({tests} tests)")
        rest = ordered[SLOWEST_SHOWN:]
        if rest:
            seconds = sum(row.get("seconds", 0) for _, row in rest)
            tests = int(sum(v for _, row in rest for k, v in row.items() if k != "seconds"))
            out.append(f"  {f'{len(rest)} other modules':<58} {seconds:>6.0f}  ({tests} tests)")
        for _, row in ordered:
            for outcome in ("passed", "failed", "skipped"):
                counts[outcome] += int(row.get(outcome, 0))
        for run in runs:
            out += lanes(run.get("spans") or {})
    for name, seconds, code in _rows(where / "phases.tsv"):
        status = "" if code == "0" else f"  (exit {code})"
        if code == "5" and name.startswith("pytest"):
            status = "  (no test selected)"
        out.append(f"{name:<44} {float(seconds):>8.0f}{status}")
        if name == "build" and (where / "build.tsv").is_file():
            for component, took in _rows(where / "build.tsv"):
                shown = "cached" if took == "cached" else f"{float(took):.0f}"
                out.append(f"  {component:<42} {shown:>8}")
    failures = [line for run in runs for line in run.get("failures") or []]
    if failures:
        out.append(f"failed ({len(failures)}; each test's output is above)")
        out += [f"  {line}" for line in failures]
    out.append(f"{'total':<44} {total:>8.0f}  ({total / 60:.1f} min)")
    if runs:
        line = f"pytest: {counts['passed']} passed, {counts['failed']} failed"
        if counts["skipped"]:
            line += f", {counts['skipped']} skipped"
        out.append(line)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m testenv.timings DIR TOTAL_SECONDS", file=sys.stderr)
        return 2
    print("\n".join(summary(Path(argv[0]), float(argv[1]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
