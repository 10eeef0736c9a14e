"""The GitLab CI template (ci/gitlab/gitray-plan.yml) run as GitLab would for a merge request
pipeline: its inputs interpolated, its script run with bash and GitLab's predefined variables,
against the GitLab contract host (testenv/githost): one MR note edited in place, a code-quality
report in GitLab's documented format, the outputs as a dotenv report. No Kubernetes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from testenv.githost.server import GitHost
from tests.ci.harness import (
    EXAMPLES,
    REPO_ROOT,
    JobRun,
    base_env,
    commit_all,
    git,
    gitlab_job,
    run_gitlab_job,
)
from tests.reportschemas import CODE_QUALITY_SCHEMA

# the CI tests need no environment: scripts/test runs them at the end of the alone phase
# (testenv/lanes.py, LATE_DIR)
pytestmark = pytest.mark.late

TOKEN = "glpat-templateTestToken0123456789"
MR = 11
TEMPLATE = REPO_ROOT / "ci" / "gitlab" / "gitray-plan.yml"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def pipeline(tmp: Path, project: Path, base: str, host: GitHost, env: dict[str, str],
             install: str) -> tuple[JobRun, list[dict[str, Any]], dict[str, str]]:
    name, job = gitlab_job(TEMPLATE, {"install": install, "path": "gitops"})
    assert name == "gitray-plan"
    assert {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'} in job["rules"]
    scratch = tmp / f"tmp-{len(list(tmp.glob('tmp-*')))}"
    scratch.mkdir()
    gitlab = {"CI": "true", "GITLAB_CI": "true", "CI_PIPELINE_SOURCE": "merge_request_event",
              "CI_PROJECT_DIR": str(project), "CI_PROJECT_ID": "42",
              "CI_PROJECT_PATH": "acme/ray-gitops", "CI_API_V4_URL": f"{host.url}/api/v4",
              "CI_MERGE_REQUEST_IID": str(MR), "CI_MERGE_REQUEST_DIFF_BASE_SHA": base,
              "CI_COMMIT_SHA": git(project, "rev-parse", "HEAD"), "TMPDIR": str(scratch),
              "GITRAY_STATUS_TOKEN": TOKEN}  # the masked CI/CD variable
    run = run_gitlab_job(job, project, {**env, **gitlab})
    reports = job["artifacts"]["reports"]
    quality = json.loads((project / reports["codequality"]).read_text())
    dotenv_file = project / reports["dotenv"]
    dotenv = dict(line.split("=", 1) for line in dotenv_file.read_text().splitlines())
    dotenv_file.unlink()  # a new job starts from a fresh clone
    return run, quality, dotenv


def test_the_template_keeps_one_mr_note_and_reports_code_quality(
        tmp_path: Path, action_checkout: Path, wheelhouse: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES, project / "gitops")
    git(project, "init", "-q", "-b", "main")
    base = commit_all(project, "base")
    service = project / "gitops/ray-serve/rayservice.yaml"
    edit(service, "ray:2.60.0", "ray:2.60.1")
    edit(service, "num_replicas: 1", "num_replica: 1")
    commit_all(project, "a new Ray image")
    env = base_env(tmp_path, wheelhouse)
    with GitHost(TOKEN) as host:
        host.add_issue(MR)
        first, quality, dotenv = pipeline(tmp_path, project, base, host, env,
                                          str(action_checkout))
        assert first.returncode == 0, first.stderr
        assert dotenv == {"GITRAY_VALID": "true", "GITRAY_HAS_CHANGES": "true",
                          "GITRAY_WORKLOADS_CHANGED": "1", "GITRAY_BLUE_GREEN": "1",
                          "GITRAY_AGAINST": base, "GITRAY_PLAN_JSON": "gitray-plan.json"}
        jsonschema.validate(quality, CODE_QUALITY_SCHEMA)
        assert [(i["severity"], i["location"]["path"]) for i in quality] == [
            ("minor", "gitops/ray-serve/rayservice.yaml")] * 2
        assert len({i["fingerprint"] for i in quality}) == 2
        (note,) = host.comments("gitlab", MR)
        assert "ray:2.60.1" in note["body"] and note["body"].startswith(
            "<!-- gitray-plan:gitops -->")
        assert json.loads((project / "gitray-plan.json").read_text())["against"] == \
            f"revision:{base}"

        edit(service, "ray:2.60.1", "ray:2.60.2")
        commit_all(project, "another image")
        second, _, _ = pipeline(tmp_path, project, base, host, env, str(action_checkout))
        assert second.returncode == 0, second.stderr
        (edited,) = host.comments("gitlab", MR)
        assert edited["id"] == note["id"] and "ray:2.60.2" in edited["body"]

        edit(project / "gitops/ray-cluster/raycluster.yaml", "namespace: ray-dev",
             "namespace: prod")
        commit_all(project, "a namespace gitray may not use")
        third, quality, dotenv = pipeline(tmp_path, project, base, host, env,
                                          str(action_checkout))
        assert third.returncode == 1
        jsonschema.validate(quality, CODE_QUALITY_SCHEMA)
        errors = [i for i in quality if i["severity"] == "major"]
        assert [(i["location"]["path"], i["location"]["lines"]["begin"], i["description"])
                for i in errors] == [("gitops/ray-cluster/raycluster.yaml", 10,
                                      "namespace 'prod' is not in allowedNamespaces "
                                      "(ray-*, default) of gitray.yaml")]
        assert dotenv["GITRAY_VALID"] == "false"
        assert ("ray-cluster/raycluster.yaml:10:3: namespace 'prod' is not in "
                "allowedNamespaces") in third.stdout
        (invalid,) = host.comments("gitlab", MR)
        assert invalid["id"] == note["id"]
        assert "gitops/ray-cluster/raycluster.yaml:10:3" in invalid["body"]
        assert [r.method for r in host.log(contains="/notes") if r.method != "GET"] == [
            "POST", "PUT", "PUT"]
        assert all(r.headers.get("private-token") == TOKEN for r in host.log())
        for run in (first, second, third):
            assert TOKEN not in run.stdout + run.stderr
