"""Manifests judged as the API server judges them: CRD defaults first, stable names, and every
RayService spec field honoured or refused by name."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gitray.core.snapshot import RepoFile, Snapshot
from gitray.parsing.defaults import with_defaults
from gitray.parsing.kuberay import KUBERAY_VERSIONS
from gitray.plans.load import LoadResult, load_snapshot
from gitray.plans.rayservice.fields import HANDLED, REFUSED

ROOT = Path(__file__).resolve().parents[3]

CLUSTER = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: batch
  namespace: ray
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
          - name: ray-head
            image: rayproject/ray:2.60.0
  workerGroupSpecs:
    - groupName: small
      replicas: 1
      rayStartParams: {}
      template:
        spec:
          containers:
            - name: ray-worker
              image: rayproject/ray:2.60.0
"""

SERVICE = """\
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: text
  namespace: ray
spec:
  serveConfigV2: |
    applications:
      - name: greeter
        import_path: apps.greeter:app
  rayClusterConfig:
    headGroupSpec:
      rayStartParams: {}
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray:2.60.0
"""


def load(text: str, name: str = "m.yaml") -> LoadResult:
    return load_snapshot(Snapshot("worktree", "test", (RepoFile(name, text.encode()),)))


def messages(result: LoadResult) -> list[str]:
    return [str(d) for d in result.diagnostics]


# --- structural defaults --------------------------------------------------------------------


def test_fields_the_crd_requires_and_defaults_may_be_left_out() -> None:
    # workerGroupSpecs[].minReplicas / maxReplicas are required *and* defaulted by the CRD
    result = load(CLUSTER)
    assert messages(result) == []
    group = result.workloads[0].manifest["spec"]["workerGroupSpecs"][0]
    assert "minReplicas" not in group and "maxReplicas" not in group, \
        "defaults are for judging only; gitray applies what Git says"


def test_a_required_field_without_a_default_is_still_required() -> None:
    text = CLUSTER.replace("    - groupName: small\n", "    - rayStartParams: {}\n", 1)
    text = text.replace("      rayStartParams: {}\n      template:", "      template:", 1)
    assert any(m.startswith("m.yaml:15:7: spec.workerGroupSpecs[0]: 'groupName' is a "
                            "required property") for m in messages(load(text))), \
        messages(load(text))


def test_a_null_non_nullable_field_is_pruned_then_defaulted() -> None:
    text = CLUSTER.replace("      replicas: 1\n", "      replicas: 1\n      maxReplicas: null\n")
    assert messages(load(text)) == []


def test_a_wrong_type_is_still_reported_at_its_line() -> None:
    text = CLUSTER.replace("      replicas: 1\n", "      replicas: 1\n      maxReplicas: many\n")
    assert messages(load(text)) == [
        "m.yaml:17:7: spec.workerGroupSpecs[0].maxReplicas: 'many' is not of type 'integer'"]


DEFAULT_CASES: dict[str, tuple[dict[str, Any], Any, Any]] = {
    "an absent field gets its default": (
        {"type": "object", "properties": {"a": {"type": "integer", "default": 3}}},
        {}, {"a": 3}),
    "a present field keeps its value": (
        {"type": "object", "properties": {"a": {"type": "integer", "default": 3}}},
        {"a": 5}, {"a": 5}),
    "a defaulted object gets its own fields' defaults": (
        {"type": "object", "properties": {"o": {
            "type": "object", "default": {},
            "properties": {"b": {"type": "string", "default": "x"}}}}},
        {}, {"o": {"b": "x"}}),
    "defaults apply to every list item": (
        {"type": "array", "items": {"type": "object", "properties": {
            "n": {"type": "integer", "default": 0}}}},
        [{}, {"n": 2}], [{"n": 0}, {"n": 2}]),
    "defaults apply to map values": (
        {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "n": {"type": "integer", "default": 1}}}},
        {"k": {}}, {"k": {"n": 1}}),
    "null of a non-nullable field without default is pruned": (
        {"type": "object", "properties": {"a": {"type": "string"}}},
        {"a": None}, {}),
    "null of a nullable field stays": (
        {"type": "object", "properties": {"a": {"type": ["string", "null"], "default": "d"}}},
        {"a": None}, {"a": None}),
}


@pytest.mark.parametrize("case", DEFAULT_CASES)
def test_structural_defaulting(case: str) -> None:
    schema, value, expected = DEFAULT_CASES[case]
    before = json.dumps(value)
    assert with_defaults(schema, value) == expected
    assert json.dumps(value) == before, "the input is never changed"


# --- generateName ---------------------------------------------------------------------------


def test_generate_name_gets_one_line_saying_what_to_write() -> None:
    text = CLUSTER.replace("  name: batch\n", "  generateName: batch-\n")
    assert messages(load(text)) == [
        "m.yaml:4:3: metadata.generateName is not supported: GitOps needs a stable name to "
        "find the object again on the next sync; write 'metadata.name: batch' instead"]


def test_generate_name_next_to_a_name_is_refused_too() -> None:
    text = CLUSTER.replace("  name: batch\n", "  name: batch\n  generateName: b-\n")
    assert messages(load(text)) == [
        "m.yaml:5:3: metadata.generateName is not supported: GitOps needs a stable name to "
        "find the object again on the next sync; write 'metadata.name: b' instead"]


# --- RayService spec fields -----------------------------------------------------------------


@pytest.mark.parametrize("release", KUBERAY_VERSIONS)
def test_every_rayservice_spec_field_is_handled_or_refused(release: str) -> None:
    schema = json.loads((ROOT / "schemas" / f"kuberay-{release}" / "rayservice.schema.json")
                        .read_text())
    fields = set(schema["properties"]["spec"]["properties"])
    assert fields, "the RayService schema has no spec fields?"
    assert not set(HANDLED) & set(REFUSED)
    unknown = sorted(fields - set(HANDLED) - set(REFUSED))
    assert not unknown, f"RayService spec fields neither handled nor refused: {unknown}"
    stale = sorted(set(HANDLED) - fields)
    assert not stale, f"HANDLED names fields the CRD does not have: {stale}"


def spec_with(extra: str) -> str:
    return SERVICE + textwrap.indent(textwrap.dedent(extra), "  ")


REFUSAL_CASES = {
    "an incremental upgrade that would never move traffic is refused": (
        """\
        upgradeStrategy:
          type: NewClusterWithIncrementalUpgrade
          clusterUpgradeOptions:
            gatewayClassName: istio
            intervalSeconds: 30
            stepSizePercent: 0
        """,
        "m.yaml:24:7: spec.upgradeStrategy.clusterUpgradeOptions.stepSizePercent 0 must be "
        "between 1 and 100"),
    "an unknown upgrade type is named": (
        "upgradeStrategy: {type: Rolling}\n",
        "m.yaml:19:21: spec.upgradeStrategy.type 'Rolling' is not an upgrade type"),
    "cluster upgrade options without the incremental upgrade": (
        """\
        upgradeStrategy:
          clusterUpgradeOptions: {gatewayClassName: istio, intervalSeconds: 3,
                                  stepSizePercent: 5}
        """,
        "m.yaml:20:5: spec.upgradeStrategy.clusterUpgradeOptions only applies to "
        "NewClusterWithIncrementalUpgrade; set that type or remove the options"),
    "excluding the head pod from a serve Service of a cluster without workers": (
        "excludeHeadPodFromServeSvc: true\n",
        "m.yaml:19:3: spec.excludeHeadPodFromServeSvc: true leaves the serve Service without "
        "any pod"),
    "suspend (KubeRay v1.7) is refused by name, not as an unknown field": (
        "suspend: true\n",
        "m.yaml:19:3: spec.suspend is not supported: suspending a RayService"),
}


@pytest.mark.parametrize("case", REFUSAL_CASES)
def test_a_field_gitray_does_not_honour_is_refused_by_name(case: str) -> None:
    extra, expected = REFUSAL_CASES[case]
    found = messages(load(spec_with(extra)))
    assert len(found) == 1 and found[0].startswith(expected), found


@pytest.mark.parametrize(("field", "expected"), [
    ("managedBy: kueue.x-k8s.io/multikueue", "m.yaml:12:5: spec.rayClusterConfig.managedBy "
     "'kueue.x-k8s.io/multikueue' is not supported"),
], ids=["managed by MultiKueue"])
def test_a_rayservice_cluster_that_would_never_be_ready_is_refused(field: str,
                                                                    expected: str) -> None:
    text = SERVICE.replace("  rayClusterConfig:\n", f"  rayClusterConfig:\n    {field}\n")
    found = messages(load(text))
    assert len(found) == 1 and found[0].startswith(expected), found


@pytest.mark.parametrize("extra", [
    "upgradeStrategy: {type: NewCluster}\n",
    "upgradeStrategy: {type: None}\n",
    "excludeHeadPodFromServeSvc: false\n",
    "managedBy: ray.io/kuberay-operator\n",
    "managedBy: kueue.x-k8s.io/multikueue\n",
    "rayClusterDeletionDelaySeconds: 5\n",
    "serviceUnhealthySecondThreshold: 900\ndeploymentUnhealthySecondThreshold: 300\n",
], ids=["NewCluster", "None (judged at plan time)", "head in serve svc", "kuberay manager",
        "another manager (left alone at plan time)", "deletion delay", "deprecated"])
def test_fields_gitray_honours_are_accepted(extra: str) -> None:
    assert messages(load(spec_with(extra))) == []
