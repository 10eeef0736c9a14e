"""Helm charts (gitray/plans/helm.py, gitray/render/helm.py; issue 32), rendered with the real
helm v4 the test environment builds (testenv/helm.py): charts named in gitray.yaml's
``helm:`` rendered to what `helm template` prints and planned as usual, findings that name the
template, hostile charts refused in bounded time, the memo by input digest."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gitray.cli.app import main
from gitray.core.config import Config
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.git.source import read_snapshot
from gitray.plans.load import LoadResult, load_snapshot
from gitray.plans.plan import Action
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.render import helm as runner
from gitray.render.kustomize import RenderLimits
from testenv.helm import helm_for_tests
from tests.unit.builders import live

EXAMPLE = Path(__file__).resolve().parents[3] / "examples-repo" / "helm"
CHART = "charts/text-service"
TEMPLATE = f"{CHART}/templates/rayservice.yaml"
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def helm(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    binary = helm_for_tests()
    monkeypatch.setenv("GITRAY_HELM", binary)
    yield binary


def example_files(changes: dict[str, str | None] | None = None) -> dict[str, str]:
    files = {str(p.relative_to(EXAMPLE)): p.read_text() for p in sorted(EXAMPLE.rglob("*.yaml"))}
    for path, text in (changes or {}).items():
        if text is None:
            files.pop(path, None)
        else:
            files[path] = text
    return files


def load(files: dict[str, str], limits: RenderLimits | None = None) -> LoadResult:
    snapshot = Snapshot("worktree", "test",
                        tuple(RepoFile(p, t.encode()) for p, t in sorted(files.items())))
    return load_snapshot(snapshot, helm=runner.runner(limits))


def errors(result: LoadResult) -> list[str]:
    return [str(d) for d in result.diagnostics]


def config(entries: str, extra: str = "") -> str:
    return ("apiVersion: gitray.io/v1alpha1\nkind: Config\nallowedNamespaces: ['*']\n"
            f"{extra}helm:\n{entries}")


def chart(name: str, templates: dict[str, str], meta: str = "") -> dict[str, str]:
    files = {f"{name}/Chart.yaml": f"apiVersion: v2\nname: {Path(name).name}\nversion: 0.1.0\n"
             f"{meta}"}
    files.update({f"{name}/templates/{n}": t for n, t in templates.items()})
    return files


def helm_template(binary: str, release: str, namespace: str, values: str) -> str:
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "HELM_CACHE_HOME": home,
               "HELM_CONFIG_HOME": home, "HELM_DATA_HOME": home}
        return subprocess.run(
            [binary, "template", release, str(EXAMPLE / CHART), "--namespace", namespace,
             "--values", str(EXAMPLE / values)],
            capture_output=True, text=True, check=True, env=env).stdout


def test_the_example_chart_renders_to_what_helm_template_prints(helm: str) -> None:
    result = load(example_files())
    assert errors(result) == []
    yaml = YAML(typ="safe", pure=True)
    for env in ("staging", "prod"):
        printed = helm_template(helm, "text-service", f"ray-{env}", f"environments/{env}.yaml")
        (expected,) = [d for d in yaml.load_all(printed) if d]
        (workload,) = [w for w in result.workloads if w.key.namespace == f"ray-{env}"]
        assert json.loads(json.dumps(workload.manifest)) == expected
        assert workload.source.path == TEMPLATE


def test_a_plan_of_the_chart_equals_a_plan_of_helm_templates_output(helm: str) -> None:
    rendered = load(example_files())
    plain = {"gitray.yaml": "apiVersion: gitray.io/v1alpha1\nkind: Config\n",
             **{f"out-{env}.yaml": helm_template(helm, "text-service", f"ray-{env}",
                                                 f"environments/{env}.yaml")
                for env in ("staging", "prod")}}
    printed = load(plain)
    assert errors(printed) == []
    cfg = Config()
    a = compute_plan(rendered.workloads, live(), cfg, revision="r", against="empty", now=NOW)
    b = compute_plan(printed.workloads, live(), cfg, revision="r", against="empty", now=NOW)
    strip = [(w.key, w.action, w.changes, w.steps) for w in a.workloads]
    assert strip == [(w.key, w.action, w.changes, w.steps) for w in b.workloads]
    assert len(strip) == 2 and {w.action for w in a.workloads} == {Action.CREATE}


def test_chart_files_and_values_files_are_never_read_as_plain_manifests() -> None:
    result = load(example_files())
    assert errors(result) == [] and len(result.workloads) == 2  # no template parsed on its own


def test_a_namespace_less_object_goes_to_the_release_namespace() -> None:
    files = chart("c", {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"})
    files["gitray.yaml"] = config("  - {chart: c, release: r, namespace: team-a}\n")
    result = load(files)
    assert errors(result) == []
    assert [str(w.key) for w in result.workloads] == ["team-a/ConfigMap/x"]


def test_an_error_in_a_rendered_object_names_its_template() -> None:
    bad = example_files()[TEMPLATE].replace("rayStartParams: {}", "rayStartParamz: {}")
    found = errors(load(example_files({TEMPLATE: bad})))
    assert found and all(e.startswith(f"{TEMPLATE}:1:1: ") for e in found), found
    assert [e.rsplit("-n ", 1)[1] for e in found] == ["ray-prod)", "ray-staging)"], found
    assert all(f"(rendered from {TEMPLATE} by helm template text-service {CHART} -n ray-" in e
               for e in found), found


def test_a_template_error_points_at_the_template_line() -> None:
    bad = example_files()[TEMPLATE].replace("{{ .Values.image }}", "{{ .Values.image.tag.x }}",
                                            1)
    line = bad.splitlines().index("              image: {{ .Values.image.tag.x }}") + 1
    found = errors(load(example_files({TEMPLATE: bad})))
    assert len(found) == 2 and all(e.startswith(f"{TEMPLATE}:{line}:31: ") for e in found), found
    assert all("can't evaluate field tag" in e and "\n" not in e for e in found), found
    assert "helm template text-service charts/text-service -n ray-prod failed: " in found[0]
    assert "helm template text-service charts/text-service -n ray-staging failed: " in found[1]


def test_a_values_file_that_is_no_yaml_points_at_its_line() -> None:
    (found,) = errors(load(example_files({"environments/prod.yaml": "a: 1\nb: [\n"})))
    assert found.startswith("environments/prod.yaml:"), found


def test_a_missing_helm_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITRAY_HELM", "/nonexistent/helm")
    assert errors(load(example_files())) == [
        "gitray.yaml:9:5: helm is not installed: put helm (v3 or v4) on PATH or set GITRAY_HELM "
        "to render charts"]


@pytest.mark.parametrize(("entry", "message"), [
    ("{chart: ../outside, release: r}", "helm chart '../outside' leaves the repository"),
    ("{chart: /etc, release: r}", "helm chart '/etc' is absolute"),
    ("{chart: c, release: r, values: [c/../../x.yaml]}",
     "helm values file 'c/../../x.yaml' leaves the repository"),
    ("{chart: nothere, release: r}", "helm chart 'nothere': no Chart.yaml in that directory"),
    ("{chart: c, release: r, values: [v.yaml]}", "helm values file 'v.yaml' is not in the "
     "revision"),
])
def test_paths_leaving_the_revision_or_missing_are_refused_before_helm_runs(
        entry: str, message: str) -> None:
    files = chart("c", {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"})
    files["gitray.yaml"] = config(f"  - {entry}\n")
    before = runner.RENDERS[0]
    found = errors(load(files))
    assert len(found) == 1 and found[0].startswith("gitray.yaml:5:5: " + message), found
    assert runner.RENDERS[0] == before


def test_a_template_reading_outside_the_chart_reads_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("token: do-not-read\n")
    template = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n"
                f"  a: {{{{ .Files.Get \"../../../../../../..{secret}\" | quote }}}}\n"
                "  b: {{ .Files.Get \"../gitray.yaml\" | quote }}\n")
    files = chart("c", {"cm.yaml": template})
    files["gitray.yaml"] = config("  - {chart: c, release: r}\n")
    result = load(files)
    assert errors(result) == []
    (workload,) = result.workloads
    assert workload.manifest["data"] == {"a": "", "b": ""}


def test_a_remote_dependency_is_refused_unless_vendored() -> None:
    deps = ("dependencies:\n  - name: redis\n    version: 1.0.0\n"
            "    repository: oci://registry.example/charts\n")
    files = chart("c", {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
                  deps)
    files["gitray.yaml"] = config("  - {chart: c, release: r}\n")
    before = runner.RENDERS[0]
    assert errors(load(files)) == [
        "gitray.yaml:5:5: dependency redis from oci://registry.example/charts refused: it is not "
        "vendored into c/charts/ (gitray pulls from no chart repository or OCI registry; run "
        "helm dependency build and commit the unpacked chart)"]
    assert runner.RENDERS[0] == before
    files.update(chart("c/charts/redis", {
        "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: redis}\n"}))
    result = load(files)
    assert errors(result) == []
    assert sorted(w.key.name for w in result.workloads) == ["redis", "x"]
    (sub,) = [w for w in result.workloads if w.key.name == "redis"]
    assert sub.source.path == "c/charts/redis/templates/cm.yaml"


def huge(count: int) -> dict[str, str]:
    files = chart("c", {"many.yaml": (
        f"{{{{- range $i := until {count} }}}}\n---\napiVersion: v1\nkind: ConfigMap\n"
        "metadata: {name: cm-{{ $i }}}\ndata: {a: "
        "\"{{ repeat 200 \"x\" }}\"}\n{{- end }}\n")})
    files["gitray.yaml"] = config("  - {chart: c, release: r}\n")
    return files


def test_a_huge_output_is_refused_at_the_output_bound() -> None:
    found = errors(load(huge(20_000), RenderLimits(max_output_bytes=1024 * 1024)))
    assert found == ["gitray.yaml:5:5: helm template r c -n default refused: its output is "
                     "over 1 MiB"]


def test_a_template_that_loops_for_ever_is_stopped() -> None:
    loop = chart("c", {"loop.yaml": ("{{- range $i := until 100000 }}{{- range $j := until "
                                     "100000 }}{{- end }}{{- end }}\n")})
    loop["gitray.yaml"] = config("  - {chart: c, release: r}\n")
    assert errors(load(loop, RenderLimits(timeout_s=3))) == [
        "gitray.yaml:5:5: helm template r c -n default refused: it ran longer than 3 s"]


def test_a_template_past_the_memory_bound_is_stopped() -> None:
    limits = RenderLimits(max_memory_bytes=1024 ** 3, timeout_s=120)
    assert errors(load(example_files(), limits)) == []  # room for an ordinary render
    big = chart("c", {"big.yaml": "{{- range $i := until 2000000000 }}{{ $i }}{{- end }}\n"})
    big["gitray.yaml"] = config("  - {chart: c, release: r}\n")
    assert errors(load(big, limits)) == [
        "gitray.yaml:5:5: helm template r c -n default refused: it needed more than 1 GiB of "
        "memory"]


def test_unchanged_render_inputs_are_not_rendered_again() -> None:
    files = example_files({"environments/staging.yaml": "greeterReplicas: 1 # memo test\n"})
    load(files)
    before = runner.RENDERS[0]
    again = load({**files, "elsewhere.yaml": "# not an input of any render\n"})
    assert errors(again) == [] and runner.RENDERS[0] == before
    files["environments/prod.yaml"] += "# changed\n"
    load(files)
    assert runner.RENDERS[0] == before + 1  # prod only: staging's inputs are unchanged


def test_a_chart_no_entry_names_is_a_warning_and_not_read() -> None:
    files = chart("other", {"cm.yaml": "apiVersion: v1\nkind: {{ .Values.kind }}\n"})
    files["gitray.yaml"] = "apiVersion: gitray.io/v1alpha1\nkind: Config\nallowEmpty: true\n"
    result = load(files)
    assert errors(result) == []
    assert [str(w) for w in result.warnings] == [
        "other/Chart.yaml:1:1: a Helm chart no gitray.yaml helm entry names: not rendered (add "
        "one: helm: [{chart: other, release: NAME}])"]


def test_the_plan_of_a_values_change_says_which_release_upgrades() -> None:
    old = load(example_files()).workloads
    prod = example_files()["environments/prod.yaml"] + "image: rayproject/ray:2.61.0\n"
    new = load(example_files({"environments/prod.yaml": prod})).workloads
    plan = compute_plan(new, live(*old), Config(), revision="r", against="live", now=NOW)
    actions = {str(w.key): w.action for w in plan.workloads}
    assert actions == {"ray-prod/RayService/text-service": Action.REPLACE,
                       "ray-staging/RayService/text-service": Action.NOOP}
    text = render(plan, Format.TEXT)
    assert f"# RayService ray-prod/text-service  ({TEMPLATE}:1:1)\n" in text
    line = len(prod.splitlines())  # the image line the change reads
    assert ('image: "rayproject/ray:2.60.0" -> "rayproject/ray:2.61.0"  (set in '
            f'environments/prod.yaml:{line}:1)\n') in text
    assert "      rendered from charts/text-service with environments/prod.yaml\n" in text


def test_cli_plans_the_example_chart(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--repo", str(EXAMPLE), "--against", "empty"]) == 0
    out = capsys.readouterr().out
    assert f"# RayService ray-prod/text-service  ({TEMPLATE}:1:1)" in out
    assert f"# RayService ray-staging/text-service  ({TEMPLATE}:1:1)" in out
    assert out.count("      rendered from charts/text-service with environments/prod.yaml\n") == 1
    assert out.count("      rendered from charts/text-service with environments/staging.yaml\n") \
        == 1
    assert "Plan: 2 to create" in out


def test_the_example_snapshot_reads_every_render_input() -> None:
    paths = {f.path for f in read_snapshot(str(EXAMPLE)).files}
    assert {f"{CHART}/Chart.yaml", f"{CHART}/values.yaml", TEMPLATE,
            f"{CHART}/templates/_helpers.yaml", "environments/prod.yaml"} <= paths


def test_the_render_environment_is_minimal_and_offline() -> None:
    env = runner._environment("/tmp/x")
    assert set(env) >= {"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME",
                        "HELM_PLUGINS", "HELM_REGISTRY_CONFIG", "HELM_REPOSITORY_CONFIG"}
    assert all(v.startswith("/tmp/x/") for k, v in env.items() if k.startswith("HELM_"))
    assert not any(k in env for k in os.environ if "TOKEN" in k or "PASSWORD" in k)


def test_without_a_renderer_a_hostile_entry_is_still_refused_and_a_good_one_said_once() -> None:
    files = chart("c", {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"})
    files["gitray.yaml"] = config("  - {chart: ../x, release: r}\n  - {chart: c, release: r}\n"
                                  "  - {chart: c, release: s}\n")
    snapshot = Snapshot("worktree", "test",
                        tuple(RepoFile(p, t.encode()) for p, t in sorted(files.items())))
    assert [str(d) for d in load_snapshot(snapshot).diagnostics] == [
        "gitray.yaml:5:5: helm chart '../x' leaves the repository; the revision must be "
        "self-contained",
        "gitray.yaml:6:5: helm rendering is not available here"]
