"""Sensitive values (Secret data, sensitiveFields) never appear in a plan; Secrets do not drift.

Every output format of a plan with a changed Secret is searched for the values, plain and
base64; a saved plan holds digests, and applying it takes the values from the pinned revision.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from gitray.core.config import Config
from gitray.core.model import LiveObject, LiveState, ObjectKey, SourceLocation, Workload
from gitray.parsing.config import parse_config
from gitray.plans.manifests import job_manifest, object_manifest
from gitray.plans.materialize import as_live
from gitray.plans.plan import Plan, plan_from_json
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.plans.sensitive import PLACEHOLDER_PREFIX, SensitiveValues, UnknownSensitiveValue
from gitray.plans.steptypes import StepType
from tests.unit.builders import NOW, live, rayjob

CONFIG = Config(supporting_kinds=("ConfigMap", "Secret"))
OLD_PASSWORD, NEW_PASSWORD, TOKEN = "hunter2-old", "s3cr3t-NEW", "tok-ABCDEF-0123"
ALL_VALUES = (OLD_PASSWORD, NEW_PASSWORD, TOKEN)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(string_data: dict[str, str] | None = None, data: dict[str, str] | None = None,
           name: str = "db", ns: str = "ray") -> Workload:
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret",
                                "metadata": {"name": name, "namespace": ns}, "type": "Opaque"}
    if string_data is not None:
        manifest["stringData"] = string_data
    if data is not None:
        manifest["data"] = data
    return Workload(ObjectKey("Secret", ns, name), "v1", manifest,
                    SourceLocation(f"{ns}/{name}.yaml", 1, 1), 0)


def as_stored(w: Workload, rv: str = "7") -> LiveObject:
    """The Secret as the API server returns it after gitray applied ``w``: data only."""
    body = object_manifest(w, CONFIG.instance)
    data = dict(body.get("data") or {})
    data.update({k: b64(v) for k, v in (body.pop("stringData", None) or {}).items()})
    body["data"] = data
    return as_live(body, None, rv)


def forms(plan: Plan) -> dict[str, str]:
    """Every form a plan leaves gitray in: the three views and a saved plan file."""
    return {f.value: render(plan, f) for f in Format} | {
        "saved plan": json.dumps(plan_from_json(json.loads(render(plan, Format.JSON))).__repr__())}


def assert_no_value(text: str) -> None:
    for value in ALL_VALUES:
        for form in (value, b64(value), b64(value).rstrip("=")):
            assert form not in text


def plan_for(desired: Workload, against: LiveState, exact: bool = False) -> Plan:
    return compute_plan((desired,), against, CONFIG, revision="b" * 40,
                        against="revision:" + "a" * 40 if exact else "live", now=NOW,
                        exact=exact)


CHANGES = {
    "stringData value changed, against the live cluster": (
        secret({"password": NEW_PASSWORD, "token": TOKEN}),
        LiveState((as_stored(secret({"password": OLD_PASSWORD, "token": TOKEN})),)), False,
        ["~ data.password: (sensitive value changed)"]),
    "data value changed (base64), against the live cluster": (
        secret(data={"password": b64(NEW_PASSWORD)}),
        LiveState((as_stored(secret(data={"password": b64(OLD_PASSWORD)})),)), False,
        ["~ data.password: (sensitive value changed)"]),
    "a key added and one removed, previewed against another revision": (
        secret({"password": OLD_PASSWORD, "token": TOKEN}),
        live(secret({"password": OLD_PASSWORD, "old": NEW_PASSWORD}), config=CONFIG), True,
        ["+ data.token: (sensitive value)", "- data.old: (sensitive value)"]),
    "a new Secret": (secret({"password": NEW_PASSWORD}), LiveState(), False, []),
}


@pytest.mark.parametrize("case", list(CHANGES))
def test_no_output_format_holds_a_secret_value_but_the_changed_keys_are_named(case: str
                                                                               ) -> None:
    desired, against, exact, lines = CHANGES[case]
    plan = plan_for(desired, against, exact)
    assert plan.has_changes
    for text in forms(plan).values():
        assert_no_value(text)
    text = render(plan, Format.TEXT)
    markdown = render(plan, Format.MARKDOWN)
    for line in lines:
        assert line in text and line in markdown


def test_a_saved_plan_refers_to_the_values_by_digest_and_apply_reads_them_from_the_revision(
        ) -> None:
    desired = secret({"password": NEW_PASSWORD})
    plan = plan_for(desired, LiveState((as_stored(secret({"password": OLD_PASSWORD})),)))
    saved = plan_from_json(json.loads(render(plan, Format.JSON)))
    step = saved.workloads[0].steps[0]
    assert step.params["manifest"]["stringData"]["password"].startswith(PLACEHOLDER_PREFIX)
    revealed = SensitiveValues.of((desired,), ()).reveal(step)
    assert revealed.params["manifest"] == object_manifest(desired, CONFIG.instance)
    other_revision = SensitiveValues.of((secret({"password": "something else"}),), ())
    with pytest.raises(UnknownSensitiveValue, match="run gitray plan again"):
        other_revision.reveal(step)


def test_a_secret_written_with_stringdata_does_not_drift_from_its_live_data() -> None:
    desired = secret({"password": NEW_PASSWORD}, data={"extra": b64("x\n")})
    plan = plan_for(desired, LiveState((as_stored(desired),)))
    assert not plan.has_changes


def test_a_live_secret_changed_by_hand_is_reapplied_without_showing_either_value() -> None:
    desired = secret({"password": NEW_PASSWORD})
    stored = as_stored(desired)
    body = dict(stored.body) | {"data": {"password": b64(OLD_PASSWORD)}}
    plan = plan_for(desired, LiveState((replace(stored, body=body),)))
    assert [s.type for s in plan.workloads[0].steps] == [StepType.APPLY_OBJECT]
    assert_no_value(render(plan, Format.TEXT) + render(plan, Format.JSON))


def rayjob_with_env(value: str) -> Workload:
    job = rayjob()
    spec = json.loads(json.dumps(dict(job.spec)))
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [{"name": "API_KEY", "value": value}, {"name": "MODE", "value": "fast"}]
    return replace(job, manifest={**job.manifest, "spec": spec})


def test_sensitive_fields_from_gitray_yaml_keep_a_ray_container_env_value_out() -> None:
    config = parse_config(b"apiVersion: gitray.io/v1alpha1\nkind: Config\n"
                          b"sensitiveFields: ['RayJob:*.env[API_KEY].value']\n")
    job = rayjob_with_env(TOKEN)
    plan = compute_plan((job,), LiveState(), config, revision="c" * 40, against="empty",
                        now=NOW)
    for text in forms(plan).values():
        assert_no_value(text)
    assert '"fast"' in render(plan, Format.JSON)  # the other env values are kept
    step = plan.workloads[0].steps[0]
    revealed = SensitiveValues.of((job,), config.sensitive_fields).reveal(step)
    assert revealed.params["manifest"] == job_manifest(job, config.instance)


def test_a_sensitive_field_glob_of_another_kind_does_not_apply() -> None:
    config = Config(sensitive_fields=("RayCluster:*.env[API_KEY].value",))
    plan = compute_plan((rayjob_with_env(TOKEN),), LiveState(), config, revision="c" * 40,
                        against="empty", now=NOW)
    assert TOKEN in render(plan, Format.JSON)
