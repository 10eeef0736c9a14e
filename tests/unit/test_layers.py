"""Layering: gitray.plans stays pure (no I/O imports or calls), checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLANS = Path(__file__).parents[2] / "gitray" / "plans"
FORBIDDEN_MODULES = {
    "kubernetes", "git", "httpx", "subprocess", "socket", "os", "pathlib", "shutil", "time",
    "urllib", "requests", "apscheduler", "asyncio", "threading", "random", "tempfile", "io",
    "gitray.sync", "gitray.cli",
}
FORBIDDEN_CALLS = {"open", "input", "print", "exec", "eval", "__import__"}
FORBIDDEN_ATTRS = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today")}


def modules() -> list[Path]:
    return sorted(PLANS.glob("*.py"))


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            if any(name == m or name.startswith(m + ".") for m in FORBIDDEN_MODULES):
                found.append(f"{path.name}:{node.lineno}: imports {name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{path.name}:{node.lineno}: calls {node.func.id}()")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id, node.attr) in FORBIDDEN_ATTRS:
            found.append(f"{path.name}:{node.lineno}: reads the clock")
    return found


def test_there_are_planner_modules_to_check() -> None:
    assert len(modules()) >= 8


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_planner_module_does_no_io(path: Path) -> None:
    assert violations(path) == []


def test_the_checker_catches_io(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import subprocess\nfrom datetime import datetime\nx = datetime.now()\n"
                   "open('f')\n")
    assert len(violations(bad)) == 3
