"""``gitray sync --shards S``: the setting (flag, environment, validation without a traceback)
and a pass's runs built per shard, each shard's executor its own (its fence, its label)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gitray.cli.app import _parser
from gitray.core.errors import ConfigError
from gitray.core.model import ObjectKey
from gitray.daemon.dispatch import Dispatcher
from gitray.daemon.settings import DaemonSettings
from gitray.engine.executor import Outcome, WorkloadOutcome
from gitray.engine.fleet import Fleet
from gitray.engine.ownership import Ownership, owned
from gitray.engine.shards import shard_of
from gitray.engine.wiring import ExecSettings
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

REPO_ROOT = Path(__file__).resolve().parents[3]

# ---- the setting ------------------------------------------------------------------------------


def test_unsharded_by_default() -> None:
    args = _parser().parse_args(["sync", "--repo", "r"])
    assert args.shards == 1


def test_the_flag_and_the_environment_set_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parser().parse_args(["sync", "--repo", "r", "--shards", "6"]).shards == 6
    monkeypatch.setenv("GITRAY_SHARDS", "4")
    assert _parser().parse_args(["sync", "--repo", "r"]).shards == 4
    assert _parser().parse_args(["sync", "--repo", "r", "--shards", "2"]).shards == 2


@pytest.mark.parametrize(("value", "says"), [
    ("0", "at least 1"),
    ("65", "is more than 64"),
    ("-2", "a whole number from 1 to 64 expected, got '-2'"),
    ("two", "a whole number from 1 to 64 expected, got 'two'"),
    ("1.5", "a whole number from 1 to 64 expected"),
])
def test_a_bad_count_is_one_usage_error_without_a_traceback(value: str, says: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KUBECONFIG": "/nonexistent"}
    result = subprocess.run([sys.executable, "-m", "gitray", "sync", "--repo", "r",
                             "--shards", value], capture_output=True, text=True, check=False,
                            cwd=REPO_ROOT, env=env)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gitray sync: error: argument --shards: "), result.stderr
    assert says in last
    assert "Traceback" not in result.stderr


def test_the_environment_is_checked_like_the_flag() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "GITRAY_SHARDS": "100"}
    result = subprocess.run([sys.executable, "-m", "gitray", "sync", "--repo", "r"],
                            capture_output=True, text=True, check=False, cwd=REPO_ROOT, env=env)
    assert result.returncode == 2 and "is more than 64" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("shards", [0, 65, -1])
def test_the_settings_refuse_an_impossible_count(shards: int) -> None:
    with pytest.raises(ConfigError):
        DaemonSettings(repo="r", execution=ExecSettings(lease_namespace="gitray"), shards=shards)
    assert DaemonSettings(repo="r", execution=ExecSettings(lease_namespace="gitray")).shards == 1


# ---- a pass's runs, an executor per (commit, shard) -------------------------------------------

STEP = Step("s1", StepType.CREATE_CLUSTER, "x", {})


class _Executor:
    """Stands in for the engine's executor: notes the workloads it was given to run."""

    def __init__(self, at: str, shard: int) -> None:
        self.at, self.shard = at, shard
        self.unparked: frozenset[ObjectKey] = frozenset()
        self.ran: list[ObjectKey] = []

    def run_workload(self, wp: WorkloadPlan, revision: str, resume: Any = None
                     ) -> WorkloadOutcome:
        self.ran.append(wp.key)
        return WorkloadOutcome(wp.key, Outcome.SUCCEEDED)


def _dispatch(plan: Plan, shard_of_key: Any) -> tuple[list[_Executor], list[ObjectKey]]:
    built: list[_Executor] = []
    ended: list[ObjectKey] = []
    done = threading.Event()

    def executor_for(at: str, _desired: Any, _check: Any, shard: int) -> _Executor:
        built.append(_Executor(at, shard))
        return built[-1]

    def on_end(key: ObjectKey, *_: Any) -> None:
        ended.append(key)
        if len(ended) == len(plan.workloads):
            done.set()

    fleet = Fleet(2, on_end)
    try:
        dispatcher = Dispatcher(fleet, None, lambda *_: None,  # type: ignore[arg-type]
                                executor_for, shard_of_key)  # type: ignore[arg-type]
        dispatcher("c" * 40, "drift", None, plan, {}, {}, [], lambda *_: None)  # type: ignore[arg-type]
        assert done.wait(10)
    finally:
        fleet.shutdown()
    return built, ended


KEYS = [ObjectKey("RayCluster", "ray", f"cl-{i}") for i in range(12)]
PLAN = Plan("c" * 40, "live", workloads=tuple(
    WorkloadPlan(k, Action.CREATE, 0, (STEP,), desired_hash="h") for k in KEYS))


def test_each_shards_runs_get_an_executor_of_their_own() -> None:
    own = Ownership(4, {s: 1 for s in range(4)})
    built, ended = _dispatch(PLAN, own.shard)
    assert sorted(ended) == sorted(KEYS)
    assert sorted(e.shard for e in built) == sorted({shard_of(k, 4) for k in KEYS})
    for executor in built:
        assert executor.at == "c" * 40
        assert executor.ran and all(shard_of(k, 4) == executor.shard for k in executor.ran)


def test_a_replica_runs_only_its_shards_workloads() -> None:
    own = Ownership(4, {1: 3, 3: 8})
    mine = replace(PLAN, workloads=tuple(owned(PLAN.workloads, own)))
    built, ended = _dispatch(mine, own.shard)
    assert sorted(ended) == sorted(k for k in KEYS if shard_of(k, 4) in {1, 3})
    assert {e.shard for e in built} <= {1, 3}


def test_unsharded_one_executor_runs_the_whole_commit_as_before() -> None:
    built, ended = _dispatch(PLAN, Ownership(1, {0: 1}).shard)
    assert [e.shard for e in built] == [0]
    assert sorted(built[0].ran) == sorted(KEYS) == sorted(ended)
