"""Freeze windows: cron schedules, which windows are open when, which workloads they hold,
how gitray.yaml states them, and what plans, `gitray apply` and its override do with them."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitray.core.config import Config, FreezeScope, FreezeWindow
from gitray.core.errors import ConfigError
from gitray.core.model import ObjectKey
from gitray.engine.apply import freeze
from gitray.engine.executor import Outcome
from gitray.engine.record import Record, RunState
from gitray.parsing.config import parse_config
from gitray.parsing.cron import parse_cron
from gitray.plans.freeze import Freeze, freeze_note, frozen_workloads, open_windows
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.planner import compute_plan
from gitray.plans.steptypes import StepType
from testenv.manifests import dump, gitray_config
from tests.unit.builders import NOW, live, raycluster, rayservice

MON_NOON = NOW  # 2026-11-30 12:00 UTC, a Monday


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# ---- cron -------------------------------------------------------------------------------

@pytest.mark.parametrize(("expr", "when", "fires"), [
    ("* * * * *", "2026-11-30T12:00", True),
    ("0 18 * * fri", "2026-12-04T18:00", True),
    ("0 18 * * fri", "2026-12-04T18:01", False),
    ("0 18 * * FRI", "2026-12-04T18:00", True),
    ("0 18 * * 5", "2026-12-03T18:00", False),  # a Thursday
    ("0 0 * * 0", "2026-12-06T00:00", True),  # Sunday as 0 ...
    ("0 0 * * 7", "2026-12-06T00:00", True),  # ... and as 7
    ("*/15 9-17 * * mon-fri", "2026-11-30T09:45", True),
    ("*/15 9-17 * * mon-fri", "2026-11-30T09:50", False),
    ("*/15 9-17 * * mon-fri", "2026-11-30T18:00", False),
    ("0 0 20 dec *", "2026-12-20T00:00", True),
    ("0 0 20 12 *", "2026-11-20T00:00", False),
    ("0 0 1,15 * *", "2026-11-15T00:00", True),
    ("30 2 1-7/3 * *", "2026-11-04T02:30", True),
    ("30 2 1-7/3 * *", "2026-11-05T02:30", False),
    ("5/20 * * * *", "2026-11-30T12:45", True),  # 5, 25, 45
    # day of month and day of week both restricted: either matches (as cron does)
    ("0 0 13 * fri", "2026-11-13T00:00", True),  # a Friday the 13th
    ("0 0 13 * fri", "2026-12-13T00:00", True),  # the 13th, a Sunday
    ("0 0 13 * fri", "2026-12-04T00:00", True),  # a Friday, the 4th
    ("0 0 13 * fri", "2026-12-05T00:00", False),
])
def test_cron_schedules_fire_where_cron_would(expr: str, when: str, fires: bool) -> None:
    assert parse_cron(expr).matches(at(when)) is fires


@pytest.mark.parametrize(("expr", "message"), [
    ("0 18 * *", "needs 5 fields"),
    ("60 * * * *", "minute: 60 is outside 0-59"),
    ("* 24 * * *", "hour: 24 is outside 0-23"),
    ("* * 0 * *", "day of month: 0 is outside 1-31"),
    ("* * * 13 *", "month: 13 is outside 1-12"),
    ("* * * * 8", "day of week: 8 is outside 0-7"),
    ("* * * * fry", "'fry' is not a number or one of sun, mon"),
    ("*/0 * * * *", "the step must be a positive number"),
    ("10-5 * * * *", "the range runs backwards"),
    ("a * * * *", "minute: 'a' is not a number"),
])
def test_bad_cron_schedules_say_what_is_wrong(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cron(expr)


# ---- open windows -----------------------------------------------------------------------

WEEKEND = FreezeWindow("weekend", "0 18 * * fri", 62 * 3600, "Europe/Berlin")


@pytest.mark.parametrize(("when", "until"), [
    ("2026-12-04T16:59", None),  # 17:59 in Berlin
    ("2026-12-04T17:00", "2026-12-07T07:00"),  # opens at 18:00 Berlin (UTC+1)
    ("2026-12-06T12:00", "2026-12-07T07:00"),
    ("2026-12-07T06:59", "2026-12-07T07:00"),
    ("2026-12-07T07:00", None),  # closed on the minute
])
def test_a_window_is_open_from_its_opening_for_its_duration(when: str, until: str | None
                                                             ) -> None:
    got = open_windows([WEEKEND], at(when))
    assert got == ([] if until is None else [Freeze("weekend", FreezeScope.ALL, at(until))])


def test_the_time_zone_follows_daylight_saving() -> None:
    summer = at("2026-07-03T16:00")  # 18:00 in Berlin in summer (UTC+2)
    assert open_windows([WEEKEND], summer)[0].until == at("2026-07-06T06:00")
    assert open_windows([WEEKEND], summer - timedelta(minutes=1)) == []


def test_overlapping_openings_make_one_longer_window() -> None:
    daily = FreezeWindow("nights", "0 20 * * *", 26 * 3600)  # each night overlaps the next
    [f] = open_windows([daily], at("2026-11-30T21:00"))
    # opened Nov 30 20:00 and every evening after: followed 31 days ahead, never "closed"
    # while it is still open
    assert at("2026-12-31T00:00") < f.until < at("2027-01-03T00:00")
    one = FreezeWindow("evening", "0 20 * * *", 3600)
    assert open_windows([one], at("2026-11-30T20:30"))[0].until == at("2026-11-30T21:00")


def test_a_window_at_most_31_days_long_is_found_at_its_far_end() -> None:
    holidays = FreezeWindow("holidays", "0 0 20 dec *", 14 * 24 * 3600)
    assert open_windows([holidays], at("2027-01-02T23:59"))[0].until == at("2027-01-03T00:00")
    assert open_windows([holidays], at("2027-01-03T00:00")) == []


# ---- which workloads a window holds -----------------------------------------------------

def wp(name: str, action: Action, *types: StepType) -> WorkloadPlan:
    return WorkloadPlan(ObjectKey("RayService", "ray", name), action, 0,
                        tuple(Step(f"s{i}", t, name) for i, t in enumerate(types)),
                        desired_hash="h" if action is not Action.DELETE else "")


PLAN = Plan("abc", "live", workloads=(
    wp("upgrade", Action.REPLACE, StepType.CREATE_CLUSTER, StepType.WAIT_CLUSTER_READY),
    wp("serve-only", Action.UPDATE, StepType.DEPLOY_SERVE),
    wp("retired", Action.NOOP, StepType.DELETE_CLUSTER),
    wp("pruned", Action.DELETE, StepType.DELETE_CLUSTER),
    wp("idle", Action.NOOP),
))
OPEN = at("2026-12-05T12:00")


def names(held: dict[ObjectKey, Freeze]) -> list[str]:
    return sorted(k.name for k in held)


def test_scope_all_holds_every_change_but_a_retired_clusters_deletion() -> None:
    assert names(frozen_workloads(PLAN, [WEEKEND], OPEN)) == ["pruned", "serve-only",
                                                              "upgrade"]
    assert frozen_workloads(PLAN, [WEEKEND], MON_NOON) == {}
    assert frozen_workloads(PLAN, [], OPEN) == {}


def test_scope_new_clusters_holds_only_changes_that_create_one() -> None:
    window = replace(WEEKEND, scope=FreezeScope.NEW_CLUSTERS)
    assert names(frozen_workloads(PLAN, [window], OPEN)) == ["upgrade"]


def test_the_window_closing_last_is_the_one_named() -> None:
    later = FreezeWindow("long", "0 0 * * sat", 4 * 24 * 3600)
    held = frozen_workloads(PLAN, [WEEKEND, later], OPEN)
    assert held[ObjectKey("RayService", "ray", "upgrade")].window == "long"
    assert freeze_note(held[ObjectKey("RayService", "ray", "upgrade")]) == \
        "held: freeze window long (all changes) until 2026-12-09T00:00:00Z"


# ---- gitray.yaml ------------------------------------------------------------------------

def config_of(windows: str) -> Config:
    return parse_config(f"apiVersion: gitray.io/v1alpha1\nkind: Config\nfreezeWindows:\n"
                        f"{windows}".encode())


def test_gitray_yaml_states_windows() -> None:
    config = config_of("- name: weekend\n  schedule: '0 18 * * fri'\n  duration: 62h\n"
                       "  timeZone: Europe/Berlin\n- name: deploys\n  schedule: '0 9 * * *'\n"
                       "  duration: 30m\n  scope: new-clusters\n")
    assert config.freeze_windows == (
        WEEKEND, FreezeWindow("deploys", "0 9 * * *", 1800, "UTC", FreezeScope.NEW_CLUSTERS))


@pytest.mark.parametrize(("window", "message"), [
    ("- name: w\n  schedule: '0 18 * *  '\n  duration: 1h\n",
     "gitray.yaml:5:3: freezeWindows[0].schedule: '0 18 * *  ' is not a cron schedule"),
    ("- name: w\n  schedule: '0 25 * * *'\n  duration: 1h\n",
     "gitray.yaml:5:3: freezeWindows[0].schedule: hour: 25 is outside 0-23"),
    ("- name: w\n  schedule: '0 1 * * *'\n  duration: 1h\n  timeZone: Mars/Olympus\n",
     "gitray.yaml:7:3: freezeWindows[0].timeZone: 'Mars/Olympus' is not a known IANA time zone"),
    ("- name: w\n  schedule: '0 1 * * *'\n  duration: 32d\n", "freezeWindows[0].duration"),
    ("- name: w\n  schedule: '0 1 * * *'\n  duration: 800h\n",
     "gitray.yaml:6:3: freezeWindows[0].duration: must be between 1m and 31 days"),
    ("- name: w\n  schedule: '0 1 * * *'\n", "'duration' is a required property"),
    ("- name: w\n  schedule: '0 1 * * *'\n  duration: 1h\n  scope: upgrades\n",
     "freezeWindows[0].scope"),
])
def test_bad_windows_are_config_errors_at_their_lines(window: str, message: str) -> None:
    with pytest.raises(ConfigError, match=_escape(message)):
        config_of(window)


def _escape(text: str) -> str:
    return re.escape(text)


# ---- plans say it; apply holds it or records the override -------------------------------

def test_a_plan_notes_the_hold_on_each_held_workload() -> None:
    config = Config(freeze_windows=(WEEKEND,))
    svc = rayservice("fruit")
    changed = rayservice("fruit", image="rayproject/ray:2.61.0")
    state = live(svc)
    plan = compute_plan((changed,), state, config, revision="r", against="live", now=OPEN)
    [w] = plan.workloads
    assert w.steps and "held: freeze window weekend (all changes) until " \
        "2026-12-07T07:00:00Z" in w.notes
    quiet = compute_plan((changed,), state, config, revision="r", against="live",
                         now=MON_NOON)
    assert not any("freeze" in n for n in quiet.workloads[0].notes)


def record_for(w: WorkloadPlan) -> Record:
    return Record(w.key, "abc", w.desired_hash, w, 1, (), RunState.RUNNING, "", 1, "")


def test_apply_holds_frozen_workloads_and_lets_running_ones_finish() -> None:
    config = Config(freeze_windows=(WEEKEND,))
    upgrade = PLAN.workloads[0]
    plan, held = freeze(PLAN, config, {upgrade.key: record_for(upgrade)}, OPEN)
    assert sorted((o.key.name, o.outcome) for o in held) == [
        ("pruned", Outcome.SKIPPED), ("serve-only", Outcome.SKIPPED)]
    assert "held: freeze window weekend" in held[0].reason
    assert "--override-freeze REASON" in held[0].reason
    steps = {w.key.name: len(w.steps) for w in plan.workloads}
    assert steps == {"upgrade": 2, "serve-only": 0, "retired": 1, "pruned": 0, "idle": 0}
    assert freeze(PLAN, config, {}, MON_NOON) == (PLAN, [])


def test_an_override_runs_them_and_their_plans_keep_the_reason() -> None:
    config = Config(freeze_windows=(WEEKEND,))
    plan, held = freeze(PLAN, config, {}, OPEN, "hotfix for incident 42")
    assert held == []
    assert [len(w.steps) for w in plan.workloads] == [len(w.steps) for w in PLAN.workloads]
    notes = {w.key.name: w.notes for w in plan.workloads}
    assert notes["upgrade"] == ("freeze window weekend overridden: hotfix for incident 42",)
    assert notes["retired"] == () and notes["idle"] == ()


def test_apply_refuses_an_override_without_a_reason(tmp_path: Path) -> None:
    for reason in ("", "   "):
        run = subprocess.run([sys.executable, "-m", "gitray", "apply", "--repo", str(tmp_path),
                              "--override-freeze", reason], capture_output=True, text=True,
                             check=False, timeout=60)
        assert run.returncode == 2
        assert "--override-freeze: give a reason" in run.stderr
        assert "Traceback" not in run.stderr


def test_gitray_plan_shows_the_hold(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "gitray.yaml").write_text(gitray_config(freezeWindows=[
        {"name": "always", "schedule": "* * * * *", "duration": "1h",
         "scope": "new-clusters"}]))
    (repo / "svc.yaml").write_text(dump(raycluster("cl").manifest))
    run = subprocess.run([sys.executable, "-m", "gitray", "plan", "--repo", str(repo),
                          "--against", "empty"], capture_output=True, text=True, check=False,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert "held: freeze window always (new clusters) until " in run.stdout
