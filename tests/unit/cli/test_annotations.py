"""Problems where reviewers look (gitray/plans/annotations.py, `--format github|codeclimate|
sarif`): GitHub's workflow-command escaping as its toolkit documents it, GitLab's code-quality
format, SARIF 2.1.0 against OASIS' schema, and the command line's reports."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from gitray.cli.app import main
from gitray.cli.contract import REPORT_FORMATS
from gitray.core.model import Diagnostic, SourceLocation
from gitray.plans.annotations import (
    Finding,
    Level,
    ReportFormat,
    codeclimate_report,
    escape_data,
    escape_property,
    findings_of,
    github_commands,
    sarif_report,
    workflow_command,
)
from tests.reportschemas import CODE_QUALITY_SCHEMA, sarif_schema

EXAMPLES = Path(__file__).parents[3] / "examples-repo"
PROBLEM = "namespace 'prod' is not in allowedNamespaces (ray-*, default) of gitray.yaml"


def _unescape(text: str, codes: dict[str, str]) -> str:
    """The runner's decoding: each %XX it knows, in one pass."""
    return re.sub("%(" + "|".join(codes) + ")", lambda m: codes[m.group(1)], text)


DATA_CODES = {"25": "%", "0D": "\r", "0A": "\n"}
PROPERTY_CODES = {**DATA_CODES, "3A": ":", "2C": ","}


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """``::name k=v,k=v::message`` as the runner splits it."""
    assert line.startswith("::") and "\n" not in line and "\r" not in line
    head, sep, message = line[2:].partition("::")
    assert sep
    name, _, props = head.partition(" ")
    properties = {}
    for pair in filter(None, props.split(",")):
        key, _, value = pair.partition("=")
        properties[key] = _unescape(value, PROPERTY_CODES)
    return name, properties, _unescape(message, DATA_CODES)


@pytest.mark.parametrize(("text", "data", "prop"), [
    ("plain", "plain", "plain"),
    ("100%", "100%25", "100%25"),
    ("a\nb", "a%0Ab", "a%0Ab"),
    ("a\r\nb", "a%0D%0Ab", "a%0D%0Ab"),
    ("%0A is text", "%250A is text", "%250A is text"),
    ("path:line,col", "path:line,col", "path%3Aline%2Ccol"),
    ("::error::x", "::error::x", "%3A%3Aerror%3A%3Ax"),
])
def test_escaping_follows_githubs_documented_rules(text: str, data: str, prop: str) -> None:
    assert escape_data(text) == data
    assert escape_property(text) == prop


def test_a_workflow_command_has_the_exact_syntax() -> None:
    line = workflow_command("error", "bad: 100%\nnext", [("file", "a,b:c.yaml"), ("line", "3"),
                                                         ("col", "5")])
    assert line == "::error file=a%2Cb%3Ac.yaml,line=3,col=5::bad: 100%25%0Anext"


@pytest.mark.parametrize("text", ["100% sure", "%0A stays text", "a:b,c=d", "one\ntwo\r\n",
                                  "::warning::injected", "ünïcode, ok: %25"])
def test_any_text_survives_the_round_trip(text: str) -> None:
    name, props, message = parse_command(workflow_command("warning", text, [("file", text),
                                                                             ("title", text)]))
    assert (name, props, message) == ("warning", {"file": text, "title": text}, text)


def test_findings_become_annotations_on_files_from_the_repository_top() -> None:
    findings = findings_of([Diagnostic(SourceLocation("svc/a.yaml", 4, 7), "bad, really")],
                           [Diagnostic(SourceLocation("svc/a.yaml", 9, 2), "odd: 50%")])
    assert github_commands(findings, "gitops") == (
        "::error file=gitops/svc/a.yaml,line=4,col=7,title=gitray::bad, really\n"
        "::warning file=gitops/svc/a.yaml,line=9,col=2,title=gitray::odd: 50%25\n")
    assert github_commands([Finding(Level.ERROR, "no file")]) == "::error title=gitray::no file\n"


def test_the_code_quality_report_has_gitlabs_documented_fields() -> None:
    same = [Diagnostic(SourceLocation("a.yaml", line, 1), "duplicate") for line in (3, 8)]
    report = json.loads(codeclimate_report(findings_of(same, [same[0]]), "sub"))
    jsonschema.validate(report, CODE_QUALITY_SCHEMA)
    assert [(i["severity"], i["location"]) for i in report] == [
        ("major", {"path": "sub/a.yaml", "lines": {"begin": 3}}),
        ("major", {"path": "sub/a.yaml", "lines": {"begin": 8}}),
        ("minor", {"path": "sub/a.yaml", "lines": {"begin": 3}})]
    assert len({i["fingerprint"] for i in report}) == 3  # equal problems stay apart
    moved = json.loads(codeclimate_report(findings_of(
        [Diagnostic(SourceLocation("a.yaml", 30, 1), "duplicate")], []), "sub"))
    assert moved[0]["fingerprint"] == report[0]["fingerprint"]  # moving a problem keeps it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{**report[0], "severity": "fatal"}], CODE_QUALITY_SCHEMA)


def test_sarif_validates_against_the_sarif_2_1_0_schema() -> None:
    findings = findings_of([Diagnostic(SourceLocation("dir with space/ü.yaml", 2, 3), "bad")],
                           [Diagnostic(SourceLocation("b.yaml", 5, 1), "odd")])
    log = json.loads(sarif_report(findings, "0.1.0"))
    schema = sarif_schema()
    jsonschema.Draft4Validator(schema).validate(log)
    results = log["runs"][0]["results"]
    assert [(r["level"], r["ruleId"]) for r in results] == [
        ("error", "gitray/invalid-manifest"), ("warning", "gitray/manifest-warning")]
    location = results[0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "dir%20with%20space/%C3%BC.yaml"
    assert location["region"] == {"startLine": 2, "startColumn": 3}
    broken = {**log, "version": "2.0.0"}
    assert not jsonschema.Draft4Validator(schema).is_valid(broken)


def test_the_parser_offers_every_report_format() -> None:
    assert tuple(f.value for f in ReportFormat) == REPORT_FORMATS


@pytest.fixture
def bad_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    cluster = repo / "ray-cluster" / "raycluster.yaml"
    cluster.write_text(cluster.read_text().replace("namespace: ray-dev", "namespace: prod"))
    return repo


def test_validate_format_github_prints_workflow_commands_once(
        bad_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--repo", str(bad_repo), "--format", "github"]) == 1
    out, err = capsys.readouterr()
    assert out == (f"::error file=ray-cluster/raycluster.yaml,line=10,col=3,title=gitray::"
                   f"{PROBLEM}\n")
    assert err == "gitray: 1 problem found; nothing was applied\n"


@pytest.mark.parametrize("fmt", ["codeclimate", "sarif"])
def test_json_reports_are_the_whole_stdout_even_when_invalid(
        fmt: str, bad_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--repo", str(bad_repo), "--format", fmt]) == 1
    report = json.loads(capsys.readouterr().out)
    if fmt == "codeclimate":
        jsonschema.validate(report, CODE_QUALITY_SCHEMA)
        assert report[0]["description"] == PROBLEM
    else:
        jsonschema.Draft4Validator(sarif_schema()).validate(report)
        assert report["runs"][0]["results"][0]["message"]["text"] == PROBLEM


def test_plan_format_sarif_keeps_the_plan_text_in_the_log(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["plan", "--repo", str(EXAMPLES), "--against", "empty", "--format",
                 "sarif"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["runs"][0]["results"] == []
    assert "Plan: 4 to create" in err


def test_plan_format_github_folds_the_text_and_stops_commands_inside_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--repo", str(EXAMPLES), "--against", "empty", "--format",
                 "github"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("::group::gitray plan for ")
    token = lines[1].removeprefix("::stop-commands::")
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    end = lines.index(f"::{token}::")
    assert lines[end + 1] == "::endgroup::"
    assert lines[end - 1].startswith("Plan: 4 to create")
    assert ("::notice file=examples-repo/ray-cluster/raycluster.yaml,line=6,col=1,"
            "title=gitray plan::+ RayCluster ray-dev/interactive: create (1 step)") in lines


def test_validate_staged_reads_the_index_not_the_working_tree(
        bad_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.ci.harness import commit_all, git

    cluster = bad_repo / "ray-cluster" / "raycluster.yaml"
    bad = cluster.read_text()
    cluster.write_text(bad.replace("namespace: prod", "namespace: ray-dev"))
    git(bad_repo, "init", "-q", "-b", "main")
    commit_all(bad_repo, "valid")
    cluster.write_text(bad)
    git(bad_repo, "add", "-A")
    cluster.write_text(bad.replace("namespace: prod", "namespace: ray-dev"))  # not staged
    assert main(["validate", "--repo", str(bad_repo)]) == 0
    assert main(["validate", "--repo", str(bad_repo), "--staged"]) == 1
    assert f"ray-cluster/raycluster.yaml:10:3: {PROBLEM}" in capsys.readouterr().err
    assert main(["validate", "--repo", str(bad_repo), "--staged", "--revision", "HEAD"]) == 1
    assert "--staged reads Git's index" in capsys.readouterr().err
