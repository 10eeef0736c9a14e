"""Kustomize overlays (gitray/plans/kustomize.py, gitray/render/kustomize.py; issue 32), rendered
with the real kustomize v5 the test environment builds (testenv/kustomize.py): which
kustomizations are rendered, output equal to `kustomize build`, errors at the patch or base
line, hostile kustomizations refused in bounded time, the memo by input digest, and plans that
say which overlay a change comes from."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gitray.cli.app import main
from gitray.core.config import Config
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.git.source import read_snapshot
from gitray.plans.kustomize import find_kustomizations, roots, tree
from gitray.plans.load import LoadResult, load_snapshot
from gitray.plans.plan import Action
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.render import kustomize as runner
from testenv.kustomize import kustomize_for_tests
from tests.unit.builders import live

EXAMPLE = Path(__file__).resolve().parents[3] / "examples-repo" / "kustomize"
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def kustomize(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    binary = kustomize_for_tests()
    monkeypatch.setenv("GITRAY_KUSTOMIZE", binary)
    yield binary


def example_files(changes: dict[str, str | None] | None = None) -> dict[str, str]:
    files = {str(p.relative_to(EXAMPLE)): p.read_text() for p in sorted(EXAMPLE.rglob("*.yaml"))}
    for path, text in (changes or {}).items():
        if text is None:
            files.pop(path, None)
        else:
            files[path] = text
    return files


def load(files: dict[str, str], limits: runner.RenderLimits | None = None) -> LoadResult:
    snapshot = Snapshot("worktree", "test",
                        tuple(RepoFile(p, t.encode()) for p, t in sorted(files.items())))
    return load_snapshot(snapshot, kustomize=runner.runner(limits))


def errors(result: LoadResult) -> list[str]:
    return [str(d) for d in result.diagnostics]


def test_roots_are_the_kustomizations_no_other_references() -> None:
    files = [RepoFile(p, t.encode()) for p, t in example_files().items()]
    found = find_kustomizations(files)
    assert sorted(found) == ["base", "overlays/prod", "overlays/staging"]
    assert roots(found) == ["overlays/prod", "overlays/staging"]
    assert tree("overlays/prod", found) == ["overlays/prod", "base"]


def test_the_overlays_render_to_what_kustomize_build_prints(kustomize: str) -> None:
    result = load(example_files())
    assert errors(result) == []
    yaml = YAML(typ="safe", pure=True)
    for overlay in ("staging", "prod"):
        built = subprocess.run([kustomize, "build", str(EXAMPLE / "overlays" / overlay)],
                               capture_output=True, text=True, check=True).stdout
        (expected,) = list(yaml.load_all(built))
        (workload,) = [w for w in result.workloads if w.key.namespace == f"ray-{overlay}"]
        assert json.loads(json.dumps(workload.manifest)) == expected
        assert str(workload.source) == f"overlays/{overlay}/kustomization.yaml:1:1"
    prod = next(w for w in result.workloads if w.key.namespace == "ray-prod")
    assert prod.spec["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] == 2


def test_base_files_are_never_read_as_plain_manifests() -> None:
    result = load(example_files())
    assert sorted(str(w.key) for w in result.workloads) == [
        "ray-prod/RayService/text-service", "ray-staging/RayService/text-service"]


def test_an_error_in_the_base_points_at_the_base_line() -> None:
    base = example_files()["base/rayservice.yaml"].replace("route_prefix: /greet",
                                                           "route_prefix: greet")
    found = errors(load(example_files({"base/rayservice.yaml": base})))
    assert found
    assert all(e.startswith("base/rayservice.yaml:") for e in found), found
    assert any("rendered by kustomize build overlays/prod" in e for e in found)
    assert any("rendered by kustomize build overlays/staging" in e for e in found)


def test_an_error_made_by_a_patch_points_at_the_patch_line() -> None:
    patch = ("apiVersion: ray.io/v1\n"
             "kind: RayService\n"
             "metadata:\n"
             "  name: text-service\n"
             "spec:\n"
             "  rayClusterConfig:\n"
             "    workerGroupSpecs:\n"
             "      - groupName: workers\n"
             "        replicas: 2\n")
    kustomization = ("resources: [../../base]\n"
                     "namespace: ray-prod\n"
                     "patches:\n"
                     "  - path: patch.yaml\n")
    found = errors(load(example_files({"overlays/prod/patch.yaml": patch,
                                       "overlays/prod/kustomization.yaml": kustomization})))
    assert found == [
        "overlays/prod/patch.yaml:8:9: spec.rayClusterConfig.workerGroupSpecs[0]: 'template' "
        "is a required property (rendered by kustomize build overlays/prod, patch "
        "overlays/prod/patch.yaml)"]


def test_a_kustomize_error_is_one_line_at_the_kustomization() -> None:
    found = errors(load(example_files({"overlays/prod/patch.yaml": None})))
    assert len(found) == 1 and "\n" not in found[0]
    assert found[0].startswith("overlays/prod/kustomization.yaml:1:1: kustomize build "
                               "overlays/prod failed: ")
    assert "patch.yaml" in found[0] and "gitray-kustomize-" not in found[0]


@pytest.mark.parametrize(("kustomization", "expected"), [
    ("resources: ['github.com/org/repo//base?ref=v1']\n",
     "k/kustomization.yaml:1:13: resources[0]: remote base 'github.com/org/repo//base?ref=v1' "
     "refused: a revision must be self-contained (vendor it into the repository)"),
    ("resources: ['https://example.com/x.yaml']\n",
     "k/kustomization.yaml:1:13: resources[0]: remote base 'https://example.com/x.yaml' "
     "refused: a revision must be self-contained (vendor it into the repository)"),
    ("resources: [../../../etc]\n",
     "k/kustomization.yaml:1:13: resources[0]: '../../../etc' leaves the repository; the "
     "revision must be self-contained"),
    ("resources: [/etc/kubernetes]\n",
     "k/kustomization.yaml:1:13: resources[0]: '/etc/kubernetes' is absolute; write it "
     "relative to the kustomization"),
    ("generators: [gen.yaml]\n",
     "k/kustomization.yaml:1:1: generators: refused: generator plugins are off (gitray "
     "renders with plain kustomize build)"),
    ("helmCharts: [{name: x}]\n",
     "k/kustomization.yaml:1:1: helmCharts: refused: Helm charts inside kustomizations are "
     "off (gitray renders with plain kustomize build)"),
])
def test_hostile_references_are_refused_before_kustomize_runs(
        kustomization: str, expected: str) -> None:
    before = runner.RENDERS[0]
    result = load({"k/kustomization.yaml": kustomization})
    assert errors(result) == [expected]
    assert runner.RENDERS[0] == before


def test_a_cycle_is_refused() -> None:
    result = load({"root/kustomization.yaml": "resources: [../a]\n",
                   "a/kustomization.yaml": "resources: [../b]\n",
                   "b/kustomization.yaml": "resources: [../a]\n",
                   "c/kustomization.yaml": "resources: [../d]\n",
                   "d/kustomization.yaml": "resources: [../c]\n"})
    assert errors(result) == [
        "c/kustomization.yaml:1:1: never rendered: every kustomization that references it is "
        "referenced in turn (a cycle of kustomizations)",
        "d/kustomization.yaml:1:1: never rendered: every kustomization that references it is "
        "referenced in turn (a cycle of kustomizations)",
        "root/kustomization.yaml:1:1: kustomization cycle: a -> b -> a; a kustomization "
        "cannot include itself",
    ]


def doubling(levels: int, size: int = 2000) -> dict[str, str]:
    """A kustomization bomb: each level includes the previous one twice (two name suffixes),
    so level n renders 2**n copies of one ConfigMap."""
    files = {"l0/kustomization.yaml": "resources: [cm.yaml]\n",
             "l0/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
                           f"data: {{x: '{'x' * size}'}}\n"}
    for n in range(1, levels + 1):
        for side in ("a", "b"):
            files[f"l{n}/{side}/kustomization.yaml"] = (
                f"resources: [../../l{n - 1}]\nnameSuffix: -{side}\n")
        files[f"l{n}/kustomization.yaml"] = "resources: [a, b]\n"
    return files


def test_a_huge_output_is_refused_at_the_output_bound() -> None:
    result = load(doubling(6, 40_000), runner.RenderLimits(max_output_bytes=1024 * 1024))
    found = errors(result)
    assert any("refused: its output is over 1 MiB" in e for e in found), found


def test_a_render_that_runs_too_long_is_stopped() -> None:
    result = load(doubling(20), runner.RenderLimits(timeout_s=3))
    found = errors(result)
    assert any("refused: it ran longer than 3 s" in e for e in found), found


def test_a_render_past_the_memory_bound_is_stopped() -> None:
    limits = runner.RenderLimits(max_memory_bytes=1024 ** 3, max_output_bytes=1024 ** 3,
                                 timeout_s=120)
    small = load(doubling(2, 1000), limits)  # the bound leaves room for an ordinary render
    assert errors(small) == [] and len(small.workloads) == 4
    found = errors(load(doubling(7, 1_500_000), limits))
    assert found == ["l7/kustomization.yaml:1:1: kustomize build l7 refused: it needed more "
                     "than 1 GiB of memory"]


def test_a_missing_kustomize_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITRAY_KUSTOMIZE", "/nonexistent/kustomize")
    assert errors(load(example_files())) == [
        "overlays/prod/kustomization.yaml:1:1: kustomize is not installed: put kustomize v5 "
        "on PATH or set GITRAY_KUSTOMIZE to render this kustomization"]


def test_unchanged_render_inputs_are_not_rendered_again() -> None:
    files = example_files()
    files["base/rayservice.yaml"] += "# memo test\n"  # inputs no earlier test rendered
    load(files)
    before = runner.RENDERS[0]
    again = load({**files, "elsewhere.yaml": "# not an input of any render\n"})
    assert errors(again) == [] and runner.RENDERS[0] == before
    files["overlays/prod/patch.yaml"] += "# changed\n"
    load(files)
    assert runner.RENDERS[0] == before + 1  # prod only: staging's inputs are unchanged


def test_the_plan_says_which_overlay_makes_a_blue_green_upgrade() -> None:
    old = load(example_files()).workloads
    patch = example_files()["overlays/prod/patch.yaml"] + (
        "- op: replace\n"
        "  path: /spec/rayClusterConfig/headGroupSpec/template/spec/containers/0/image\n"
        "  value: rayproject/ray:2.61.0\n")
    new = load(example_files({"overlays/prod/patch.yaml": patch})).workloads
    plan = compute_plan(new, live(*old), Config(), revision="r", against="live", now=NOW)
    actions = {str(w.key): w.action for w in plan.workloads}
    assert actions == {"ray-prod/RayService/text-service": Action.REPLACE,
                       "ray-staging/RayService/text-service": Action.NOOP}
    text = render(plan, Format.TEXT)
    assert ("# RayService ray-prod/text-service  (overlays/prod/kustomization.yaml:1:1)\n"
            "  \u00b1 RayService ray-prod/text-service will get a new cluster (blue-green)\n"
            "      resources: blue-green: ") in text  # then the pod requests it adds
    assert ("      ~ spec.rayClusterConfig.headGroupSpec.template.spec.containers[ray-head].image: "
            '"rayproject/ray:2.60.0" -> "rayproject/ray:2.61.0"\n') in text


def test_cli_plans_the_example_overlays(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--repo", str(EXAMPLE), "--against", "empty"]) == 0
    out = capsys.readouterr().out
    assert "# RayService ray-prod/text-service  (overlays/prod/kustomization.yaml:1:1)" in out
    assert "# RayService ray-staging/text-service  (overlays/staging/kustomization.yaml:1:1)" \
        in out
    assert "Plan: 2 to create" in out


def test_the_example_snapshot_reads_every_render_input() -> None:
    paths = {f.path for f in read_snapshot(str(EXAMPLE)).files}
    assert {"base/kustomization.yaml", "base/rayservice.yaml", "overlays/prod/patch.yaml",
            "overlays/prod/kustomization.yaml", "overlays/staging/kustomization.yaml"} <= paths


def test_a_serve_config_file_of_a_rendered_rayservice_is_relative_to_the_overlay() -> None:
    files = example_files()
    base = files["base/rayservice.yaml"]
    start, end = base.index("  serveConfigV2: |"), base.index("  rayClusterConfig:")
    files["base/rayservice.yaml"] = (base[:start] + base[end:]).replace(
        "  name: text-service\n",
        "  name: text-service\n  annotations:\n    gitray.io/serve-config-file: serve.yaml\n")
    serve = "applications:\n  - name: a\n    route_prefix: /a\n    import_path: m:app\n"
    files["overlays/prod/serve.yaml"] = serve
    files["overlays/staging/serve.yaml"] = serve.replace("route_prefix: /a", "route_prefix: a")
    assert errors(load(files)) == [
        "overlays/staging/serve.yaml:3:5: serveConfigV2: applications[0].route_prefix must "
        "start with '/'"]
    files["overlays/staging/serve.yaml"] = serve
    result = load(files)
    assert [w.spec["serveConfigV2"] for w in result.workloads] == [serve, serve]


def test_a_chain_of_thousands_of_kustomizations_is_refused_without_recursion() -> None:
    files = {f"k{i}/kustomization.yaml": f"resources: [../k{i + 1}]\n" for i in range(3000)}
    files["k3000/kustomization.yaml"] = "resources: []\n"
    before = runner.RENDERS[0]
    assert errors(load(files)) == [
        "k0/kustomization.yaml:1:1: kustomizations nest more than 50 levels deep from here; "
        "gitray refuses to render it"]
    assert runner.RENDERS[0] == before
    files.update({"k0/kustomization.yaml": "resources: [../k2999]\n"})
    files.pop("k1/kustomization.yaml")  # k0 -> k2999 -> k3000: two levels, rendered
    assert [e for e in errors(load(files)) if e.startswith("k0/")] == []
