"""Fixtures of the CI integration tests (no Kubernetes): the action's checkout and an offline
wheelhouse. Does I/O (pip, git).

- ``action_checkout`` (session): the project's files (tracked and new, as in the working tree)
  committed in a Git repository of their own: what ``uses: OWNER/gitray@REF`` checks out, what
  a pre-commit ``repo:`` clones and what the GitLab template's ``install`` names.
- ``wheelhouse`` (session): wheels of gitray's dependencies and of its build backend, built
  once from PyPI, so each install in the tests is offline (``PIP_NO_INDEX``) and quick.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ci.harness import REPO_ROOT, commit_all, git


@pytest.fixture(scope="session")
def action_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("action") / "gitray"
    listed = git(REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git(dest, "init", "-q", "-b", "main")
    commit_all(dest, "gitray at the ref the action is used at")
    return dest


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory, action_checkout: Path) -> Iterator[Path]:
    house = tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "-w", str(house), str(action_checkout)], check=True,
                   capture_output=True)
    subprocess.run([*pip, "download", "-d", str(house), "setuptools>=68", "wheel"],
                   check=True, capture_output=True)
    for built in house.glob("gitray-*.whl"):
        built.unlink()  # gitray itself is installed from the checkout, as the action does
    yield house
