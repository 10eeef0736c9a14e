"""The gates of a blue-green upgrade on the executor's side: ``gitray approve`` (a signal as
promote and abort are), the switch-back after a failed after-switch analysis, and what a
probe's answers measure. The pure rules (``gitray.engine.gates``,
``gitray.engine.incremental.upgradecontrol``, ``gitray.engine.incremental.probes``) on real
plans from the planner; their I/O runs in tests/integration/test_bluegreen_gates.py."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gitray.cli.control import parse_for
from gitray.core.errors import AnalysisFailed, UserError
from gitray.core.model import ObjectKey
from gitray.engine.gates import gated, keep_failed, own_service, switch_back_of
from gitray.engine.incremental.checks import judge, latency, success_rate
from gitray.engine.incremental.probes import probe_traffic
from gitray.engine.incremental.upgradecontrol import (
    Control,
    Signal,
    SignalAction,
    control,
    request,
)
from gitray.engine.record import Record, RunState
from gitray.plans.plan import WorkloadPlan
from gitray.plans.steptypes import StepType
from tests.unit.builders import live
from tests.unit.plans.test_plan_bluegreen import GATES, OLD, A, B, blue_green
from tests.unit.plans.test_plan_incremental import KEY, one, plan_of

T = StepType
PLAN = one(plan_of(blue_green("ray:new", GATES + "approve: true\n"), live(OLD)))
KEPT = one(plan_of(blue_green("ray:new", GATES + "keepFailedClusters: true\n"), live(OLD)))
PLAIN = one(plan_of(blue_green("ray:new"), live(OLD)))
TYPES = [s.type for s in PLAN.steps]
BEFORE, APPROVAL, AFTER = 5, 6, 9  # indexes (see the shape test)
NOW = "2026-12-04T10:00:00Z"


def at(cursor: int, plan: WorkloadPlan = PLAN, state: RunState = RunState.RUNNING) -> Record:
    return Record(key=KEY, revision="r" * 40, desired_hash=plan.desired_hash, plan=plan,
                  cursor=cursor, steps=(), state=state, reason="", epoch=1, updated_at=NOW)


def test_the_plan_used_here_has_the_shape_these_tests_assume() -> None:
    assert (TYPES[BEFORE], TYPES[APPROVAL], TYPES[AFTER]) == (
        T.RUN_ANALYSIS, T.AWAIT_APPROVAL, T.RUN_ANALYSIS)
    assert TYPES[7:9] == [T.SWITCH_SERVICE, T.SWITCH_SERVICE]


# ---- approve ----------------------------------------------------------------------------------


def test_approve_at_the_gate_ends_it_now() -> None:
    decided = request(at(APPROVAL), SignalAction.APPROVE, None, NOW, "ana@laptop")
    assert decided.signal == Signal(SignalAction.APPROVE, KEY, "r" * 40, PLAN.desired_hash,
                                    PLAN.steps[APPROVAL].id, NOW, "ana@laptop")
    assert decided.message == (f"approved ray/RayService/svc: the switch to {B} (step 7/11) "
                               "goes ahead now")


def test_approve_ahead_of_the_gate_ends_it_when_it_is_reached() -> None:
    decided = request(at(2), SignalAction.APPROVE, None, NOW)
    assert decided.signal is not None and decided.signal.step == PLAN.steps[APPROVAL].id
    assert decided.message.endswith("goes ahead as soon as the upgrade reaches it")


def test_approve_twice_writes_nothing_the_second_time() -> None:
    first = request(at(APPROVAL), SignalAction.APPROVE, None, NOW).signal
    assert first is not None
    again = request(at(APPROVAL), SignalAction.APPROVE, replace(first, resource_version="7"),
                    NOW)
    assert again.signal is None and "is already approved" in again.message


def test_approve_replaces_a_consumed_signal_by_compare_and_swap() -> None:
    old = Signal(SignalAction.PROMOTE, KEY, "q" * 40, "h", "x", NOW, consumed_at=NOW,
                 resource_version="41")
    decided = request(at(APPROVAL), SignalAction.APPROVE, old, NOW)
    assert decided.signal is not None and decided.signal.resource_version == "41"


@pytest.mark.parametrize(("record", "refusal"), [
    (at(APPROVAL, state=RunState.SUCCEEDED),
     "no upgrade of ray/RayService/svc is in flight: its last run succeeded"),
    (at(8), "nothing to approve: the run of ray/RayService/svc in flight has no approval "
            "gate ahead (it is at step 9/11 switch-service)"),
    (at(0, plan=PLAIN), "nothing to approve"),
], ids=["finished", "past the gate", "no gate"])
def test_approve_is_refused_with_the_reason(record: Record, refusal: str) -> None:
    with pytest.raises(UserError, match=re.escape(refusal)):
        request(record, SignalAction.APPROVE, None, NOW)


def test_an_approval_ends_only_its_own_gate() -> None:
    approval = request(at(APPROVAL), SignalAction.APPROVE, None, NOW).signal
    assert approval is not None
    gate, other = PLAN.steps[APPROVAL], PLAN.steps[BEFORE]
    run = (KEY, "r" * 40, PLAN.desired_hash)
    assert control(approval, *run, gate) is Control.APPROVE
    assert control(approval, *run, other) is Control.NONE  # kept until the gate is reached
    assert control(replace(approval, consumed_at=NOW), *run, gate) is Control.NONE
    assert control(approval, KEY, "s" * 40, PLAN.desired_hash, gate) is Control.STALE
    promote = replace(approval, action=SignalAction.PROMOTE)
    assert control(promote, *run, gate) is Control.NONE  # a promote is no approval


def test_only_plans_with_an_approval_gate_read_signals() -> None:
    assert gated(PLAN) and not gated(KEPT) and not gated(PLAIN)


@pytest.mark.parametrize(("text", "key"), [
    ("ray/RayService/svc", KEY), ("ray/rayservice/svc", KEY), ("ray/svc", KEY)])
def test_approve_names_a_workload_either_way(text: str, key: ObjectKey) -> None:
    assert parse_for("approve", text) == key


def test_approve_refuses_a_malformed_name() -> None:
    with pytest.raises(UserError, match="expected NAMESPACE/KIND/NAME"):
        parse_for("approve", "ray/RayService/svc/x")


# ---- switch-back ------------------------------------------------------------------------------


def test_a_failed_after_switch_gate_switches_both_services_back_and_deletes_the_new() -> None:
    back = switch_back_of(PLAN, AFTER, keep_default=False)
    assert back is not None and (back.old, back.new, back.keep) == (A, B, False)
    assert [(s.type, s.target, s.params.get("cluster")) for s in back.steps] == [
        (T.SWITCH_SERVICE, "svc-head-svc", A), (T.SWITCH_SERVICE, "svc-serve-svc", A),
        (T.DELETE_SERVICE, f"{B}-serve-svc", None), (T.DELETE_CLUSTER, B, B)]
    head, serve = back.steps[0].params, back.steps[1].params
    assert head == {"role": "head", "cluster": A, "from": B,
                    "selector": {"ray.io/cluster": A, "ray.io/node-type": "head"}}
    assert serve["selector"] == {"ray.io/cluster": A, "gitray.io/serve": "true"}


def test_a_kept_failed_cluster_is_only_switched_away_from() -> None:
    index = next(i for i, s in enumerate(KEPT.steps) if s.params.get("gate") == "after-switch")
    back = switch_back_of(KEPT, index, keep_default=False)
    assert back is not None and back.keep
    assert [s.type for s in back.steps] == [T.SWITCH_SERVICE, T.SWITCH_SERVICE]


@pytest.mark.parametrize("failed_at", [BEFORE, APPROVAL, 3, 7],
                         ids=["before-switch gate", "approval", "a wait", "a switch"])
def test_only_an_after_switch_gate_switches_back(failed_at: int) -> None:
    assert switch_back_of(PLAN, failed_at, keep_default=False) is None


def test_keep_failed_follows_the_annotation_then_the_default() -> None:
    assert keep_failed(KEPT, False) is True
    assert keep_failed(PLAN, True) is False  # written into the gates from gitray.yaml's
    assert keep_failed(PLAIN, True) is True and keep_failed(PLAIN, False) is False


def test_the_new_clusters_own_serve_service_is_known_only_where_the_plan_made_it() -> None:
    assert own_service(PLAN, B) == f"{B}-serve-svc"
    assert own_service(PLAIN, B) is None


# ---- what a probe measured --------------------------------------------------------------------


def test_a_probe_counts_5xx_and_no_answer_as_server_errors() -> None:
    traffic = probe_traffic([200, 500, None, 404], [0.1, 0.2, 0.3, 0.4])
    assert (traffic.requests, traffic.server_errors) == (4.0, 2.0)
    assert traffic.success_rate == 50.0
    assert traffic.buckets[-1] == (float("inf"), 4.0)


def test_a_version_failing_every_second_request_fails_the_gate_with_its_value() -> None:
    traffic = probe_traffic([200, 500] * 20, [0.05] * 40)
    check = {"name": "success-rate", "min": 99, "minRequests": 10}
    with pytest.raises(AnalysisFailed) as e:
        judge([success_rate(check, traffic)], f"{B} before the switch over 60 s")
    assert str(e.value) == (f"success-rate 50.0 % < 99 % (20 of 40 requests) on {B} before "
                            "the switch over 60 s")
    assert e.value.value == "50.0 %"


def test_a_slow_probe_fails_the_latency_gate() -> None:
    traffic = probe_traffic([200] * 10, [0.1] * 5 + [0.9] * 5)
    result = latency({"name": "latency", "percentile": 90, "maxMs": 500,
                      "minRequests": 10}, traffic)
    assert result.verdict.value == "failed" and result.value.startswith("p90 ")


def test_no_probe_answer_at_all_is_counted_not_skipped() -> None:
    traffic = probe_traffic([None] * 10, [10.0] * 10)
    assert success_rate({"name": "s", "min": 90, "minRequests": 10},
                        traffic).verdict.value == "failed"



# ---- visible in statuses --------------------------------------------------------------------


def test_gitray_status_says_what_a_held_run_waits_for() -> None:
    from gitray.cli.status import _held

    assert _held(at(APPROVAL)) == (f"held before the switch to {B} until "
                                   "`gitray approve ray/RayService/svc`")
    assert _held(at(BEFORE)) == "" and _held(None) == ""
    assert _held(at(APPROVAL, state=RunState.FAILED)) == ""


def test_the_commit_status_names_the_gate() -> None:
    from gitray.daemon.reporting import status_what

    assert status_what(PLAN.steps[APPROVAL]) == (
        f"await-approval {B}: held until `gitray approve ray/RayService/svc`")
    assert status_what(PLAN.steps[BEFORE]) == f"run-analysis {B} before the switch"
    assert status_what(PLAN.steps[AFTER]) == f"run-analysis {B} after the switch"
