"""`gitray plan --against REV` on a real Git repository: the plan the whole materialized base
gives (the CLI plans it namespace by namespace, the base kept compressed), and which
revision's problems are said when one of them is invalid."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitray.cli.app import main
from gitray.core.snapshot import snapshot_revision
from gitray.git.source import read_snapshot
from gitray.plans.load import load_snapshot
from gitray.plans.materialize import materialize
from gitray.plans.plan import plan_to_json
from gitray.plans.planner import compute_plan

EXAMPLES = Path(__file__).parents[3] / "examples-repo"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def two_revisions(tmp_path: Path, base_bad: bool = False, head_bad: bool = False) -> Path:
    """examples-repo committed, then changed: a new image, a new script, a workload removed."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo, ignore=shutil.ignore_patterns(".git"))
    git(repo, "init", "-q")
    if base_bad:
        (repo / "broken.yaml").write_text("apiVersion: ray.io/v1\nkind: RayCluster\n"
                                          "metadata: {name: base-broken}\nspec: 3\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    (repo / "broken.yaml").unlink(missing_ok=True)
    service = repo / "ray-serve" / "rayservice.yaml"
    service.write_text(service.read_text().replace("ray:2.60.0", "ray:2.60.1"))
    for path in repo.rglob("*.yaml"):
        if "pi is about" in path.read_text():
            path.write_text(path.read_text().replace("pi is about", "pi is roughly"))
    removed = next(p for p in sorted(repo.rglob("*.yaml")) if "kind: RayCluster\n" in
                   p.read_text() and p != service)
    removed.unlink()
    if head_bad:
        (repo / "bad.yaml").write_text("apiVersion: ray.io/v1\nkind: RayService\n"
                                       "metadata: {name: head-broken}\nspec: [1]\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "head")
    return repo


def test_the_plan_is_the_one_against_the_whole_materialized_base(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    repo = two_revisions(tmp_path)
    assert main(["plan", "--repo", str(repo), "--against", "HEAD~1", "--format", "json",
                 "--out", str(tmp_path / "saved.json")]) == 0
    shown = json.loads(capsys.readouterr().out)
    base = load_snapshot(read_snapshot(str(repo), "HEAD~1"))
    head_snapshot = read_snapshot(str(repo), None)
    head = load_snapshot(head_snapshot)
    expected = plan_to_json(compute_plan(
        head.workloads, materialize(base.workloads, base.config), head.config,
        revision=snapshot_revision(head_snapshot), against=shown["against"], now=datetime.now(UTC),
        exact=True, label=head_snapshot.label))
    assert shown["against"] == f"revision:{git(repo, 'rev-parse', 'HEAD~1')}"
    assert shown == expected
    assert json.loads((tmp_path / "saved.json").read_text()) == expected
    actions = sorted(w["action"] for w in shown["workloads"])
    assert "delete" in actions and actions.count("no-op") < len(actions) - 2, actions


@pytest.mark.parametrize("base_bad,head_bad", [(True, False), (False, True), (True, True)])
def test_an_invalid_revision_is_named_and_nothing_is_planned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        base_bad: bool, head_bad: bool) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    repo = two_revisions(tmp_path, base_bad=base_bad, head_bad=head_bad)
    code = main(["plan", "--repo", str(repo), "--against", "HEAD~1"])
    out = capsys.readouterr()
    assert code != 0 and out.out == ""
    lines = out.err.strip().splitlines()
    assert "Traceback" not in out.err
    if head_bad:  # the revision under review speaks first, alone
        assert lines[0].startswith("bad.yaml:"), out.err
        assert "broken.yaml" not in out.err
    else:  # the base is named as the revision to plan against, then its problem
        said = lines.index("gitray: HEAD~1, the revision to plan against, is invalid:")
        assert lines[said + 1].startswith("broken.yaml:4:1: "), out.err
