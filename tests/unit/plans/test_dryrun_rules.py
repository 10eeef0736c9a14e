"""The pure rules of the server-side dry-run (gitray.engine.dryrun): which steps are sent, how
a refusal reads, and that sensitive values never reach the message. The dry-run itself runs
against the real API server (tests/integration/test_preflight.py)."""

from __future__ import annotations

import pytest

from gitray.engine.dryrun import _RBAC, DRY_RUN_STEPS, _scrub, _server_message, dry_run_objects
from gitray.plans.planner import compute_plan
from gitray.plans.sensitive import SensitiveValues
from tests.unit.builders import CONFIG, NOW, configmap, live, raycluster, rayjob, rayservice


def test_every_step_that_carries_an_object_is_dry_run() -> None:
    old = rayservice()
    desired = (rayservice(image="rayproject/ray:2.61.0"), raycluster(), rayjob(),
               configmap(), rayservice("fresh"))
    plan = compute_plan(desired, live(old), CONFIG, revision="r", against="live", now=NOW)
    with_manifest = {s.type for w in plan.workloads for s in w.steps if "manifest" in s.params}
    assert with_manifest  # the plan does create objects
    assert with_manifest <= DRY_RUN_STEPS


def test_the_server_message_loses_the_client_prefix() -> None:
    what = "RayCluster ns/cl"
    assert _server_message(f"applying {what}: denied", what) == "denied"
    assert _server_message("something else", what) == "something else"


def test_sensitive_values_are_blanked_out_of_messages() -> None:
    values = SensitiveValues({"d1": "hunter2-secret", "d2": 7, "d3": "abc"})
    text = 'Secret "s" is invalid: data.password: "hunter2-secret" is not allowed; abc'
    assert _scrub(text, values) == ('Secret "s" is invalid: data.password: '
                                    '"(sensitive value)" is not allowed; abc')


@pytest.mark.parametrize(("message", "rbac"), [
    ('rayclusters.ray.io "x" is forbidden: User "ci" cannot patch resource "rayclusters" in '
     'API group "ray.io" in the namespace "ray"', True),
    ('rayjobs.ray.io "j" is forbidden: exceeded quota: no-jobs, requested: '
     'count/rayjobs.ray.io=1', False),
    ("rayclusters.ray.io \"cl\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' "
     "denied request: images must come from registry.example", False),
])
def test_rbac_refusals_are_told_apart_from_admission(message: str, rbac: bool) -> None:
    assert bool(_RBAC.search(message)) is rbac


def test_the_objects_of_runs_going_on_are_not_sent_again() -> None:
    """A pass of ``gitray sync`` plans every workload, those whose runs go on too (a wait for
    a cluster, a paused upgrade); their steps are not started from it, so their objects are
    not dry-run on every pass (50 RayServices waiting made 705 requests a minute, most of them
    dry-run Service and RayCluster applies: bench/README.md, benchmark 11)."""
    desired = (rayservice("web"), rayservice("api"), raycluster())
    plan = compute_plan(desired, live(), CONFIG, revision="r", against="live", now=NOW)
    everything = [what for _, _, what in dry_run_objects(plan, SensitiveValues({}))]
    assert any("web" in w for w in everything) and any("api" in w for w in everything)
    going_on = next(w.key for w in plan.workloads if w.key.name == "web")
    sent = [(wp.key, what) for wp, _, what in
            dry_run_objects(plan, SensitiveValues({}), skip={going_on})]
    assert sent and going_on not in {key for key, _ in sent}
    assert [w for _, w in sent] == [w for w in everything if not w.split("/")[-1]
                                    .startswith("web")]
