"""A KubeRay CustomResourceDefinition -> a JSON Schema plus its CEL rules. Pure, no I/O.

Shared by ``scripts/gen-schemas`` (the packaged schemas of each KubeRay release) and by live
planning (the CRDs a cluster serves, read by ``gitray.k8s.crds``), so both judge manifests the
same way. From the CRD's ``v1`` version's ``openAPIV3Schema``:

- descriptions are dropped (the files stay small; the CRDs are the documentation);
- ``x-kubernetes-int-or-string`` becomes ``"type": ["integer", "string"]``;
- ``nullable: true`` adds ``"null"`` to the type;
- objects with declared properties reject unknown fields (``additionalProperties: false``), as
  ``kubectl apply`` with strict field validation does, unless
  ``x-kubernetes-preserve-unknown-fields`` keeps them; ``x-kubernetes-embedded-resource`` objects
  accept apiVersion/kind/metadata;
- ``x-kubernetes-list-type: set`` becomes ``uniqueItems``; other list/map-type markers go;
- CEL ``x-kubernetes-validations`` rules leave the JSON Schema (it cannot express them) and are
  kept beside it as :class:`CelRule` values with the path of the node they apply to
  (``*`` for every item of a list or value of a map), for ``gitray.parsing.cel``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EACH", "CelRule", "Translator", "crd_document", "rules_from_json", "rules_to_json"]

EACH = "*"  # a path segment: every item of a list / every value of a map
_DROPPED = (
    "description",
    "example",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
)


@dataclass(frozen=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry of a CRD, at the schema node ``path``."""

    path: tuple[str, ...]  # property names, EACH for list items / map values
    rule: str
    message: str = ""
    message_expression: str = ""
    reason: str = ""
    field_path: str = ""

    @property
    def transition(self) -> bool:
        """A transition rule: it reads ``oldSelf``, so it applies only on update."""
        return "oldSelf" in self.rule

    @property
    def text(self) -> str:
        """What to report when the rule fails: its message, else the rule itself."""
        return self.message or f"failed rule: {self.rule}"


def rules_to_json(rules: tuple[CelRule, ...]) -> list[dict[str, Any]]:
    out = []
    for r in rules:
        entry: dict[str, Any] = {"path": list(r.path), "rule": r.rule}
        for key, value in (("message", r.message), ("messageExpression", r.message_expression),
                           ("reason", r.reason), ("fieldPath", r.field_path)):
            if value:
                entry[key] = value
        out.append(entry)
    return out


def rules_from_json(data: list[Mapping[str, Any]]) -> tuple[CelRule, ...]:
    return tuple(CelRule(path=tuple(e["path"]), rule=e["rule"], message=e.get("message", ""),
                         message_expression=e.get("messageExpression", ""),
                         reason=e.get("reason", ""), field_path=e.get("fieldPath", ""))
                 for e in data)


class Translator:
    """Turns one CRD schema into a JSON Schema; collects the CEL rules on the way."""

    def __init__(self) -> None:
        self.rules: list[CelRule] = []

    @property
    def dropped_rules(self) -> int:
        return len(self.rules)

    def node(self, schema: Mapping[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for entry in schema.get("x-kubernetes-validations") or ():
            self.rules.append(CelRule(
                path=path, rule=str(entry["rule"]), message=str(entry.get("message", "")),
                message_expression=str(entry.get("messageExpression", "")),
                reason=str(entry.get("reason", "")), field_path=str(entry.get("fieldPath", ""))))
        for key, value in schema.items():
            if key in _DROPPED or key.startswith("x-kubernetes-"):
                continue
            if key == "properties":
                out[key] = {name: self.node(sub, (*path, name))
                            for name, sub in sorted(value.items())}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = self.node(value, (*path, EACH))
            elif key == "not" and isinstance(value, dict):
                out[key] = self.node(value, path)
            elif key in ("anyOf", "allOf", "oneOf"):
                out[key] = [self.node(sub, path) for sub in value]
            else:
                out[key] = value
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("anyOf", None)
            out["type"] = ["integer", "string"]
        if schema.get("x-kubernetes-list-type") == "set":
            out["uniqueItems"] = True
        if schema.get("x-kubernetes-embedded-resource"):
            props = out.setdefault("properties", {})
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props.setdefault("metadata", {"type": "object"})
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        if out.get("type") == "object" and "properties" in out and not preserve:
            out.setdefault("additionalProperties", False)
        if schema.get("nullable"):
            out.pop("nullable", None)
            kind = out.get("type")
            if isinstance(kind, str):
                out["type"] = [kind, "null"]
            elif isinstance(kind, list) and "null" not in kind:
                out["type"] = [*kind, "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        return out


def crd_document(crd: Mapping[str, Any], version: str, source: str
                 ) -> tuple[dict[str, Any], tuple[CelRule, ...]]:
    """The JSON Schema document of ``crd``'s ``v1`` version and its CEL rules.

    ``version`` is the KubeRay release (or ``"cluster"``), ``source`` says where the CRD came
    from (for the ``$comment``). Raises ``KeyError``/``TypeError`` for a CRD without a ``v1``
    ``openAPIV3Schema``.
    """
    kind = crd["spec"]["names"]["kind"]
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    translator = Translator()
    schema = translator.node(versions["v1"]["schema"]["openAPIV3Schema"])
    schema.setdefault("properties", {})
    schema["properties"]["apiVersion"] = {"const": "ray.io/v1"}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = ["apiVersion", "kind", "metadata"]
    document = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://gitray.io/schemas/kuberay-{version}/{kind.lower()}.schema.json",
        "title": f"KubeRay {kind} (ray.io/v1)",
        "$comment": (
            f"GENERATED by scripts/gen-schemas from {source}; do not edit. "
            f"{translator.dropped_rules} CEL validation rule(s) kept in cel-rules.json."
        ),
        "x-kuberay-version": version,
        **schema,
    }
    return document, tuple(translator.rules)
