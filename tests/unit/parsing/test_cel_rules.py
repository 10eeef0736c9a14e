"""The KubeRay v1.7.0 CRDs' CEL rules, as gitray applies them (gitray.parsing.cel).

Every rule that applies on create has a manifest breaking it (tests/cel_cases.py): ``gitray
validate`` exits 1 and names the rule's own message at ``path:line:col`` of the field, so
nothing is applied. The transition rules (``self == oldSelf``) apply on update: they are
checked against the live object an apply would update, and skipped offline with a note.
The same manifests go to a real API server in tests/integration/test_cel_agreement.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gitray.cli import main
from gitray.core.model import LiveObject, ObjectKey, SourceLocation, Workload
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.parsing.cel import rule_findings
from gitray.parsing.crdschema import CelRule
from gitray.parsing.kuberay import packaged
from gitray.plans.load import load_snapshot
from gitray.plans.transitions import transition_problems
from testenv.manifests import dump
from tests.cel_cases import (
    RELEASE,
    base_manifest,
    breaking_manifest,
    checked_rules,
    set_at,
    transition_rules,
)

CONFIG = "apiVersion: gitray.io/v1alpha1\nkind: Config\nkuberayVersion: {}\n"
CASES = checked_rules()


def _id(case: tuple[str, CelRule]) -> str:
    kind, rule = case
    return f"{kind} {'.'.join(rule.path)}: {rule.rule[:40]}"


def test_the_v170_crds_have_rules_of_both_sorts() -> None:
    assert len(CASES) == 15 and len(transition_rules()) == 11
    assert {kind for kind, _ in CASES} == {"RayCluster", "RayJob", "RayService", "RayCronJob"}


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService", "RayCronJob"])
def test_the_base_manifests_are_valid(kind: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gitray.yaml").write_text(CONFIG.format(RELEASE))
    (tmp_path / "m.yaml").write_text(dump(base_manifest(kind, "ok")))
    assert main(["validate", "--repo", str(tmp_path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_a_manifest_breaking_a_rule_is_refused_with_its_message(
        case: tuple[str, CelRule], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kind, rule = case
    text = dump(breaking_manifest(kind, rule, "broken"))
    (tmp_path / "gitray.yaml").write_text(CONFIG.format(RELEASE))
    (tmp_path / "m.yaml").write_text(text)
    assert main(["validate", "--repo", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    found = re.findall(rf"^m\.yaml:(\d+):(\d+): (spec\.[\w.\[\]]+): {re.escape(rule.message)}$",
                       err, re.MULTILINE)
    assert found, err
    line, column, where = found[0]
    leaf = rule.path[-1]
    assert where.endswith(leaf), where
    # line:col is the field's own key in the file
    assert text.splitlines()[int(line) - 1][int(column) - 1:].startswith(f"{leaf}:"), \
        (line, column, text)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_v162_judges_by_its_own_rules(case: tuple[str, CelRule]) -> None:
    """The rules come with the release: v1.6.2 has the same create rules except on fields
    it does not have (there the field itself is unknown)."""
    kind, rule = case
    text = dump(breaking_manifest(kind, rule, "broken")).encode()
    files = (RepoFile("gitray.yaml", CONFIG.format("v1.6.2").encode()), RepoFile("m.yaml", text))
    result = load_snapshot(Snapshot("worktree", "t", files))
    assert result.kuberay is not None and result.kuberay.version == "v1.6.2"
    assert result.diagnostics, "refused under v1.6.2 too (by its rule or as an unknown field)"


def test_offline_the_transition_rules_are_left_to_the_api_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gitray.yaml").write_text(CONFIG.format(RELEASE))
    (tmp_path / "m.yaml").write_text(dump(base_manifest("RayCluster", "ok")))
    assert main(["validate", "--repo", str(tmp_path)]) == 0
    assert ("Manifests judged by KubeRay v1.7.0 schemas (packaged): 15 CEL rules checked; 11 "
            "transition rules (oldSelf) left to the API server: they apply to updates, and no "
            "live object was read.") in capsys.readouterr().err


TRANSITIONS = [(kind, r) for kind, r in transition_rules() if kind in ("RayCluster",
                                                                          "RayCronJob")]


@pytest.mark.parametrize("case", TRANSITIONS, ids=[_id(c) for c in TRANSITIONS])
def test_an_update_breaking_a_transition_rule_is_refused(case: tuple[str, CelRule]) -> None:
    kind, rule = case
    leaf = rule.path[-1]
    before, after = (("ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue")
                     if leaf == "managedBy" else ("redis", "rocksdb"))
    base = base_manifest(kind, "c")
    old = set_at(base, rule.path, before)
    new = set_at(base, rule.path, after)
    key = ObjectKey(kind, "ray", "c")
    workload = Workload(key, "ray.io/v1", new, SourceLocation("m.yaml", 1, 1))
    live = LiveObject(kind, "ray", "c", "7", old)
    problems, warnings = transition_problems({key: workload}, [live], packaged(RELEASE))
    where = ".".join(rule.path)
    assert [p.message for p in problems] == [
        f"{where}: {rule.message} (updating the live {kind} ray/c, which has {before!r})"]
    assert warnings == []
    same = LiveObject(kind, "ray", "c", "7", new)
    assert transition_problems({key: workload}, [same], packaged(RELEASE)) == ([], [])


def test_a_transition_rule_needs_the_old_value() -> None:
    rule = CelRule(("spec", "managedBy"), "self == oldSelf", message="immutable")
    new = {"spec": {"managedBy": "a"}}
    assert rule_findings([rule], new) == []  # no live object: not run
    assert rule_findings([rule], new, {"spec": {}}) == []  # set for the first time: allowed
    assert [f.message for f in rule_findings([rule], new, {"spec": {"managedBy": "b"}})] == \
        ["immutable"]


def test_a_rule_gitray_cannot_evaluate_is_a_warning_once() -> None:
    rule = CelRule(("spec", "workerGroupSpecs", "*"), "self.groupName.isSorted()")
    findings = rule_findings([rule], {"spec": {"workerGroupSpecs": [{"groupName": "a"},
                                                                    {"groupName": "b"}]}})
    assert [(f.evaluated, f.message) for f in findings] == [
        (False, "undeclared reference to 'isSorted'")]


def test_a_rule_without_a_message_is_reported_by_its_text() -> None:
    rule = CelRule(("spec",), "size(self.name) < 3")
    (finding,) = rule_findings([rule], {"spec": {"name": "long"}})
    assert finding.evaluated and finding.message == "failed rule: size(self.name) < 3"


def test_a_message_expression_is_used() -> None:
    rule = CelRule(("spec",), "self.n < 3", message="too many",
                   message_expression="'n is ' + string(self.n)")
    (finding,) = rule_findings([rule], {"spec": {"n": 5}})
    assert finding.message == "n is 5"


def test_a_refused_update_points_at_the_field_in_the_revision() -> None:
    live_body = set_at(base_manifest("RayCluster", "c"), ("spec", "managedBy"),
                       "ray.io/kuberay-operator")
    text = dump(set_at(live_body, ("spec", "managedBy"), "kueue.x-k8s.io/multikueue"))
    files = (RepoFile("gitray.yaml", CONFIG.format(RELEASE).encode()),
             RepoFile("c.yaml", text.encode()))
    snapshot = Snapshot("worktree", "t", files)
    result = load_snapshot(snapshot)
    (workload,) = result.workloads
    live = LiveObject("RayCluster", "ray", "c", "7", live_body)
    (problem,), _ = transition_problems({workload.key: workload}, [live], packaged(RELEASE),
                                        snapshot)
    line = text.splitlines()[problem.location.line - 1]
    assert line[problem.location.col - 1:] == "managedBy: kueue.x-k8s.io/multikueue"
    assert problem.message.startswith("spec.managedBy: the managedBy field is immutable")
