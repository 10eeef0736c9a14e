"""The timing summary of scripts/test (testenv/timings.py): per-module seconds and
outcomes from pytest's reports, build components, and the plain closing line that CI reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from testenv import timings


class Session:
    config = object()  # the controller's (an xdist worker's config has workerinput)


@dataclass
class Report:
    nodeid: str
    when: str
    outcome: str
    duration: float

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"


def test_modules_outcomes_and_the_closing_line(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(timings.ENV_VAR, str(tmp_path))
    fresh = type(timings._MODULES)(timings._MODULES.default_factory)
    monkeypatch.setattr(timings, "_MODULES", fresh)
    # (this plugin runs in scripts/test's own pytest too: its lists are not this test's)
    monkeypatch.setattr(timings, "_FAILED", [])
    reports = [
        # a passing test whose setup started the environment (40 s)
        Report("tests/integration/test_a.py::t1", "setup", "passed", 40.0),
        Report("tests/integration/test_a.py::t1", "call", "passed", 5.0),
        Report("tests/integration/test_a.py::t1", "teardown", "passed", 1.0),
        # a failing test, an error in setup, a skip
        Report("tests/integration/test_a.py::t2", "setup", "passed", 0.0),
        Report("tests/integration/test_a.py::t2", "call", "failed", 2.0),
        Report("tests/unit/test_b.py::t3", "setup", "failed", 0.5),
        Report("tests/unit/test_b.py::t4", "setup", "skipped", 0.0),
    ]
    for r in reports:
        timings.pytest_runtest_logreport(r)
    timings.pytest_sessionfinish(Session(), 1)
    [written] = tmp_path.glob("pytest-*.json")
    data = json.loads(written.read_text())
    assert data["modules"]["tests/integration/test_a.py"] == {"seconds": 48.0, "passed": 1,
                                                              "failed": 1}
    assert data["modules"]["tests/unit/test_b.py"] == {"seconds": 0.5, "failed": 1,
                                                       "skipped": 1}
    (tmp_path / "phases.tsv").write_text("build\t700\t0\npytest\t60\t1\n")
    monkeypatch.setenv(timings.BUILD_VAR, str(tmp_path / "build.tsv"))
    timings.note_build("etcd", 112.04)
    timings.note_build("kwok", None)
    lines = timings.summary(tmp_path, 800)
    text = "\n".join(lines)
    assert "  etcd" in text and "112" in text and "cached" in text
    assert "(exit 1)" in text
    slowest = [line for line in lines if line.startswith("  tests/")]
    assert slowest[0].split()[0] == "tests/integration/test_a.py"
    assert lines[-1] == "pytest: 1 passed, 2 failed, 1 skipped"
    assert "failed (2; each test's output is above)" in lines


def test_the_slowest_modules_are_listed_and_the_rest_summed_before_the_phases(
        tmp_path: Path) -> None:
    modules = {f"tests/unit/test_m{i:02d}.py": {"seconds": float(i), "passed": 2}
               for i in range(timings.SLOWEST_SHOWN + 5)}
    (tmp_path / "pytest-1.json").write_text(json.dumps({"modules": modules}))
    (tmp_path / "phases.tsv").write_text("ruff\t3\t0\npytest\t400\t0\n")
    lines = timings.summary(tmp_path, 410)
    listed = [line.split()[0] for line in lines if line.startswith("  tests/")]
    assert len(listed) == timings.SLOWEST_SHOWN
    assert listed[0] == f"tests/unit/test_m{timings.SLOWEST_SHOWN + 4:02d}.py"
    rest = next(line for line in lines if "5 other modules" in line)
    assert rest.split()[-3:] == ["10", "(10", "tests)"]  # 0+1+2+3+4 s, 5 modules of 2 tests
    assert lines.index(rest) < next(i for i, line in enumerate(lines) if line.startswith("ruff"))
    assert lines[-1] == f"pytest: {2 * len(modules)} passed, 0 failed"


@dataclass
class LaneReport(Report):
    start: float = 0.0
    stop: float = 0.0
    worker_id: str = "gw0"


def test_each_lane_s_end_and_the_longest_modules_spans(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two lanes: gw0 runs a short module then a long one that begins late; gw1 ends early.
    The summary says when each lane ended and when the long module ran."""
    monkeypatch.setenv(timings.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(timings, "_MODULES", type(timings._MODULES)(
        timings._MODULES.default_factory))
    monkeypatch.setattr(timings, "_SPANS", {})
    monkeypatch.setattr(timings, "_FAILED", [])
    t0 = 1_800_000_000.0
    for nodeid, start, stop, lane in [
            ("tests/unit/test_short.py::a", t0, t0 + 10, "gw0"),
            ("tests/integration/test_long.py::a", t0 + 100, t0 + 400, "gw0"),
            ("tests/integration/test_long.py::b", t0 + 400, t0 + 900, "gw0"),
            ("tests/unit/test_other.py::a", t0 + 1, t0 + 250, "gw1")]:
        timings.pytest_runtest_logreport(
            LaneReport(nodeid, "call", "passed", stop - start, start, stop, lane))
    timings.pytest_sessionfinish(Session(), 0)
    [written] = tmp_path.glob("pytest-*.json")
    assert json.loads(written.read_text())["spans"]["tests/integration/test_long.py"] == [
        "gw0", t0 + 100, t0 + 900]
    lines = timings.summary(tmp_path, 1000)
    assert "  gw0: ended at 900 (2 modules; last tests/integration/test_long.py)" in lines
    assert "  gw1: ended at 250 (1 modules; last tests/unit/test_other.py)" in lines
    [long] = [line for line in lines if line.startswith("  tests/integration/test_long.py ")
              and "gw0" in line]
    assert long.split()[-2:] == ["gw0", "100-900"]
    assert timings.lanes({"tests/unit/test_a.py": ["main", t0, t0 + 5]}) == []


FAILING = {
    "helper.py": ("def wait(what):\n"
                  "    raise TimeoutError(f'timed out after 5s waiting for {what}')\n"),
    "test_fails.py": """import pytest
from helper import wait


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError('the namespace stayed')


def test_ok():
    pass


def test_assert():
    assert 1 + 1 == 3, 'sent 10, failed 1 (timeout 1)\\nsecond line'


def test_waits():
    x = 1
    wait('the pods gone')


def test_teardown(broken_teardown):
    pass
""",
}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_each_failure_s_one_line_reason_closes_the_summary(tmp_path: Path,
                                                           workers: list[str]) -> None:
    """A real pytest run with the plugin (and pytest-xdist, whose controller gets the
    workers' reports): each failed test, its line in its own module and the first line of
    why, listed at the end of the summary, where a CI log cut in the middle keeps them."""
    for name, text in FAILING.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "timings"
    out.mkdir()
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{tmp_path}",
           timings.ENV_VAR: str(out)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "testenv.timings", *workers, "test_fails.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = timings.summary(out, 10)
    at = lines.index("failed (3; each test's output is above)")
    assert sorted(lines[at + 1:at + 4]) == [
        "  test_fails.py::test_assert: test_fails.py:16: AssertionError: sent 10, failed 1 "
        "(timeout 1)",
        "  test_fails.py::test_teardown (error in teardown): test_fails.py:8: RuntimeError: "
        "the namespace stayed",
        "  test_fails.py::test_waits: test_fails.py:21: TimeoutError: timed out after 5s "
        "waiting for the pods gone",
    ], lines
    assert lines[-2].startswith("total") and lines[-1] == "pytest: 2 passed, 3 failed"


def test_a_long_reason_is_cut() -> None:
    @dataclass
    class Crash:
        path: str
        lineno: int
        message: str

    @dataclass
    class Longrepr:
        reprcrash: Crash

    report = Report("tests/unit/test_x.py::t", "call", "failed", 1.0)
    report.longrepr = Longrepr(Crash("/r/tests/unit/test_x.py", 7, "x" * 1000))  # type: ignore[attr-defined]
    line = timings.failure_line(report)
    assert line == "tests/unit/test_x.py::t: test_x.py:7: " + "x" * timings.REASON_CHARS + " ..."
