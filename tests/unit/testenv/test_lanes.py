"""scripts/test's lane order (testenv/lanes.py), with a real pytest-xdist run in a subprocess:
the modules of ``HEAD`` are handed out first, every other module in pytest-xdist's order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testenv import lanes

ROOT = Path(__file__).resolve().parents[3]


def _tree(where: Path) -> Path:
    """Three modules: many tests, fewer tests, and HEAD's first module with one test; each
    test appends its module's name to ``ran.txt``."""
    log = where / "ran.txt"
    body = ("from pathlib import Path\n\n"
            "def _ran(name):\n"
            f"    with Path({str(log)!r}).open('a') as fh:\n"
            "        fh.write(name + '\\n')\n")
    files = {"tests/test_many.py": 5, "tests/test_some.py": 3, lanes.HEAD[0]: 1}
    for path, count in files.items():
        module = where / path
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(body + "".join(
            f"\n\ndef test_{i}():\n    _ran({path!r})\n" for i in range(count)))
    (where / "pytest.ini").write_text("[pytest]\n")
    return log


def _order(where: Path, *plugin: str) -> list[str]:
    log = _tree(where)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *plugin, "-n", "1", "--dist", "loadfile", "tests"],
                          cwd=where, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = log.read_text().split()
    return [m for i, m in enumerate(ran) if i == 0 or ran[i - 1] != m]


def test_head_modules_are_handed_out_first(tmp_path: Path) -> None:
    assert _order(tmp_path / "xdist") == ["tests/test_many.py", "tests/test_some.py",
                                          lanes.HEAD[0]]  # (pytest-xdist's own order)
    assert _order(tmp_path / "lanes", "-p", "testenv.lanes") == [
        lanes.HEAD[0], "tests/test_many.py", "tests/test_some.py"]


@pytest.mark.parametrize("dist", ["load", "loadscope"])
def test_other_distributions_are_left_to_xdist(dist: str) -> None:
    class Config:
        def getvalue(self, name: str) -> str:
            return dist
    assert lanes.pytest_xdist_make_scheduler(Config(), None) is None  # type: ignore[arg-type]
