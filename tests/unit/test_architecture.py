"""docs/architecture.md lists every module of gitray/, one line each, and no module that is not
there; no module grows past 450 lines (split it along a seam instead)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
GITRAY = ROOT / "gitray"
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 450
LISTED = re.compile(r"^- `(gitray/[\w/]+\.py)`: \S", re.MULTILINE)


def modules() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in GITRAY.rglob("*.py"))


def listed(text: str) -> list[str]:
    return LISTED.findall(text)


def test_the_architecture_doc_lists_every_module_once() -> None:
    found = listed(DOC.read_text())
    assert sorted(set(found)) == sorted(found), "a module is listed twice"
    missing = sorted(set(modules()) - set(found))
    absent = sorted(set(found) - set(modules()))
    assert (missing, absent) == ([], []), (
        "docs/architecture.md: add a line for each module missing, remove each one absent")


def test_the_listing_check_would_catch_a_missing_or_stale_line() -> None:
    text = DOC.read_text()
    first = listed(text)[0]
    without = re.sub(rf"^- `{re.escape(first)}`:.*\n", "", text, flags=re.MULTILINE)
    assert first not in listed(without)
    assert "gitray/engine/gone.py" in listed(text + "- `gitray/engine/gone.py`: stale\n")
    assert listed("- `gitray/x.py`:\n") == []  # a line must say what the module is


@pytest.mark.parametrize("module", modules())
def test_no_module_is_over_450_lines(module: str) -> None:
    lines = len((ROOT / module).read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it along a seam"
