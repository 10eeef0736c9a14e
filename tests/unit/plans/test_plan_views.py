"""The plan's JSON contract and its text/markdown views."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gitray.core.model import LiveState
from gitray.plans.plan import Plan, plan_from_json
from gitray.plans.planner import compute_plan
from gitray.plans.render import COMMENT_MARKER, Format, render
from tests.unit.builders import CONFIG, NOW, configmap, live, raycluster, rayjob, rayservice

SCHEMA = json.loads((Path(__file__).parents[3] / "schemas" / "plan.schema.json").read_text())
OLD, NEW = rayservice(image="ray:old"), rayservice(image="ray:new")


def plans() -> dict[str, Plan]:
    every = (NEW, raycluster(), rayjob(), configmap())
    return {
        "first rollout of everything": compute_plan(every, LiveState(), CONFIG,
                                                    revision="a" * 40, against="empty", now=NOW),
        "blue-green upgrade": compute_plan((NEW,), live(OLD), CONFIG, revision="b" * 40,
                                           against="revision:" + "c" * 40, now=NOW, exact=True),
        "prune everything": compute_plan((configmap(name="other"),), live(OLD, raycluster()),
                                         CONFIG, revision="d" * 40, against="live", now=NOW),
        "no changes": compute_plan((OLD,), live(OLD), CONFIG, revision="e" * 40,
                                   against="live", now=NOW),
    }


@pytest.mark.parametrize("name", list(plans()))
def test_json_validates_against_the_public_schema_and_round_trips(name: str) -> None:
    plan = plans()[name]
    data = json.loads(render(plan, Format.JSON))
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert plan_from_json(data) == plan


def test_schema_rejects_an_unknown_step_type() -> None:
    data = json.loads(render(plans()["blue-green upgrade"], Format.JSON))
    data["workloads"][0]["steps"][0]["type"] = "launch-missiles"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(data)


def test_text_view_reads_like_terraform() -> None:
    text = render(plans()["blue-green upgrade"], Format.TEXT)
    assert "± RayService ray/svc will get a new cluster (blue-green)" in text
    assert "~ spec.rayClusterConfig.headGroupSpec.template.spec.containers[ray-head].image: " \
           '"ray:old" -> "ray:new"' in text
    assert "1. create RayCluster svc-" in text
    assert "7. schedule deletion of old cluster svc-" in text
    assert text.rstrip().endswith(
        "Plan: 0 to create, 0 to update, 1 to replace (blue-green), 0 to delete; 7 steps.")
    assert "\x1b[" not in text


def test_text_view_colours_only_when_asked() -> None:
    assert "\x1b[35m" in render(plans()["blue-green upgrade"], Format.TEXT, colour=True)


def test_text_view_of_no_changes() -> None:
    text = render(plans()["no changes"], Format.TEXT)
    assert "No changes. The cluster matches this revision." in text


def test_markdown_view_has_the_comment_marker_and_a_table() -> None:
    md = render(plans()["prune everything"], Format.MARKDOWN)
    assert md.startswith(COMMENT_MARKER)
    assert "| `-` | `ray/RayService/svc` | delete | 3 |" in md
    assert "<details>" in md


def test_every_step_type_has_a_plain_description() -> None:
    text = render(plans()["first rollout of everything"], Format.TEXT)
    for phrase in ("create Service svc-head-svc", "start RayJob run job-",
                   "apply ConfigMap code", "wait for run job-"):
        assert phrase in text
