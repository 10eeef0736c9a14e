"""What gitray's CI entry point (gitray/cli/ci.py) reads from the CI system's environment,
and the outputs it derives from a plan."""

from __future__ import annotations

import json
from pathlib import Path

from gitray.cli.ci import github_context, gitlab_context, outputs_of
from gitray.core.config import StatusProvider
from gitray.core.model import ObjectKey
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType

BASE = "a" * 40


def test_a_pull_request_event_gives_the_number_and_the_base(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "base": {"sha": BASE}}}))
    ctx = github_context({"GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": "acme/ray",
                          "GITHUB_API_URL": "https://ghe.example.com/api/v3",
                          "GITHUB_OUTPUT": str(tmp_path / "out")})
    assert (ctx.host, ctx.number, ctx.base, ctx.repository, ctx.api_url, ctx.outputs) == (
        StatusProvider.GITHUB, 7, BASE, "acme/ray", "https://ghe.example.com/api/v3",
        tmp_path / "out")


def test_a_push_plans_against_the_commit_before_it_and_comments_nowhere(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"before": BASE, "after": "b" * 40}))
    ctx = github_context({"GITHUB_EVENT_PATH": str(event), "GITHUB_REF": "refs/heads/main"})
    assert (ctx.number, ctx.base, ctx.api_url) == (None, BASE, "https://api.github.com")
    event.write_text(json.dumps({"before": "0" * 40}))  # a new branch: nothing before it
    assert github_context({"GITHUB_EVENT_PATH": str(event)}).base is None


def test_the_ref_names_the_pull_request_when_the_event_does_not() -> None:
    assert github_context({"GITHUB_REF": "refs/pull/12/merge"}).number == 12


def test_gitlab_merge_request_variables() -> None:
    ctx = gitlab_context({"CI_MERGE_REQUEST_IID": "11", "CI_MERGE_REQUEST_DIFF_BASE_SHA": BASE,
                          "CI_API_V4_URL": "https://gitlab.example.com/api/v4",
                          "CI_PROJECT_ID": "42", "CI_PROJECT_PATH": "acme/ray"}, "gitray.env")
    assert (ctx.host, ctx.number, ctx.base, ctx.repository, ctx.outputs) == (
        StatusProvider.GITLAB, 11, BASE, "42", Path("gitray.env"))
    assert gitlab_context({}, None).number is None


def test_outputs_count_changed_workloads_and_new_clusters() -> None:
    def workload(name: str, action: Action, steps: int) -> WorkloadPlan:
        return WorkloadPlan(ObjectKey("RayService", "ns", name), action, 0,
                            tuple(Step(f"{name}-{i}", StepType.CREATE_CLUSTER, name)
                                  for i in range(steps)))

    plan = Plan(revision=BASE, against="empty",
                workloads=(workload("a", Action.REPLACE, 3), workload("b", Action.UPDATE, 1),
                           workload("c", Action.NOOP, 0)))
    assert outputs_of(plan, "live") == {"valid": "true", "has-changes": "true",
                                        "workloads-changed": "2", "blue-green": "1",
                                        "against": "live"}
    assert outputs_of(None, "") == {"valid": "false", "has-changes": "false",
                                    "workloads-changed": "0", "blue-green": "0", "against": ""}
