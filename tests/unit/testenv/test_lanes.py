"""scripts/test's lanes (testenv/lanes.py): each module of ``HEAD`` on a waiting lane of its
own, every other module on the other lanes in pytest-xdist's order; in the alone phase the
modules of ``GATEWAY_LANE`` in one lane, those of ``GATES_LANE`` in another, the other tests
in a third; the unit tests in a phase of their own. Checked as pure choices and with real
pytest-xdist runs in a subprocess."""

from __future__ import annotations

import os
import re
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
    (["a.py", "b.py"], True, "a.py"),  # no HEAD left: the waiting lane joins the others
    ([], True, None),
    ([], False, None),
    ([HEAD, "a.py"], None, HEAD),    # one lane: everything, in the queue's order
    (["a.py", HEAD], None, "a.py"),
    ([], None, None),
])
def test_next_module(queue: list[str], waiting: bool | None, expected: str | None) -> None:
    assert lanes.next_module(queue, waiting) == expected


FILES = {"tests/test_many.py": 5, "tests/test_some.py": 3, HEAD: 2}


def _tree(where: Path, files: dict[str, int], slow: dict[str, float] | None = None) -> Path:
    """The modules of ``files`` with that many tests each; each test appends its xdist worker
    and its module's name to ``ran.txt`` (after sleeping ``slow[module]`` seconds)."""
    log = where / "ran.txt"
    body = ("import os\nfrom pathlib import Path\n\n"
            "def _ran(name):\n"
            f"    with Path({str(log)!r}).open('a') as fh:\n"
            "        fh.write(os.environ['PYTEST_XDIST_WORKER'] + ' ' + name + '\\n')\n")
    for path, count in files.items():
        module = where / path
        module.parent.mkdir(parents=True, exist_ok=True)
        nap = (slow or {}).get(path, 0)
        module.write_text(body + "".join(
            f"\n\ndef test_{i}():\n    __import__('time').sleep({nap})\n    _ran({path!r})\n"
            for i in range(count)))
    (where / "pytest.ini").write_text("[pytest]\n")
    return log


def _ran(where: Path, workers: int, *args: str, files: dict[str, int] = FILES,
         passed: int | None = None, slow: dict[str, float] | None = None
         ) -> list[tuple[str, str]]:
    """(worker, module) of every test run, in the order they ran (``passed`` of them: all
    unless said; ``slow`` as in ``_tree``)."""
    log = _tree(where, files, slow)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "testenv.lanes", "-n", str(workers), "--dist", "loadfile",
                           *args],
                          cwd=where, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{sum(files.values()) if passed is None else passed} passed" in done.stdout, \
        done.stdout
    return [(w, m) for w, m in (line.split() for line in log.read_text().splitlines())]


def test_head_modules_run_on_a_waiting_lane_of_their_own(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 3, "tests")
    assert {w for w, m in ran if m == HEAD} == {"gw2"}  # the worker with the highest id
    assert [m for w, m in ran if w == "gw2"][:2] == [HEAD, HEAD]  # first there
    assert {m for w, m in ran if w != "gw2"} <= {"tests/test_many.py", "tests/test_some.py"}


@pytest.mark.parametrize(("workers", "heads", "expected"), [
    (4, 2, 2), (3, 2, 2), (2, 2, 1), (1, 2, 0), (3, 1, 1), (4, 0, 0), (0, 0, 0),
])
def test_waiting_lanes(workers: int, heads: int, expected: int) -> None:
    assert lanes.waiting_lanes(workers, heads) == expected


TWO_HEADS = {"tests/test_many.py": 5, "tests/test_some.py": 3, lanes.HEAD[0]: 2,
             lanes.HEAD[1]: 2}


def test_each_head_module_runs_on_a_waiting_lane_of_its_own(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 4, "tests", files=TWO_HEADS)
    on = {m: {w for w, mm in ran if mm == m} for m in TWO_HEADS}
    assert {*on[lanes.HEAD[0]], *on[lanes.HEAD[1]]} == {"gw2", "gw3"}, on
    assert len(on[lanes.HEAD[0]]) == len(on[lanes.HEAD[1]]) == 1, on
    for worker in ("gw2", "gw3"):  # each began with its module of HEAD
        assert next(m for w, m in ran if w == worker) in lanes.HEAD, ran


def test_a_waiting_lane_runs_its_last_test_without_waiting_for_the_other_lanes(
        tmp_path: Path) -> None:
    # pytest-xdist's worker holds its last test back until it is told there is no more work
    slow = {f"tests/test_{c}.py": 0.3 for c in "abcdef"}  # more modules than two lanes take
    ran = _ran(tmp_path, 3, "tests", files={**dict.fromkeys(slow, 2), HEAD: 2}, slow=slow)
    assert {w for w, m in ran if m == HEAD} == {"gw2"}
    assert [m for _, m in ran][:2] == [HEAD, HEAD], ran  # before the other lanes' first
    # after its module the waiting lane takes the others' modules too, and the two other
    # lanes still share them (5ce4f63: ranked again after a lane ended, one took nothing)
    lanes_of = {w: {m for ww, m in ran if ww == w} for w in ("gw0", "gw1", "gw2")}
    assert len(lanes_of["gw0"]) >= 2 and len(lanes_of["gw1"]) >= 2, lanes_of
    assert lanes_of["gw2"] - {HEAD}, lanes_of


def test_with_two_workers_one_waiting_lane_runs_both_head_modules(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 2, "tests", files=TWO_HEADS)
    assert {w for w, m in ran if m in lanes.HEAD} == {"gw1"}
    on_gw1 = [m for w, m in ran if w == "gw1"]
    assert set(on_gw1[:4]) == set(lanes.HEAD), on_gw1  # both, before anything else


def test_one_lane_beside_the_waiting_lane_runs_all_the_rest(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 2, "tests")
    assert {w for w, m in ran if m == HEAD} == {"gw1"}
    assert [m for w, m in ran if w == "gw0"][:5] == ["tests/test_many.py"] * 5  # xdist's order


def test_one_worker_runs_everything(tmp_path: Path) -> None:
    ran = _ran(tmp_path, 1, "tests")
    assert {w for w, m in ran} == {"gw0"}
    assert sorted({m for w, m in ran}) == sorted(["tests/test_many.py", "tests/test_some.py",
                                                  HEAD])


@pytest.mark.parametrize(("nodeid", "expected"), [
    ("tests/integration/test_incremental.py::test_a", "gateway"),
    ("tests/integration/test_monitoring.py::test_b", "gateway"),
    ("tests/integration/test_vs_kuberay.py::test_b", "gates"),
    ("tests/integration/test_bluegreen_gates.py::test_b", "gates"),
    ("tests/integration/test_failover.py::test_c", "alone"),
    ("tests/integration/test_realnode.py::test_d", "alone"),
])
def test_alone_group(nodeid: str, expected: str) -> None:
    assert lanes.alone_group(nodeid) == expected


def test_every_gateway_module_is_in_the_gateway_lane() -> None:
    marked = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                    if re.search(r"^pytestmark = pytest\.mark\.gateway$", path.read_text(),
                                 re.MULTILINE))
    assert marked and set(marked) <= set(lanes.GATEWAY_LANE), marked
    assert all((ROOT / module).is_file() for module in lanes.GATEWAY_LANE + lanes.GATES_LANE)
    assert not set(lanes.GATEWAY_LANE) & set(lanes.GATES_LANE)


def test_the_alone_phase_runs_each_of_its_three_lanes_on_a_worker_of_its_own(
        tmp_path: Path) -> None:
    modules = [*lanes.GATEWAY_LANE[:2], *lanes.GATES_LANE, "tests/integration/test_counts.py",
               "tests/integration/test_rates.py"]
    ran = _ran(tmp_path, 3, "--alone-lanes", "tests", files=dict.fromkeys(modules, 3))
    worker = {m: {w for w, mm in ran if mm == m} for m in modules}
    assert all(len(w) == 1 for w in worker.values()), worker  # a module on one lane
    assert worker[modules[0]] == worker[modules[1]]
    assert worker[modules[2]] == worker[modules[3]]
    assert worker[modules[4]] == worker[modules[5]]
    assert len({*worker[modules[0]], *worker[modules[2]], *worker[modules[4]]}) == 3, worker


LATE_A, LATE_B = f"{lanes.LATE_DIR}/test_action.py", f"{lanes.LATE_DIR}/test_hook.py"


@pytest.mark.parametrize(("queue", "gateway_lane", "expected"), [
    ([LATE_A, "alone", "gates", "gateway"], False, "gateway"),  # the groups first, in order
    ([LATE_A, "alone", "gates"], True, "gates"),
    ([LATE_A, LATE_B, "alone"], False, "alone"),
    ([LATE_B, LATE_A], False, LATE_B),   # then the late modules, in the queue's order
    ([LATE_B, LATE_A], True, None),      # never on the Gateway lane
    ([], False, None),
])
def test_next_alone_scope(queue: list[str], gateway_lane: bool, expected: str | None) -> None:
    assert lanes.next_alone_scope(queue, gateway_lane) == expected


def test_a_late_module_is_a_scope_of_its_own() -> None:
    assert lanes.alone_group(f"{LATE_A}::test_x[1]") == LATE_A


def test_the_modules_marked_late_are_the_ci_tests() -> None:
    marked = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                    if re.search(r"^pytestmark = pytest\.mark\.late$", path.read_text(),
                                 re.MULTILINE))
    ci = sorted(str(p.relative_to(ROOT)) for p in (ROOT / lanes.LATE_DIR).glob("test_*.py"))
    assert ci and marked == ci


def test_the_late_modules_follow_the_alone_lanes_and_never_run_on_the_gateway_lane(
        tmp_path: Path) -> None:
    """The Gateway lane's tests are slow here: the two other lanes end first and run the late
    modules; the Gateway lane's last test is not held back for work that is not for it."""
    gateway = lanes.GATEWAY_LANE[0]
    files = {gateway: 3, lanes.GATES_LANE[0]: 1, "tests/integration/test_counts.py": 1,
             LATE_A: 2, LATE_B: 2}
    ran = _ran(tmp_path, 3, "--alone-lanes", "tests", files=files, slow={gateway: 0.7})
    worker = {m: {w for w, mm in ran if mm == m} for m in files}
    assert all(len(w) == 1 for w in worker.values()), worker
    gateway_lane = worker[gateway]
    assert not gateway_lane & (worker[LATE_A] | worker[LATE_B]), worker
    order = [m for _, m in ran]
    # each late module began after every test of the groups on its lane, and before the
    # Gateway lane ended (they ran beside it)
    for late in (LATE_A, LATE_B):
        lane = next(iter(worker[late]))
        on_lane = [m for w, m in ran if w == lane]
        assert on_lane.index(late) > max(i for i, m in enumerate(on_lane)
                                         if m not in (LATE_A, LATE_B)), on_lane
    assert order[-1] == gateway, order


def test_with_one_worker_the_alone_phase_runs_the_late_modules_too(tmp_path: Path) -> None:
    files = {lanes.GATEWAY_LANE[0]: 1, LATE_A: 2}
    ran = _ran(tmp_path, 1, "--alone-lanes", "tests", files=files)
    assert [m for _, m in ran] == [lanes.GATEWAY_LANE[0], LATE_A, LATE_A]


@pytest.mark.parametrize(("nodeid", "expected"), [
    ("tests/unit/test_plan.py::test_a", True),
    ("tests/unit/testenv/test_lanes.py::test_b[x]", True),
    ("tests/integration/test_unit.py::test_c", False),
    ("tests/units/test_d.py::test_d", False),
    ("bench/smoke_test.py::test_e", False),
])
def test_is_unit(nodeid: str, expected: bool) -> None:
    assert lanes.is_unit(nodeid) is expected


UNIT_FILES = {"tests/unit/test_pure.py": 4, "tests/integration/test_real.py": 2, HEAD: 1}


def test_the_unit_phase_runs_the_unit_tests_and_the_lanes_phase_the_rest(tmp_path: Path) -> None:
    unit = _ran(tmp_path / "a", 1, "--unit-phase", "tests", files=UNIT_FILES, passed=4)
    assert {m for _, m in unit} == {"tests/unit/test_pure.py"} and len(unit) == 4
    rest = _ran(tmp_path / "b", 2, "--without-unit", "tests", files=UNIT_FILES, passed=3)
    assert sorted({m for _, m in rest}) == sorted(["tests/integration/test_real.py", HEAD])
    assert {w for w, m in rest if m == HEAD} == {"gw1"}  # the waiting lane is kept
    assert len(_ran(tmp_path / "c", 2, "tests", files=UNIT_FILES)) == 7  # neither: all


@pytest.mark.parametrize("dist", ["load", "loadscope"])
def test_other_distributions_are_left_to_xdist(dist: str) -> None:
    class Config:
        def getvalue(self, name: str) -> str:
            return dist
    assert lanes.pytest_xdist_make_scheduler(Config(), None) is None  # type: ignore[arg-type]
