"""Which object a manifest is: its kind and (namespace, name, wave), checked. Pure, no I/O.

- Ray kinds must use ``ray.io/v1``; other kinds must be listed in ``supportingKinds`` and be
  namespaced; anything else is an error that says how to fix it.
- Names: Ray workloads are DNS-1035 labels of at most ``MAX_RAY_NAME`` characters (gitray derives
  longer names from them); other objects are DNS-1123 subdomains.
- The namespace (explicit, or ``defaultNamespace``) must match ``allowedNamespaces``.
- Labels and annotations are string maps; ``gitray.io/wave`` is an integer string;
  ``gitray.io/prune`` is ``disabled`` (or ``enabled``, the default).
"""

from __future__ import annotations

import re
from typing import Any

from gitray.core.config import CLUSTER_SCOPED_KINDS, Config
from gitray.core.model import (
    ANN_PRUNE,
    ANN_WAVE,
    API_VERSION_RAY,
    PRUNE_DISABLED,
    Diagnostic,
    Kind,
)
from gitray.parsing.text import JsonPath
from gitray.parsing.yamlsafe import YamlDocument
from gitray.plans.rules import DNS1035_LABEL, DNS1123_LABEL, DNS1123_SUBDOMAIN, MAX_RAY_NAME

__all__ = ["KNOWN_API_VERSIONS", "check_identity", "check_kind"]

_RAY_KINDS = frozenset(k.value for k in Kind)
# apiVersions of common namespaced kinds, to catch typos; other kinds are taken as written
KNOWN_API_VERSIONS = {
    "ConfigMap": "v1",
    "Secret": "v1",
    "ServiceAccount": "v1",
    "PersistentVolumeClaim": "v1",
    "Service": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
}
_WAVE = re.compile(r"^[-+]?[0-9]{1,6}$")


def check_kind(document: YamlDocument, config: Config, diagnostics: list[Diagnostic]) -> str | None:
    value = document.value
    kind, api_version = value.get("kind"), value.get("apiVersion")
    problems = len(diagnostics)
    if not isinstance(kind, str) or not kind:
        where = document.locate(("kind",)) if "kind" in value else document.start
        diagnostics.append(Diagnostic(where, "missing kind (a string such as RayService)"))
    if not isinstance(api_version, str) or not api_version:
        where = document.locate(("apiVersion",)) if "apiVersion" in value else document.start
        diagnostics.append(Diagnostic(where, "missing apiVersion (a string such as ray.io/v1)"))
    if len(diagnostics) > problems:
        return None
    assert isinstance(kind, str)
    if kind in _RAY_KINDS:
        if api_version != API_VERSION_RAY:
            diagnostics.append(
                Diagnostic(
                    document.locate(("apiVersion",)),
                    f"{kind} must use apiVersion {API_VERSION_RAY}, not {api_version!r}",
                )
            )
            return None
        return kind
    if kind in config.supporting_kinds:
        expected = KNOWN_API_VERSIONS.get(kind)
        if expected is not None and api_version != expected:
            diagnostics.append(
                Diagnostic(
                    document.locate(("apiVersion",)),
                    f"{kind} must use apiVersion {expected}, not {api_version!r}",
                )
            )
            return None
        return kind
    if kind in CLUSTER_SCOPED_KINDS:
        message = (
            f"{kind} is cluster-scoped; gitray only applies namespaced objects: create it "
            "outside gitray or exclude this file in gitray.yaml"
        )
    else:
        listed = ", ".join(config.supporting_kinds) or "none"
        message = (
            f"kind {kind} is not managed by gitray: expected RayCluster, RayJob, RayService, "
            f"RayCronJob or a supporting kind ({listed}); add it to supportingKinds in "
            "gitray.yaml or exclude this file"
        )
    diagnostics.append(Diagnostic(document.locate(("kind",)), message))
    return None


def check_identity(
    document: YamlDocument, kind: str, config: Config, diagnostics: list[Diagnostic]
) -> tuple[str, str, int] | None:
    """(namespace, name, wave) of a manifest, or None after reporting why not."""
    meta = document.value.get("metadata")
    if not isinstance(meta, dict):
        where = document.locate(("metadata",)) if "metadata" in document.value else document.start
        diagnostics.append(Diagnostic(where, "missing metadata (a mapping with a name)"))
        return None
    before = len(diagnostics)
    if "generateName" in meta and "name" not in meta:
        diagnostics.append(_generate_name(document, meta["generateName"]))
        return None
    name = _name(document, kind, meta, diagnostics)
    namespace = _namespace(document, meta, config, diagnostics)
    _string_map(document, meta, "labels", diagnostics)
    _string_map(document, meta, "annotations", diagnostics)
    wave = _wave(document, meta, diagnostics)
    _prune(document, meta, diagnostics)
    if "generateName" in meta:
        diagnostics.append(_generate_name(document, meta["generateName"]))
    if len(diagnostics) > before or name is None or namespace is None:
        return None
    return namespace, name, wave


def _generate_name(document: YamlDocument, prefix: object) -> Diagnostic:
    """generateName makes a new object on every apply: GitOps cannot find it again."""
    stem = str(prefix).rstrip("-") if isinstance(prefix, str) and prefix.strip("-") else ""
    suggestion = stem or "<a fixed name>"
    return Diagnostic(
        document.locate(("metadata", "generateName")),
        "metadata.generateName is not supported: GitOps needs a stable name to find the "
        f"object again on the next sync; write 'metadata.name: {suggestion}' instead",
    )


def _name(
    document: YamlDocument, kind: str, meta: dict[str, Any], diagnostics: list[Diagnostic]
) -> str | None:
    name = meta.get("name")
    # located only when reported: positions cost a second reading of the file
    where: JsonPath = ("metadata", "name") if "name" in meta else ("metadata",)
    if not isinstance(name, str) or not name:
        diagnostics.append(Diagnostic(document.locate(where), "missing metadata.name"))
        return None
    if kind in _RAY_KINDS:
        if len(name) > MAX_RAY_NAME:
            diagnostics.append(
                Diagnostic(
                    document.locate(where),
                    f"{kind} name {name!r} is {len(name)} characters; gitray allows at most "
                    f"{MAX_RAY_NAME} so the names it derives (<name>-<hash>-serve-svc) fit "
                    "Kubernetes' 63",
                )
            )
            return None
        if not DNS1035_LABEL.match(name):
            diagnostics.append(
                Diagnostic(
                    document.locate(where),
                    f"metadata.name {name!r} is not a valid {kind} name: lowercase letters, "
                    "digits and '-', starting with a letter (DNS-1035 label)",
                )
            )
            return None
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        diagnostics.append(
            Diagnostic(
                document.locate(where),
                f"metadata.name {name!r} is not a valid name: lowercase letters, digits, '-' "
                "and '.', at most 253 characters (DNS-1123 subdomain)",
            )
        )
        return None
    return name


def _namespace(
    document: YamlDocument, meta: dict[str, Any], config: Config, diagnostics: list[Diagnostic]
) -> str | None:
    if "namespace" in meta:
        namespace = meta["namespace"]
        where: JsonPath = ("metadata", "namespace")
        if not isinstance(namespace, str) or not DNS1123_LABEL.match(namespace) or len(
            namespace
        ) > 63:
            diagnostics.append(
                Diagnostic(
                    document.locate(where),
                    f"metadata.namespace {namespace!r} is not a valid namespace name: "
                    "lowercase letters, digits and '-', at most 63 characters",
                )
            )
            return None
        origin = ""
    else:
        namespace = config.default_namespace
        where = ("metadata",)
        origin = " (from defaultNamespace)"
    if not config.allows(namespace):
        allowed = ", ".join(config.allowed_namespaces)
        diagnostics.append(
            Diagnostic(
                document.locate(where),
                f"namespace {namespace!r}{origin} is not in allowedNamespaces ({allowed}) of "
                "gitray.yaml",
            )
        )
        return None
    return str(namespace)


def _string_map(
    document: YamlDocument, meta: dict[str, Any], field: str, diagnostics: list[Diagnostic]
) -> None:
    values = meta.get(field)
    if values is None:
        return
    if not isinstance(values, dict):
        diagnostics.append(
            Diagnostic(document.locate(("metadata", field)), f"metadata.{field} must be a mapping")
        )
        return
    for key, value in values.items():
        if not isinstance(value, str):
            diagnostics.append(
                Diagnostic(
                    document.locate(("metadata", field, key)),
                    f"metadata.{field}.{key} must be a string; quote the value",
                )
            )


def _wave(document: YamlDocument, meta: dict[str, Any], diagnostics: list[Diagnostic]) -> int:
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or ANN_WAVE not in annotations:
        return 0
    text = annotations[ANN_WAVE]
    if isinstance(text, str) and _WAVE.match(text.strip()):
        return int(text.strip())
    if isinstance(text, str):  # a non-string value was reported by _string_map
        diagnostics.append(
            Diagnostic(
                document.locate(("metadata", "annotations", ANN_WAVE)),
                f"annotation {ANN_WAVE} must be an integer such as \"1\" or \"-2\", "
                f"not {text!r}",
            )
        )
    return 0


def _prune(document: YamlDocument, meta: dict[str, Any], diagnostics: list[Diagnostic]) -> None:
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or ANN_PRUNE not in annotations:
        return
    text = annotations[ANN_PRUNE]
    if isinstance(text, str) and text not in (PRUNE_DISABLED, "enabled"):
        diagnostics.append(
            Diagnostic(
                document.locate(("metadata", "annotations", ANN_PRUNE)),
                f"annotation {ANN_PRUNE} must be \"{PRUNE_DISABLED}\" (keep the workload when it "
                f"leaves Git) or \"enabled\", not {text!r}",
            )
        )
