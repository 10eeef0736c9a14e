"""scripts/gen-schemas and gitray.parsing.crdschema: Kubernetes schema extensions to JSON Schema
(CEL rules kept aside with their paths), and the committed output of both KubeRay releases."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gitray.parsing.crdschema import EACH, CelRule, Translator
from gitray.parsing.kuberay import DEFAULT_KUBERAY_VERSION, KUBERAY_VERSIONS, packaged

ROOT = Path(__file__).resolve().parents[3]


def load_script() -> ModuleType:
    path = ROOT / "scripts" / "gen-schemas"
    loader = importlib.machinery.SourceFileLoader("gen_schemas", str(path))
    spec = importlib.util.spec_from_loader("gen_schemas", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


GEN = load_script()


@pytest.mark.parametrize(
    ("crd", "expected"),
    [
        pytest.param(
            {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}],
             "pattern": "^[0-9]+m?$"},
            {"type": ["integer", "string"], "pattern": "^[0-9]+m?$"},
            id="int-or-string becomes a type list",
        ),
        pytest.param(
            {"type": "object", "description": "long text", "properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"a": {"type": "string"}},
             "additionalProperties": False},
            id="descriptions go and unknown fields are refused",
        ),
        pytest.param(
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
             "properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"a": {"type": "string"}}},
            id="preserve-unknown-fields keeps unknown fields",
        ),
        pytest.param(
            {"type": "object"}, {"type": "object"}, id="an object without properties is free-form",
        ),
        pytest.param(
            {"type": "string", "nullable": True, "enum": ["A", "B"]},
            {"type": ["string", "null"], "enum": ["A", "B", None]},
            id="nullable admits null",
        ),
        pytest.param(
            {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            id="a set list has unique items",
        ),
        pytest.param(
            {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["n"],
             "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
            {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}},
                                        "additionalProperties": False}},
            id="list-map markers are dropped",
        ),
        pytest.param(
            {"type": "object", "x-kubernetes-embedded-resource": True,
             "properties": {"spec": {"type": "object"}}},
            {"type": "object", "properties": {
                "spec": {"type": "object"}, "apiVersion": {"type": "string"},
                "kind": {"type": "string"}, "metadata": {"type": "object"}},
             "additionalProperties": False},
            id="an embedded resource accepts apiVersion kind metadata",
        ),
        pytest.param(
            {"type": "integer", "default": 2147483647, "format": "int32"},
            {"type": "integer", "default": 2147483647, "format": "int32"},
            id="defaults are kept for structural defaulting",
        ),
        pytest.param(
            {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]},
            {"type": "string"},
            id="CEL rules leave the schema",
        ),
    ],
)
def test_translation(crd: dict[str, Any], expected: dict[str, Any]) -> None:
    assert Translator().node(crd) == expected


def test_cel_rules_are_kept_with_the_path_they_apply_to() -> None:
    translator = Translator()
    translator.node({"type": "object", "properties": {
        "a": {"type": "string", "x-kubernetes-validations": [
            {"rule": "x", "message": "m"}, {"rule": "self == oldSelf"}]},
        "b": {"type": "array", "items": {"type": "object", "x-kubernetes-validations": [
            {"rule": "has(self.c)", "messageExpression": "'no c'"}]}}}})
    assert translator.dropped_rules == 3
    assert translator.rules == [
        CelRule(("a",), "x", message="m"), CelRule(("a",), "self == oldSelf"),
        CelRule(("b", EACH), "has(self.c)", message_expression="'no c'")]
    assert [r.transition for r in translator.rules] == [False, True, False]


def test_the_generator_uses_gitrays_conversion() -> None:
    assert not hasattr(GEN, "Translator")  # one conversion, shared with live planning
    assert sorted(GEN.RELEASES) == sorted(KUBERAY_VERSIONS)
    assert GEN.KUBERAY_VERSION == DEFAULT_KUBERAY_VERSION == "v1.7.0"


def test_the_v170_rayjob_crd_gives_the_committed_files() -> None:
    """The v1.7.0 source beside the repository (../shared/kuberay-v1.7.0) is an input."""
    bases = GEN.KUBERAY_FOLDER / GEN.CRD_BASES
    assert bases.is_dir(), f"the KubeRay v1.7.0 source is needed: {bases}"
    text, rules, kind = GEN.generate(bases / "ray.io_rayjobs.yaml", "v1.7.0",
                                     "KubeRay v1.7.0 source, ray-operator/config/crd/bases")
    folder = ROOT / "schemas" / "kuberay-v1.7.0"
    assert text == (folder / "rayjob.schema.json").read_text()
    assert rules == json.loads((folder / "cel-rules.json").read_text())[kind]


@pytest.mark.parametrize("release", KUBERAY_VERSIONS)
def test_each_release_keeps_its_cel_rules(release: str) -> None:
    rules = packaged(release).rules
    assert all(rules[kind] for kind in rules), "every KubeRay kind has CEL rules"
    messages = {r.message for kind in rules for r in rules[kind]}
    assert "the managedBy field is immutable" in messages
    counts = {kind: len(found) for kind, found in rules.items()}
    assert sum(counts.values()) == {"v1.6.2": 22, "v1.7.0": 26}[release], counts


@pytest.mark.parametrize("release", KUBERAY_VERSIONS)
@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService", "RayCronJob"])
def test_committed_schemas_are_generated_from_each_release(kind: str, release: str) -> None:
    schema = json.loads((ROOT / "schemas" / f"kuberay-{release}" / f"{kind.lower()}.schema.json")
                        .read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["x-kuberay-version"] == release
    assert schema["$comment"].startswith("GENERATED by scripts/gen-schemas")
    assert schema["properties"]["kind"] == {"const": kind}
    assert schema["properties"]["apiVersion"] == {"const": "ray.io/v1"}
    assert '"description"' not in json.dumps(schema["properties"]["spec"])


def test_the_root_schemas_directory_is_the_package_one() -> None:
    assert (ROOT / "schemas").is_symlink()
    assert (ROOT / "schemas").resolve() == (ROOT / "gitray" / "schemas").resolve()
