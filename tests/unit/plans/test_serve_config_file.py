"""``serveConfigV2`` from a file of the repository (gitray/plans/servefile.py, issue 32):
judged by the same checks as an inline one, at that file's lines; refused when it would leave
the revision; its change is a Serve-only change."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitray.cli.app import main
from gitray.core.config import Config
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.plans.load import LoadMemo, LoadResult, load_snapshot
from gitray.plans.plan import Action
from gitray.plans.planner import compute_plan
from gitray.plans.servefile import resolve_serve_file
from gitray.plans.steptypes import StepType
from testenv.manifests import cluster_spec, dump, serve_config, write_files
from tests.unit.builders import live

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SERVE = serve_config(("greeter", "/greet"))
TWO_APPS = serve_config(("greeter", "/greet"), ("calc", "/calc"))


def manifest(annotation: str | None = "../serve/greeter.yaml", *, inline: str | None = None,
             image: str = "rayproject/ray:2.60.0") -> str:
    meta: dict[str, object] = {"name": "svc", "namespace": "ray"}
    if annotation is not None:
        meta["annotations"] = {"gitray.io/serve-config-file": annotation}
    spec: dict[str, object] = {"rayClusterConfig": cluster_spec(image=image)}
    if inline is not None:
        spec["serveConfigV2"] = inline
    return dump({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta,
                 "spec": spec})


def load(files: dict[str, str | None], problems: dict[str, str] | None = None,
         memo: LoadMemo | None = None) -> LoadResult:
    repo = [RepoFile(p, t.encode() if t is not None else None) for p, t in files.items()]
    repo += [RepoFile(p, None, why) for p, why in (problems or {}).items()]
    return load_snapshot(Snapshot("worktree", "test", tuple(repo)), memo=memo)


def errors(result: LoadResult) -> list[str]:
    return [str(d) for d in result.diagnostics]


def test_the_file_becomes_serveconfigv2_and_is_not_read_as_manifests() -> None:
    result = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": SERVE})
    assert errors(result) == []
    (workload,) = result.workloads
    assert workload.spec["serveConfigV2"] == SERVE


@pytest.mark.parametrize(("value", "expected"), [
    ("serve.yaml", ("apps/serve.yaml", None)),
    ("./x/../serve.yml", ("apps/serve.yml", None)),
    ("../serve/a.yaml", ("serve/a.yaml", None)),
    ("../../a.yaml", (None, "'../../a.yaml' leaves the repository; the file must be part of "
                            "the revision")),
    ("/etc/passwd.yaml", (None, "'/etc/passwd.yaml' is absolute; name the file relative to "
                                "this manifest's directory")),
    ("serve.json", (None, "'serve.json' must be a .yaml or .yml file")),
    ("", (None, "must be a non-empty path relative to this manifest's directory")),
    (3, (None, "must be a non-empty path relative to this manifest's directory")),
])
def test_paths_resolve_relative_to_the_manifest_inside_the_revision(
        value: object, expected: tuple[str | None, str | None]) -> None:
    assert resolve_serve_file("apps/svc.yaml", value) == expected


ANN = "metadata.annotations[gitray.io/serve-config-file]"


@pytest.mark.parametrize(("files", "problems", "expected"), [
    ({"apps/svc.yaml": manifest("../../etc/x.yaml")}, {},
     f"apps/svc.yaml:8:5: {ANN}: '../../etc/x.yaml' leaves the repository; the file must be "
     "part of the revision"),
    ({"apps/svc.yaml": manifest("missing.yaml")}, {},
     f"apps/svc.yaml:8:5: {ANN}: no file apps/missing.yaml in this revision"),
    ({"apps/svc.yaml": manifest("out.yaml")}, {"apps/out.yaml":
                                               "symlink to a path outside the repository"},
     f"apps/svc.yaml:8:5: {ANN}: apps/out.yaml not read: symlink to a path outside the "
     "repository"),
    ({"apps/svc.yaml": manifest(inline=SERVE), "serve/greeter.yaml": SERVE}, {},
     f"apps/svc.yaml:8:5: {ANN}: this manifest also sets spec.serveConfigV2; keep the Serve "
     "config in one place (remove one of them)"),
])
def test_refused_references_are_one_line_at_the_annotation(
        files: dict[str, str | None], problems: dict[str, str], expected: str) -> None:
    result = load(files, problems)
    assert errors(result) == [expected]
    assert result.workloads == ()


def test_serve_schema_errors_point_at_the_files_own_lines() -> None:
    bad = ("applications:\n"
           "  - name: greeter\n"
           "    route_prefix: greet\n"
           "    import_path: serve_apps.greeter:app\n"
           "    deployments:\n"
           "      - name: Greeter\n"
           "        num_replicas: -1\n")
    result = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": bad})
    found = errors(result)
    assert found[0] == ("serve/greeter.yaml:3:5: serveConfigV2: applications[0].route_prefix "
                        "must start with '/'")
    assert any(e.startswith("serve/greeter.yaml:7:") and "num_replicas" in e for e in found)
    assert all(e.startswith("serve/greeter.yaml:") for e in found)


def test_a_yaml_error_in_the_file_is_at_its_line() -> None:
    result = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": "applications: [\n"})
    (only,) = errors(result)
    assert only.startswith("serve/greeter.yaml:2:")


def test_the_memo_notices_a_changed_serve_file() -> None:
    memo = LoadMemo()
    first = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": SERVE}, memo=memo)
    second = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": TWO_APPS}, memo=memo)
    assert first.workloads[0].spec["serveConfigV2"] == SERVE
    assert second.workloads[0].spec["serveConfigV2"] == TWO_APPS
    third = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": TWO_APPS}, memo=memo)
    assert memo.hits == 2 and third.workloads == second.workloads


def test_a_change_of_the_file_alone_is_a_serve_only_change() -> None:
    old = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": SERVE}).workloads
    new = load({"apps/svc.yaml": manifest(), "serve/greeter.yaml": TWO_APPS}).workloads
    plan = compute_plan(new, live(*old), Config(), revision="r", against="live", now=NOW)
    (wp,) = plan.workloads
    assert wp.action is Action.UPDATE
    assert [s.type for s in wp.steps] == [StepType.DEPLOY_SERVE, StepType.WAIT_SERVE_RUNNING]
    # the same Serve config inline or from a file: nothing to do
    inline = load({"apps/svc.yaml": manifest(None, inline=TWO_APPS)}).workloads
    again = compute_plan(inline, live(*new), Config(), revision="r", against="live", now=NOW)
    assert again.workloads[0].action is Action.NOOP


def test_validate_cli_reports_the_serve_file_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_files(tmp_path, {"apps/svc.yaml": manifest(),
                           "serve/greeter.yaml": SERVE.replace("/greet", "greet")})
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert main(["validate", "--repo", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "serve/greeter.yaml:3:5: serveConfigV2: applications[0].route_prefix must start "
        "with '/'",
        "gitray: 1 problem found; nothing was applied",
    ]
    write_files(tmp_path, {"serve/greeter.yaml": SERVE})
    assert main(["validate", "--repo", str(tmp_path)]) == 0
