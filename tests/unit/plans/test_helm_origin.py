"""Where a Helm-rendered change comes from (issue 32, item 5; gitray/plans/helmvalues.py,
gitray/plans/origin.py): plans say which chart and values files rendered a workload and which
values line a changed field reads; findings about a value printed by a template line stand at
that values line. The pure tracing is tested on its own; the end-to-end cases render with the
real helm of the test environment (testenv/helm.py), like tests/unit/plans/test_helm.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitray.core.config import Config
from gitray.core.model import ObjectKey, Origin, SourceLocation, ValueLine, Workload
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.plans.annotations import plan_notices
from gitray.plans.helmvalues import (
    Values,
    load_values,
    match_line,
    template_lines,
    trace_change,
)
from gitray.plans.load import LoadResult, load_snapshot
from gitray.plans.origin import with_origin
from gitray.plans.plan import (
    Action,
    FieldChange,
    Plan,
    Step,
    WorkloadPlan,
    plan_from_json,
    plan_schema_problem,
    plan_to_json,
)
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.plans.sensitive import SENSITIVE
from gitray.plans.steptypes import StepType
from gitray.render import helm as runner
from testenv.helm import helm_for_tests
from tests.unit.builders import live

EXAMPLE = Path(__file__).resolve().parents[3] / "examples-repo" / "helm"
CHART = "charts/text-service"
TEMPLATE = f"{CHART}/templates/rayservice.yaml"
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def values(**files: str) -> Values:
    """Values files by name (``v_yaml`` is v.yaml), lowest precedence first."""
    repo = {k.replace("_yaml", ".yaml"): RepoFile(k.replace("_yaml", ".yaml"), v.encode())
            for k, v in files.items()}
    return load_values("c", list(repo), repo)


def at(path: str, line: int, col: int = 1) -> SourceLocation:
    return SourceLocation(path, line, col)


# --- merged values -------------------------------------------------------------------------

def test_a_later_values_file_wins_and_the_charts_values_are_the_defaults() -> None:
    repo = {"c/values.yaml": RepoFile("c/values.yaml", b"image: a\nworkers: {replicas: 1}\n"),
            "env/a.yaml": RepoFile("env/a.yaml", b"workers:\n  replicas: 2\n"),
            "env/b.yaml": RepoFile("env/b.yaml", b"other: 1\nworkers:\n  replicas: 3\n")}
    merged = load_values("c", ["env/a.yaml", "env/b.yaml"], repo)
    assert merged.lookup(("workers", "replicas")) == (3, at("env/b.yaml", 3, 3))
    assert merged.lookup(("image",)) == ("a", at("c/values.yaml", 1))
    assert merged.lookup(("nothere",)) is None
    assert merged.lookup(("image", "tag")) is None  # a scalar has no children


def test_values_files_that_are_missing_or_not_one_mapping_are_left_out() -> None:
    repo = {"a.yaml": RepoFile("a.yaml", b"- a\n- b\n"), "b.yaml": RepoFile("b.yaml", b"x: [\n"),
            "c.yaml": RepoFile("c.yaml", b"x: 1\n---\nx: 2\n"),
            "d.yaml": RepoFile("d.yaml", b"x: 4\n")}
    merged = load_values("chart", ["a.yaml", "b.yaml", "c.yaml", "gone.yaml", "d.yaml"], repo)
    assert [p for p, _ in merged.files] == ["d.yaml"]


# --- template lines ------------------------------------------------------------------------

TEMPLATE_TEXT = """\
metadata:
  name: {{ .Release.Name }}
  labels:
    {{- include "x.labels" . | nindent 4 }}
spec:
  image: {{ .Values.image }}
  tag: "{{ .Values.repo }}:{{ .Values.tag }}"
  version: {{ .Values.version | quote }}
  trimmed: {{- .Values.image }}
  mixed: {{ .Values.image }}-{{ .Release.Name }}
  replicas: {{ $.Values.workers.replicas }}
  flag: {{ .Values.flag }}
  big: {{ .Values.big }}
  ratio: {{ .Values.ratio }}
  missing: {{ .Values.nothere }}
  config: |
    replicas: {{ .Values.workers.replicas }}
    literal: 1
  after: {{ .Values.image }}
  items:
    - name: {{ .Values.image }}
"""


def lines_of(text: str = TEMPLATE_TEXT) -> list[ValueLine]:
    merged = values(v_yaml="image: ray:1\nrepo: r\ntag: t\nversion: \"2.1\"\nworkers:\n"
                           "  replicas: 2\nflag: true\nbig: 1000000\nratio: 0.5\n")
    return template_lines("c/templates/t.yaml", text, merged)


def test_only_lines_of_simple_values_actions_are_traced_with_what_they_print() -> None:
    found = {v.template.line: (v.key, v.text, v.value, v.block) for v in lines_of()}
    assert found == {
        6: ("image", "image: ray:1", "ray:1", ""),
        7: ("tag", 'tag: "r:t"', "r:t", ""),
        8: ("version", 'version: "2.1"', "2.1", ""),
        11: ("replicas", "replicas: 2", 2, ""),
        12: ("flag", "flag: true", True, ""),
        17: ("replicas", "replicas: 2", None, "config"),
        19: ("after", "after: ray:1", "ray:1", ""),
        21: ("name", "- name: ray:1", "ray:1", ""),
    }  # not: .Release, include, {{-, a mixed line, 1e+06, a float, a missing value


def test_a_traced_line_names_every_values_line_it_reads() -> None:
    (tag,) = [v for v in lines_of() if v.key == "tag"]
    assert tag.values == (at("v.yaml", 2), at("v.yaml", 3))
    assert tag.template == at("c/templates/t.yaml", 7, 3)


def test_a_quoted_value_with_a_quote_or_a_non_ascii_character_is_not_traced() -> None:
    for value in ('a"b', "a\\\\b", "é"):
        merged = values(v_yaml=f"x: {json.dumps(value)}\n")
        assert template_lines("t.yaml", "a: {{ .Values.x | quote }}\n", merged) == []
    merged = values(v_yaml="x: plain\n")
    (line,) = template_lines("t.yaml", "a: {{ .Values.x | quote }}\n", merged)
    assert line.text == 'a: "plain"'


def test_a_block_ends_where_its_indentation_does() -> None:
    text = "data:\n  a.yaml: |-\n    x: {{ .Values.x }}\n\n    y: 1\n  b: {{ .Values.x }}\n"
    merged = values(v_yaml="x: 3\n")
    assert [(v.key, v.block) for v in template_lines("t.yaml", text, merged)] == [
        ("x", "a.yaml"), ("b", "")]


# --- a rendered line, a changed field ------------------------------------------------------

def line(number: int, key: str, text: str, value: object, *reads: SourceLocation,
         block: str = "") -> ValueLine:
    return ValueLine(at("t.yaml", number), key, text, value, tuple(reads), block)  # type: ignore[arg-type]


A, B = at("a.yaml", 1), at("b.yaml", 4)


def test_a_rendered_line_matches_the_template_lines_that_print_it() -> None:
    head, worker = line(3, "image", "image: x", "x", A), line(9, "image", "image: x", "x", A)
    other = line(5, "image", "image: y", "y", B)
    assert match_line("      image: y", [head, other]) == [other]
    assert match_line("  image: x", [head, worker, other]) == [head, worker]
    assert match_line("image: z", [head, other]) == []
    clash = line(7, "image", "image: x", "x", B)  # the same text from other values
    assert match_line("image: x", [head, clash]) == []
    flow = line(4, "requests", "requests: {cpu: 1, memory: 2Gi}", None, A)
    assert match_line("requests: {cpu: 1, memory: 2Gi}", [flow]) == []
    inside = line(6, "num_replicas", "num_replicas: 3", None, B, block="serveConfigV2")
    assert match_line("        num_replicas: 3", [inside]) == [inside]


def test_a_changed_field_is_traced_to_the_line_setting_its_key_to_its_value() -> None:
    lines = [line(3, "image", "image: x", "x", A), line(4, "replicas", "replicas: 2", 2, B)]
    path = "spec.containers[head].image"
    assert trace_change(path, "old", "x", lines) == (A,)
    assert trace_change("spec.workerGroupSpecs[w].replicas", 1, 2.0, lines) == (B,)
    assert trace_change(path, "old", "other", lines) == ()  # not what the line prints
    assert trace_change("spec.containers[image]", None, "x", lines) == ()  # no key "image"
    assert trace_change("spec.xreplicas", 1, 2, lines) == ()  # a key ending the same
    assert trace_change(path, "x", None, lines) == ()  # removed
    assert trace_change("spec", {}, {"image": "x"}, lines) == ()
    assert trace_change(path, "old", "x", [*lines, line(8, "image", "image: x", "x", B)]) == ()


def test_a_block_scalars_new_lines_are_traced() -> None:
    lines = [line(5, "num_replicas", "num_replicas: 3", None, A, block="serveConfigV2"),
             line(6, "name", "- name: g", None, B, block="serveConfigV2"),
             line(9, "a", "a: 3", None, B, block="other")]
    before = "applications:\n  - name: g\n    num_replicas: 2\n"
    after = "applications:\n  - name: g\n    num_replicas: 3\n"
    assert trace_change("spec.serveConfigV2", before, after, lines) == (A,)
    assert trace_change("spec.serveConfigV2", None, after, lines) == (A, B)  # all new
    assert trace_change("data.config.yaml", before, after, [
        line(2, "num_replicas", "num_replicas: 3", None, B, block="config.yaml")]) == (B,)


def test_with_origin_says_the_render_and_traces_all_but_sensitive_changes() -> None:
    lines = (line(3, "image", "image: x", "x", A), line(4, "token", "token: s", "s", B))
    workload = Workload(ObjectKey("RayService", "ns", "w"), "ray.io/v1", {}, at("t.yaml", 1),
                        origin=Origin("rendered from c with a.yaml", lines))
    wp = WorkloadPlan(ObjectKey("RayService", "ns", "w"), Action.UPDATE, 0, changes=(
        FieldChange("spec.image", "old", "x"), FieldChange("spec.token", SENSITIVE, SENSITIVE),
        FieldChange("spec.other", 1, 2)))
    out = with_origin(wp, workload)
    assert out.origin == "rendered from c with a.yaml"
    assert [c.origin for c in out.changes] == ["a.yaml:1:1", "", ""]
    plain = Workload(workload.key, "ray.io/v1", {}, at("w.yaml", 1))
    assert with_origin(wp, plain) is wp and with_origin(wp, None) is wp


def test_the_origin_is_shown_and_kept_in_every_plan_format() -> None:
    apply = Step("01-apply-object", StepType.APPLY_OBJECT, "c", {"manifest": {}})
    wp = WorkloadPlan(ObjectKey("ConfigMap", "ns", "c"), Action.UPDATE, 0, (apply,),
                      source=at("c/templates/t.yaml", 1), origin="rendered from c with a.yaml",
                      changes=(FieldChange("data.a", "1", "2", "a.yaml:3:1, b.yaml:1:1"),
                               FieldChange("data.b", "1", "2")))
    plan = Plan(revision="r", against="live", basis=(), workloads=(wp,))
    text = render(plan, Format.TEXT)
    assert ("  ~ ConfigMap ns/c will be updated in place\n"
            "      rendered from c with a.yaml\n"
            '      ~ data.a: "1" -> "2"  (set in a.yaml:3:1, b.yaml:1:1)\n'
            '      ~ data.b: "1" -> "2"\n') in text
    (notice,) = plan_notices(plan)
    assert notice.message == ("~ ConfigMap ns/c: update (1 step; rendered from c with a.yaml)")
    assert notice.location == at("c/templates/t.yaml", 1)
    markdown = render(plan, Format.MARKDOWN)
    assert "_rendered from c with a.yaml_\n" in markdown
    assert '~ data.a: "1" -> "2"  (set in a.yaml:3:1, b.yaml:1:1)\n' in markdown
    data = json.loads(render(plan, Format.JSON))
    assert plan_schema_problem(data) == ""
    (item,) = data["workloads"]
    assert item["origin"] == "rendered from c with a.yaml"
    assert [c.get("origin") for c in item["changes"]] == ["a.yaml:3:1, b.yaml:1:1", None]
    assert plan_from_json(data) == plan
    assert plan_from_json(data).workloads[0].changes[0].origin == "a.yaml:3:1, b.yaml:1:1"
    plain = plan_to_json(Plan(revision="r", against="live", basis=(), workloads=(
        WorkloadPlan(wp.key, wp.action, 0, wp.steps, changes=(FieldChange("x", 1, 2),)),)))
    assert "origin" not in plain["workloads"][0]
    assert "origin" not in plain["workloads"][0]["changes"][0]


# --- end to end, with the real helm --------------------------------------------------------

@pytest.fixture
def helm(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    binary = helm_for_tests()
    monkeypatch.setenv("GITRAY_HELM", binary)
    yield binary


def example_files(changes: dict[str, str] | None = None) -> dict[str, str]:
    files = {str(p.relative_to(EXAMPLE)): p.read_text() for p in sorted(EXAMPLE.rglob("*.yaml"))}
    files.update(changes or {})
    return files


def load(files: dict[str, str]) -> LoadResult:
    snapshot = Snapshot("worktree", "test",
                        tuple(RepoFile(p, t.encode()) for p, t in sorted(files.items())))
    return load_snapshot(snapshot, helm=runner.runner(None))


def plan_text(changes: dict[str, str]) -> str:
    old = load(example_files()).workloads
    new = load(example_files(changes))
    assert new.diagnostics == ()
    plan = compute_plan(new.workloads, live(*old), Config(), revision="r", against="live",
                        now=NOW)
    return render(plan, Format.TEXT)


def prod_with(extra: str) -> str:
    return example_files()["environments/prod.yaml"] + extra


def test_a_prod_values_change_is_planned_at_its_values_line(helm: str) -> None:
    prod = prod_with("image: rayproject/ray:2.61.0\n")
    text = plan_text({"environments/prod.yaml": prod})
    image = len(prod.splitlines())
    assert ("  ± RayService ray-prod/text-service will get a new cluster (blue-green)\n"
            "      rendered from charts/text-service with environments/prod.yaml\n") in text
    for group in ("headGroupSpec.template.spec.containers[ray-head]",
                  "workerGroupSpecs[workers].template.spec.containers[ray-worker]"):
        assert (f'      ~ spec.rayClusterConfig.{group}.image: "rayproject/ray:2.60.0" -> '
                f'"rayproject/ray:2.61.0"  (set in environments/prod.yaml:{image}:1)\n') in text
    assert "ray-staging" not in text  # unchanged


def test_a_chart_default_change_is_traced_to_the_charts_values(helm: str) -> None:
    defaults = example_files()[f"{CHART}/values.yaml"].replace(
        "image: rayproject/ray:2.60.0", "image: rayproject/ray:2.61.0")
    line = defaults.splitlines().index("image: rayproject/ray:2.61.0") + 1
    text = plan_text({f"{CHART}/values.yaml": defaults})
    assert text.count(f"(set in {CHART}/values.yaml:{line}:1)\n") == 4  # 2 images x 2 releases
    assert "rendered from charts/text-service with environments/staging.yaml\n" in text


def test_a_template_change_is_not_traced_to_any_values_line(helm: str) -> None:
    template = example_files()[TEMPLATE].replace("requests: {cpu: 200m, memory: 2Gi}",
                                                 "requests: {cpu: 300m, memory: 2Gi}")
    text = plan_text({TEMPLATE: template})
    assert '.resources.requests.cpu: "200m" -> "300m"\n' in text
    assert "set in" not in text
    assert text.count("      rendered from charts/text-service with environments/") == 2


def test_an_entry_without_values_files_says_the_charts_defaults(helm: str) -> None:
    files = example_files({"gitray.yaml": example_files()["gitray.yaml"].split("  - chart:")[0]
                           + "  - {chart: charts/text-service, release: t, namespace: ray-a}\n"})
    del files["environments/prod.yaml"], files["environments/staging.yaml"]
    (workload,) = load(files).workloads
    assert workload.origin is not None
    assert workload.origin.text == "rendered from charts/text-service with its default values"
    assert {str(r) for v in workload.origin.lines for r in v.values} <= {
        f"{CHART}/values.yaml:{n}:{c}" for n in range(1, 9) for c in (1, 3)}


def test_a_bad_value_is_reported_at_its_values_line(helm: str) -> None:
    prod = prod_with("image: 7\n")
    found = [str(d) for d in load(example_files({"environments/prod.yaml": prod})).diagnostics]
    shown = "helm template text-service charts/text-service -n ray-prod"
    image = len(prod.splitlines())
    assert found == [
        f"environments/prod.yaml:{image}:1: spec.rayClusterConfig.{group}.template.spec."
        f"containers[0].image: 7 is not of type 'string' (rendered through {TEMPLATE} by "
        f"{shown})" for group in ("headGroupSpec", "workerGroupSpecs[0]")]


def test_a_bad_value_printed_by_one_template_line_names_that_line(helm: str) -> None:
    staging = example_files()["environments/staging.yaml"] + "workers:\n  replicas: many\n"
    found = [str(d) for d in load(example_files({"environments/staging.yaml": staging}))
             .diagnostics]
    template = example_files()[TEMPLATE].splitlines()
    number = template.index("        replicas: {{ .Values.workers.replicas }}") + 1
    assert len(found) == 1, found
    assert found[0].startswith(f"environments/staging.yaml:{len(staging.splitlines())}:3: "
                               "spec.rayClusterConfig.workerGroupSpecs[0].replicas: "), found
    assert found[0].endswith(f"(rendered through {TEMPLATE}:{number}:9 by helm template "
                             "text-service charts/text-service -n ray-staging)"), found


def test_a_bad_value_inside_the_serve_config_block_is_at_its_values_line(helm: str) -> None:
    found = [str(d) for d in load(example_files({
        "environments/staging.yaml": "greeterReplicas: many\n"})).diagnostics]
    number = example_files()[TEMPLATE].splitlines().index(
        "            num_replicas: {{ .Values.greeterReplicas }}") + 1
    assert len(found) == 1, found
    assert found[0].startswith("environments/staging.yaml:1:1: spec.serveConfigV2: "
                               "applications[0].deployments[0].num_replicas: 'many' "), found
    assert found[0].endswith(f"(rendered through {TEMPLATE}:{number}:13 by helm template "
                             "text-service charts/text-service -n ray-staging)"), found


def test_a_wrong_key_on_a_values_line_is_the_templates_fault(helm: str) -> None:
    bad = example_files()[TEMPLATE].replace("rayVersion:", "rayVersionn:")
    number = bad.splitlines().index('    rayVersionn: {{ .Values.rayVersion | quote }}') + 1
    found = [str(d) for d in load(example_files({TEMPLATE: bad})).diagnostics]
    assert len(found) == 2 and all(e.startswith(f"{TEMPLATE}:{number}:5: ") for e in found)
    assert all("unknown field 'rayVersionn'" in e and f"(rendered from {TEMPLATE} by" in e
               for e in found), found


def test_a_subcharts_templates_are_not_traced(helm: str) -> None:
    files = {"gitray.yaml": "apiVersion: gitray.io/v1alpha1\nkind: Config\n"
             "allowedNamespaces: ['*']\nhelm:\n  - {chart: c, release: r, values: [v.yaml]}\n",
             "c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n",
             "c/values.yaml": "sub: {count: 1}\n",
             "c/charts/sub/Chart.yaml": "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
             "c/charts/sub/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\n"
             "metadata: {name: sub}\ndata:\n  count: {{ .Values.count | quote }}\n",
             "v.yaml": "count: 2\nsub: {count: 2}\n"}  # helm reads the key n as false
    (workload,) = load(files).workloads
    assert workload.manifest["data"] == {"count": "2"}
    assert workload.source == at("c/charts/sub/templates/cm.yaml", 1)
    assert workload.origin == Origin("rendered from c with v.yaml", ())


def test_a_block_scalars_changed_line_is_planned_at_its_values_line(helm: str) -> None:
    def files(workers: int) -> dict[str, str]:
        return {"gitray.yaml": "apiVersion: gitray.io/v1alpha1\nkind: Config\n"
                "allowedNamespaces: ['*']\nhelm:\n  - {chart: c, release: r, values: [v.yaml]}\n",
                "c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n",
                "c/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"
                "data:\n  config.yaml: |\n    name: app\n    workers: {{ .Values.workers }}\n"
                "  plain: {{ .Values.name }}\n",
                "v.yaml": f"name: x\nworkers: {workers}\n"}
    old, new = load(files(1)), load(files(2))
    assert old.diagnostics == new.diagnostics == ()
    plan = compute_plan(new.workloads, live(*old.workloads), Config(), revision="r",
                        against="live", now=NOW)
    (wp,) = plan.workloads
    assert wp.origin == "rendered from c with v.yaml"
    assert [(c.path, c.origin) for c in wp.changes] == [("data.config.yaml", "v.yaml:2:1")]
