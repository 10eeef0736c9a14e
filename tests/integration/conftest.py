"""Integration tests against the real environment (see docs/testenv.md).

The environment fixtures (`testenv`, `gateway`, `kwokenv`, `namespace`, `kwok_namespace`) come
from the test environment's pytest plugin, `testenv/fixtures.py`. Here:

- every test in tests/integration/ is marked `integration`;
- tests marked `own_node` start an environment with the real node of their own; they are run
  first (the session's environment holds the machine's one real node from its start to the end
  of the session), so they cannot run beside a reused `$GITRAY_TESTENV_STATE`;
- the longest modules come first (`LONGEST`): the order in one process (own_node, alone).
  Not in the lanes: pytest-xdist hands out modules by their number of tests, and
  `testenv/lanes.py` puts only the long modules that mostly wait first (all the longest
  first put two real-Ray modules side by side at once: commit 30e8e30);
- `remote` (function): a bare Git repository (`main`) in the test's tmp dir and a work clone
  (`GitOpsRepo`) whose `origin` it is: what `gitray sync` tests push to;
- `sync_proc` (function): `gitray sync` of `remote`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testenv.helpers import (
    TestEnv,
)
from tests.integration.chaos import Replica
from tests.integration.gitops import GitOpsRepo

HERE = Path(__file__).resolve().parent
# The longest modules of the lanes, longest first: seconds in the full run of c1da7c4
# (2026-12-05; test_fleet.py holds a 10-minute RayJob), rounded.
LONGEST = {f"tests/integration/{name}": seconds for name, seconds in (
    ("test_fleet.py", 900), ("test_apply_rayservice.py", 310), ("test_health_notices.py", 280),
    ("test_kuberay_fields.py", 215), ("test_sensitive.py", 200), ("test_handover.py", 140),
    ("test_incluster.py", 135), ("test_apply_workloads.py", 110), ("test_daemon.py", 110))}
LONGEST["bench/smoke_test.py"] = 120


def _longest_first(item: pytest.Item) -> int:
    path = Path(str(item.fspath)).resolve()
    return -LONGEST.get(str(path.relative_to(HERE.parents[1])), 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
    # The machine has one real node. Tests that bring up an environment of their own with it
    # (`scripts/testenv up`/`down`, the README walkthrough) run first, before the session's
    # environment takes the node and holds it to the end.
    items.sort(key=lambda item: (item.get_closest_marker("own_node") is None,
                                 _longest_first(item)))


@pytest.fixture
def remote(tmp_path: Path) -> tuple[Path, GitOpsRepo]:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))
    return bare, work


@pytest.fixture
def sync_proc(testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo],
              tmp_path: Path) -> Iterator[Replica]:
    """``gitray sync`` of ``remote`` (1 s polls, statuses as the test's gitray.yaml says)."""
    from tests.integration.test_daemon import start_sync

    bare, _ = remote
    sync = start_sync(testenv, namespace, bare, tmp_path)
    yield sync
    sync.terminate()
