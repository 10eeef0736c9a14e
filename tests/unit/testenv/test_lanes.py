"""scripts/test's lanes (testenv/lanes.py): the modules of ``HEAD`` on a waiting lane of their
own, every other module on the other lanes in pytest-xdist's order; checked as a pure choice
and with real pytest-xdist runs in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testenv import lanes

ROOT = Path(__file__).resolve().parents[3]
HEAD = lanes.HEAD[0]


@pytest.mark.parametrize(("queue", "waiting", "expected"), [
    (["a.py", HEAD, "b.py"], True, HEAD),
    (["a.py", HEAD, "b.py"], False, "a.py"),
    ([HEAD, "b.py"], False, "b.py"),
    ([HEAD], False, None),          # another lane takes nothing of HEAD
    (["a.py", "b.py"], True, None),  # the waiting lane takes nothing else
    ([], True, None),
    ([], False, None),
    ([HEAD, "a.py"], None, HEAD),    # one lane: everything, in the queue's order
    (["a.py", HEAD], None, "a.py"),
    ([], None, None),
])
def test_next_module(queue: list[str], waiting: bool | None, expected: str | None) -> None:
    assert lanes.next_module(queue, waiting) == expected


def _tree(where: Path) -> Path:
    """Three modules: many tests, fewer tests, and HEAD's first module with two tests; each
    test appends its xdist worker and its module's name to ``ran.txt``."""
    log = where / "ran.txt"
    body = ("import os\nfrom pathlib import Path\n\n"
            "def _ran(name):\n"
            f"    with Path({str(log)!r}).open('a') as fh:\n"
            "        fh.write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + name + '\\n')\n")
    files = {"tests/test_many.py": 5, "tests/test_some.py": 3, HEAD: 2}
    for path, count in files.items():
        module = where / path
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(body + "".join(
            f"\n\ndef test_{i}():\n    _ran({path!r})\n" for i in range(count)))
    (where / "pytest.ini").write_text("[pytest]\n")
    return log


def _ran(where: Path, workers: int, *args: str) -> list[tuple[str, str]]:
    """(worker, module) of every test run, in the order they ran."""
    log = _tree(where)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "testenv.lanes", "-n", str(workers), "--dist", "loadfile",
                           *args],
                          cwd=where, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 passed" in done.stdout, done.stdout
    return [(w, m) for w, m in (line.split() for line in log.read_text().splitlines())]


def test_head_modules_run_on_a_waiting_lane_of_their_own(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 3, "tests")
    assert {m for w, m in ran if w == "gw2"} == {HEAD}  # the worker with the highest id
    assert {w for w, m in ran if m == HEAD} == {"gw2"}
    assert {m for w, m in ran if w != "gw2"} == {"tests/test_many.py", "tests/test_some.py"}


def test_one_lane_beside_the_waiting_lane_runs_all_the_rest(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 2, "tests")
    assert {w for w, m in ran if m == HEAD} == {"gw1"}
    assert [m for w, m in ran if w == "gw0"] == (
        ["tests/test_many.py"] * 5 + ["tests/test_some.py"] * 3)  # pytest-xdist's order


def test_one_worker_runs_everything(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 1, "tests")
    assert {w for w, m in ran} == {"gw0"}
    assert sorted({m for w, m in ran}) == sorted(["tests/test_many.py", "tests/test_some.py",
                                                  HEAD])


@pytest.mark.parametrize("dist", ["load", "loadscope"])
def test_other_distributions_are_left_to_xdist(dist: str) -> None:
    class Config:
        def getvalue(self, name: str) -> str:
            return dist
    assert lanes.pytest_xdist_make_scheduler(Config(), None) is None  # type: ignore[arg-type]
