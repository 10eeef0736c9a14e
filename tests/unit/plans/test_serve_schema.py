"""serveConfigV2 judged as Ray Serve judges it: its generated schema, its validators, and
warnings for keys it would silently drop; every finding at its line inside the block scalar."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from gitray.cli import main
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.plans.load import LoadResult, load_snapshot
from gitray.plans.rayservice.servecheck import import_path_problem

ROOT = Path(__file__).resolve().parents[3]

HEAD = """\
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: text
  namespace: default
spec:
  rayClusterConfig:
    headGroupSpec:
      rayStartParams: {}
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray:2.60.0
  serveConfigV2: |
"""
FIRST_SERVE_LINE = HEAD.count("\n") + 1  # line 17 of the file is line 1 of the Serve config


def service(serve: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(serve), "    ")


def load(serve: str) -> LoadResult:
    files = (RepoFile("svc.yaml", service(serve).encode()),)
    return load_snapshot(Snapshot("worktree", "test", files))


def at(line: int, col: int) -> str:
    """``svc.yaml:L:C`` for line ``line``, column ``col`` of the Serve config."""
    return f"svc.yaml:{FIRST_SERVE_LINE + line - 1}:{col + 4}"


APP = """\
applications:
  - name: greeter
    import_path: apps.greeter:app
    route_prefix: /greet
    deployments:
      - name: Greeter
"""

ERROR_CASES = {
    "num_replicas that is not a number": (
        "        num_replicas: many\n", at(7, 9),
        "spec.serveConfigV2: applications[0].deployments[0].num_replicas: 'many' is not a "
        "number of replicas: write a positive integer, or \"auto\" for autoscaling"),
    "num_replicas of zero": (
        "        num_replicas: 0\n", at(7, 9),
        "spec.serveConfigV2: applications[0].deployments[0].num_replicas: 0 is less than or "
        "equal to the minimum of 0"),
    "a fixed num_replicas with an autoscaling_config": (
        "        num_replicas: 2\n        autoscaling_config: {min_replicas: 1}\n", at(7, 9),
        "spec.serveConfigV2: applications[0].deployments[0].num_replicas: a fixed num_replicas "
        "cannot be combined with autoscaling_config"),
    "a field of the wrong type": (
        "        max_ongoing_requests: lots\n", at(7, 9),
        "spec.serveConfigV2: applications[0].deployments[0].max_ongoing_requests: 'lots' is "
        "not of type 'integer'"),
    "a deployment without a name": (
        "      - num_replicas: 1\n", at(7, 9),
        "spec.serveConfigV2: applications[0].deployments[1]: 'name' is a required property"),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_serve_refuses_it_so_gitray_does_at_its_line(case: str) -> None:
    extra, where, message = ERROR_CASES[case]
    found = [str(d) for d in load(APP + extra).diagnostics]
    assert any(f.startswith(f"{where}: {message}") for f in found), found


@pytest.mark.parametrize(("serve", "where", "message"), [
    ("proxy_location: Anywhere\n" + APP, at(1, 1),
     "spec.serveConfigV2: proxy_location: 'Anywhere' is not one of"),
    (APP.replace("    route_prefix: /greet\n", "    route_prefix: /greet\n    port: 8000\n"),
     at(5, 5), "spec.serveConfigV2: applications[0].port: Serve refuses port in an application"),
    ("applications:\n  - import_path: a:b:c\n", at(2, 5),
     "spec.serveConfigV2: applications[0].import_path 'a:b:c' is not 'module:attribute' or "
     "'module.attribute': it has more than one ':'"),
    ("applications:\n  - name: a\n    import_path: a:app\n  - name: a\n    import_path: b:app\n"
     "    route_prefix: /b\n", at(4, 5),
     "spec.serveConfigV2: application name 'a' is used twice"),
    ("applications:\n  - name: a\n    import_path: a:app\n    route_prefix: /x\n"
     "  - name: b\n    import_path: b:app\n    route_prefix: /x\n", at(7, 5),
     "spec.serveConfigV2: route_prefix '/x' is used twice"),
], ids=["enum", "port in an app", "import path", "duplicate names", "duplicate prefixes"])
def test_more_of_serves_rules(serve: str, where: str, message: str) -> None:
    found = [str(d) for d in load(serve).diagnostics]
    assert any(f.startswith(f"{where}: {message}") for f in found), found


@pytest.mark.parametrize("extra", [
    "        num_replicas: auto\n        autoscaling_config: {min_replicas: 1, max_replicas: 3}\n",
    "        num_replicas: null\n        autoscaling_config: {min_replicas: 1}\n",
    "        num_replicas: 3\n        autoscaling_config: null\n",
    "        user_config: {anything: [1, 2]}\n        ray_actor_options: {num_cpus: 0.5}\n",
], ids=["auto with autoscaling", "null with autoscaling", "fixed without", "free-form fields"])
def test_what_serve_accepts_is_accepted(extra: str) -> None:
    result = load(APP + extra)
    assert result.diagnostics == () and result.warnings == ()


@pytest.mark.parametrize(("extra", "where", "message"), [
    ("        num_replica: 2\n", at(7, 9),
     "spec.serveConfigV2: applications[0].deployments[0]: unknown key 'num_replica' (did you "
     "mean 'num_replicas'?); Ray Serve ignores it"),
    ("    runtime_environment: {pip: [numpy]}\n", at(7, 5),
     "spec.serveConfigV2: applications[0]: unknown key 'runtime_environment'; Ray Serve "
     "ignores it"),
], ids=["in a deployment", "in an application"])
def test_a_key_serve_would_ignore_is_a_warning(extra: str, where: str, message: str) -> None:
    result = load(APP + extra)
    assert result.diagnostics == ()
    assert [str(w) for w in result.warnings] == [f"{where}: {message}"]
    assert len(result.workloads) == 1, "a warning never stops a revision"


@pytest.mark.parametrize(("path", "problem"), [
    ("pkg.mod:app", None), ("pkg.mod.app", None), ("mod:app", None),
    ("a:b:c", "has more than one ':'"), (":app", "starts or ends with ':'"),
    ("mod:", "starts or ends with ':'"), ("module", "needs a '.' or ':' between"),
    (".mod", "starts or ends with '.'"), ("mod.", "starts or ends with '.'"),
    ("mod app:x", "contains whitespace"),
])
def test_import_path_format(path: str, problem: str | None) -> None:
    found = import_path_problem(path)
    assert (found is None) if problem is None else (found is not None and problem in found)


def write_repo(root: Path, serve: str) -> None:
    (root / "svc.yaml").write_text(service(serve))


def test_validate_num_replicas_many_exits_1_naming_file_line_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_repo(tmp_path, APP + "        num_replicas: many\n")
    assert main(["validate", "--repo", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{at(7, 9)}: spec.serveConfigV2: applications[0].deployments[0].num_replicas: " \
           "'many' is not a number of replicas" in err


def test_validate_warns_about_an_unknown_deployment_key_and_exits_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_repo(tmp_path, APP + "        num_replica: 2\n")
    assert main(["validate", "--repo", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert f"{at(7, 9)}: warning: spec.serveConfigV2: applications[0].deployments[0]: " \
           "unknown key 'num_replica' (did you mean 'num_replicas'?)" in out.err
    assert "1 workload valid" in out.out


def _gen_schemas() -> object:
    loader = importlib.machinery.SourceFileLoader("gen_schemas_serve",
                                                  str(ROOT / "scripts" / "gen-schemas"))
    spec = importlib.util.spec_from_loader("gen_schemas_serve", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_committed_serve_schema_is_generated_from_the_pinned_ray() -> None:
    generated = _gen_schemas().generate_serve()  # type: ignore[attr-defined]
    committed = (ROOT / "schemas" / "serve.schema.json").read_text()
    assert generated == committed, "run scripts/gen-schemas --only serve"
    schema = json.loads(committed)
    assert schema["x-ray-version"] == "2.60.0"
    assert "DeploymentSchema" in schema["$defs"]


def test_gitray_never_imports_ray() -> None:
    # Ray Serve's schema is generated at development time; gitray runs without ray installed.
    found = []
    for path in sorted((ROOT / "gitray").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n == "ray" or n.startswith("ray.")]
    assert len(list((ROOT / "gitray").rglob("*.py"))) > 20
    assert found == []
