"""Steering an incremental upgrade in flight: promote, abort, failed analyses, rollback.

The pure rules of ``gitray.engine.incremental.upgradecontrol``, on real plans from the planner
(an upgrade of 25 % steps with maxSurgePercent 50, analysed, paused 5 min at 50 % and until
promoted at 100 %). Executing them — the signals in their ConfigMaps, the holds, the rollback's
writes — needs a real API server and a real Gateway (not done yet).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from gitray.cli.app import main
from gitray.cli.steer import parse_workload
from gitray.core.errors import AnalysisFailed, TerminalError, UserError
from gitray.core.model import ObjectKey
from gitray.engine.incremental.upgradecontrol import (
    Control,
    Signal,
    SignalAction,
    check_failure_limit,
    consumes,
    control,
    promotion_index,
    request,
    rollback_of,
    signal_from_json,
    signal_to_json,
)
from gitray.engine.record import Record, RunState, record_from_json, record_to_json
from gitray.plans.plan import WorkloadPlan
from gitray.plans.serve import live_config_at
from gitray.plans.steptypes import StepType
from tests.unit.builders import live
from tests.unit.plans.test_plan_incremental import ANALYSIS, KEY, incremental, one, plan_of

T = StepType
OLD_SPEC = incremental("ray:old", step=25, surge=50)
PLAN = one(plan_of(incremental("ray:new", step=25, surge=50, analysis=ANALYSIS),
                   live(OLD_SPEC)))
KEPT = one(plan_of(incremental("ray:new", step=25, surge=50,
                               analysis=ANALYSIS + "keepFailedClusters: true\n"),
                   live(OLD_SPEC)))
UNPAUSED = one(plan_of(incremental("ray:new", step=25, surge=50), live(OLD_SPEC)))
STEPS = [s.type for s in PLAN.steps]
OLD, NEW = str(PLAN.steps[5].params["from"]), str(PLAN.steps[5].params["cluster"])
FIRST_ANALYSIS, PAUSE_50, PAUSE_100 = 6, 9, 17  # indexes (see the plan's shape test)
NOW = "2026-12-02T10:00:00Z"


def at(cursor: int, state: RunState = RunState.RUNNING, plan: WorkloadPlan = PLAN) -> Record:
    return Record(key=KEY, revision="r" * 40, desired_hash=plan.desired_hash, plan=plan,
                  cursor=cursor, steps=(), state=state, reason="", epoch=3, updated_at=NOW)


def signal(action: SignalAction, step: str = "", **changes: Any) -> Signal:
    return replace(Signal(action, KEY, "r" * 40, PLAN.desired_hash, step, NOW, "ana"),
                   **changes)


def test_the_plan_used_here_has_the_shape_these_tests_assume() -> None:
    assert (STEPS[5], STEPS[FIRST_ANALYSIS], STEPS[PAUSE_50], STEPS[PAUSE_100]) == (
        T.SHIFT_TRAFFIC, T.RUN_ANALYSIS, T.PAUSE, T.PAUSE)
    assert promotion_index(PLAN) == 18 and STEPS[18] is T.SWITCH_SERVICE


# ---- promote and abort: what the commands write ---------------------------------------------


@pytest.mark.parametrize(("case", "record", "action", "refusal"), [
    ("a finished run", at(21, RunState.SUCCEEDED), SignalAction.PROMOTE,
     "no upgrade of ray/RayService/svc is in flight: its last run succeeded"),
    ("a failed run", replace(at(6, RunState.FAILED), reason="step 7/21 run-analysis failed"),
     SignalAction.ABORT, "its last run failed at revision rrrrrrrrrrrr: step 7/21"),
    ("a blue-green upgrade", at(0, plan=one(plan_of(incremental("ray:new"), live()))),
     SignalAction.ABORT, "is not an incremental upgrade"),
    ("every Service switched already", at(19), SignalAction.ABORT,
     "too late to abort ray/RayService/svc: all traffic moved to the new cluster and the "
     "upgrade is at step 20/21 switch-service; revert the commit"),
    ("an upgrade without pauses", at(6, plan=UNPAUSED), SignalAction.PROMOTE,
     "nothing to promote: the upgrade of ray/RayService/svc has no pause ahead (it is at "
     "step 7/19 wait-interval)"),
])
def test_a_command_is_refused_with_the_reason(case: str, record: Record, action: SignalAction,
                                              refusal: str) -> None:
    with pytest.raises(UserError, match=re.escape(refusal)):
        request(record, action, None, NOW)


def test_promote_at_a_pause_ends_it_now() -> None:
    done = request(at(PAUSE_50), SignalAction.PROMOTE, None, NOW, "ana")
    assert done.signal == signal(SignalAction.PROMOTE, PLAN.steps[PAUSE_50].id)
    assert done.message == ("promoted ray/RayService/svc: the pause at 50 % (step 10/21) "
                            "ends now")


def test_promote_ahead_of_a_pause_ends_the_next_one_when_it_is_reached() -> None:
    done = request(at(12), SignalAction.PROMOTE, None, NOW)
    assert done.signal is not None and done.signal.step == PLAN.steps[PAUSE_100].id
    assert done.message.endswith("the pause at 100 % (step 18/21) ends as soon as the "
                                 "upgrade reaches it")


def test_promoting_twice_writes_nothing_the_second_time() -> None:
    pending = signal(SignalAction.PROMOTE, PLAN.steps[PAUSE_50].id, resource_version="7")
    done = request(at(PAUSE_50), SignalAction.PROMOTE, pending, NOW)
    assert done.signal is None and done.message.endswith("is already promoted")


def test_a_pending_abort_is_not_overridden_by_a_promote() -> None:
    with pytest.raises(UserError, match="an abort of ray/RayService/svc is pending"):
        request(at(PAUSE_50), SignalAction.PROMOTE, signal(SignalAction.ABORT), NOW)


def test_abort_replaces_a_pending_promote_by_compare_and_swap() -> None:
    pending = signal(SignalAction.PROMOTE, PLAN.steps[PAUSE_100].id, resource_version="41")
    done = request(at(8), SignalAction.ABORT, pending, NOW, "ana")
    assert done.signal == signal(SignalAction.ABORT, resource_version="41")
    assert done.message.startswith("abort of ray/RayService/svc requested at step 9/21 "
                                   "run-analysis")


def test_aborting_twice_writes_nothing_the_second_time() -> None:
    done = request(at(8), SignalAction.ABORT, signal(SignalAction.ABORT), NOW)
    assert done.signal is None and "already pending" in done.message


@pytest.mark.parametrize("left", [
    signal(SignalAction.ABORT, revision="o" * 40, resource_version="5"),  # another run's
    signal(SignalAction.ABORT, consumed_at=NOW, resource_version="5"),  # acted on already
])
def test_a_signal_of_another_run_or_acted_on_is_replaced(left: Signal) -> None:
    done = request(at(8), SignalAction.ABORT, left, NOW)
    assert done.signal is not None and done.signal.pending
    assert (done.signal.revision, done.signal.resource_version) == ("r" * 40, "5")


def test_a_signal_reads_back_as_written() -> None:
    s = signal(SignalAction.PROMOTE, "10-pause", consumed_at=NOW)
    assert signal_from_json(signal_to_json(s), "9") == replace(s, resource_version="9")
    with pytest.raises(ValueError, match="formatVersion"):
        signal_from_json({**signal_to_json(s), "formatVersion": 2})


# ---- what the executor makes of a signal ----------------------------------------------------


@pytest.mark.parametrize(("case", "given", "index", "expected"), [
    ("no signal", None, PAUSE_50, Control.NONE),
    ("acted on already", signal(SignalAction.ABORT, consumed_at=NOW), 8, Control.NONE),
    ("another run's", signal(SignalAction.ABORT, desired_hash="x"), 8, Control.STALE),
    ("an abort, at any step", signal(SignalAction.ABORT), 3, Control.ABORT),
    ("a promote of this pause", signal(SignalAction.PROMOTE, "10-pause"), PAUSE_50,
     Control.PROMOTE),
    ("a promote of a later pause waits for it", signal(SignalAction.PROMOTE, "18-pause"),
     PAUSE_50, Control.NONE),
    ("a promote means nothing to a traffic step", signal(SignalAction.PROMOTE, "10-pause"), 7,
     Control.NONE),
])
def test_what_a_signal_means_for_a_step(case: str, given: Signal | None, index: int,
                                        expected: Control) -> None:
    assert PLAN.steps[PAUSE_50].id == "10-pause" and PLAN.steps[PAUSE_100].id == "18-pause"
    assert control(given, KEY, "r" * 40, PLAN.desired_hash, PLAN.steps[index]) is expected, case


@pytest.mark.parametrize(("what", "by_the_step", "at_a_boundary"), [
    (Control.NONE, False, False),
    (Control.STALE, True, True),  # another run's: consumed by any look
    (Control.ABORT, False, False),  # consumed once rolled back (consume_abort)
    # the pause (or gate) it names consumes it; the look for an abort before that step starts,
    # or each time a parked pause is resumed at its step, must leave it for the step: eaten
    # there, the pause would hold until promoted again, forever
    (Control.PROMOTE, True, False),
    (Control.APPROVE, True, False),
])
def test_which_look_consumes_a_signal(what: Control, by_the_step: bool,
                                      at_a_boundary: bool) -> None:
    assert consumes(what, at_boundary=False) is by_the_step
    assert consumes(what, at_boundary=True) is at_a_boundary


# ---- failed analyses ------------------------------------------------------------------------


def test_failed_analyses_count_over_the_whole_upgrade_up_to_the_limit() -> None:
    analysis = PLAN.steps[8]  # failureLimit 2
    failed = AnalysisFailed("success-rate 91.2 % < 99 % (114 of 125 requests) on x", "success-rate",
                            "91.2 %")
    check_failure_limit(analysis, ["07-run-analysis: latency p95 420 ms > 300 ms"], failed)
    with pytest.raises(AnalysisFailed) as caught:
        check_failure_limit(analysis, ["07-run-analysis: latency p95 420 ms > 300 ms",
                                       "09-run-analysis: success-rate 91.2 %"], failed)
    assert str(caught.value) == ("success-rate 91.2 % < 99 % (114 of 125 requests) on x; "
                                 "failed analyses 2/2 (failureLimit)")
    assert caught.value.check == "success-rate" and caught.value.value == "91.2 %"


def test_an_analysis_resumed_after_the_limit_fails_at_once_with_the_last_failure() -> None:
    with pytest.raises(TerminalError, match=r"^success-rate 91.2 % < 99 %; failed analyses 2/2"):
        check_failure_limit(PLAN.steps[14], ["07-run-analysis: latency 1",
                                             "09-run-analysis: success-rate 91.2 % < 99 %"])
    check_failure_limit(PLAN.steps[13], ["a", "b", "c"])  # not an analysis: no limit


def test_the_run_record_keeps_its_failed_analyses() -> None:
    record = replace(at(8), analysis_failures=("07-run-analysis: latency p95 420 ms",))
    data = record_to_json(record)
    assert data["analysisFailures"] == ["07-run-analysis: latency p95 420 ms"]
    assert record_from_json(data) == record
    assert "analysisFailures" not in record_to_json(at(8))


# ---- rollback -------------------------------------------------------------------------------


def test_a_rollback_sends_all_traffic_back_restores_capacity_and_deletes_the_new() -> None:
    rollback = rollback_of(PLAN, 14, keep_default=False)  # the analysis at 75 % failed
    assert rollback is not None and (rollback.old, rollback.new, rollback.keep) == (
        OLD, NEW, False)
    assert [(s.type, s.target) for s in rollback.steps] == [
        (T.SHIFT_TRAFFIC, "svc-httproute"), (T.SET_SERVE_CAPACITY, OLD),
        (T.DELETE_SERVICE, f"{NEW}-serve-svc"), (T.DELETE_CLUSTER, NEW)]
    shift = rollback.steps[0].params
    assert shift["manifest"]["spec"]["rules"][0]["backendRefs"] == [  # type: ignore[index]
        {"group": "", "kind": "Service", "name": f"{OLD}-serve-svc", "namespace": "ray",
         "port": 8000, "weight": 100}]
    assert rollback.steps[1].params == {"cluster": OLD, "targetCapacity": 100}
    assert "serveConfig" not in rollback.steps[1].params  # the old cluster's own config


def test_a_rollback_keeps_the_new_cluster_when_the_analysis_says_so() -> None:
    rollback = rollback_of(KEPT, 6, keep_default=False)
    assert rollback is not None and rollback.keep
    assert [s.type for s in rollback.steps] == [T.SHIFT_TRAFFIC, T.SET_SERVE_CAPACITY]


def test_a_failed_traffic_step_is_rolled_back_too() -> None:
    assert rollback_of(PLAN, 5, keep_default=True) is not None  # it may have half applied


@pytest.mark.parametrize(("case", "failed_at"), [
    ("before any traffic moved the pending cluster is simply dropped", 3),
    ("once every Service was switched a revert rolls back", 19),
])
def test_no_rollback(case: str, failed_at: int) -> None:
    assert rollback_of(PLAN, failed_at, keep_default=False) is None, case


# ---- the old cluster's Serve config, sent again at another capacity --------------------------


def test_the_live_serve_config_is_sent_again_with_the_new_capacity() -> None:
    details: dict[str, Any] = {
        "proxy_location": "EveryNode", "http_options": {"host": "0.0.0.0", "port": 8000},
        "target_capacity": 50,
        "applications": {
            "greeter": {"status": "RUNNING", "deployed_app_config": {
                "name": "greeter", "import_path": "app:greeter", "route_prefix": "/"}},
            "calc": {"status": "RUNNING", "deployed_app_config": {
                "name": "calc", "import_path": "app:calc", "route_prefix": "/calc"}}}}
    assert live_config_at(details, 100) == {
        "proxy_location": "EveryNode", "http_options": {"host": "0.0.0.0", "port": 8000},
        "applications": [{"name": "calc", "import_path": "app:calc", "route_prefix": "/calc"},
                         {"name": "greeter", "import_path": "app:greeter",
                          "route_prefix": "/"}],
        "target_capacity": 100}
    assert live_config_at({"applications": {}}, 100) is None


# ---- the commands' argument ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["fruit", "ray-serve/", "/fruit", "a/b/c"])
def test_promote_and_abort_name_a_rayservice_as_namespace_slash_name(text: str) -> None:
    with pytest.raises(UserError, match="expected NAMESPACE/RAYSERVICE"):
        parse_workload(text)
    assert parse_workload("ray-serve/fruit") == ObjectKey("RayService", "ray-serve", "fruit")


def test_a_bad_workload_is_one_line_and_exit_code_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["abort", "fruit"]) == 1
    assert capsys.readouterr().err == ("gitray: error: expected NAMESPACE/RAYSERVICE, got "
                                       "'fruit'\n")
