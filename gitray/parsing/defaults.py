"""Structural-schema defaulting, as the Kubernetes API server does it for CRDs. Pure, no I/O.

The API server judges a custom resource after two steps, and gitray judges a manifest the same
way so that what Kubernetes accepts, gitray accepts:

1. ``null`` values of fields that are not nullable are dropped;
2. every absent field whose schema has a ``default`` gets a copy of that default, top-down, and
   the defaults of its own sub-fields are applied to it in turn.

Only then is the object validated, so a field that the CRD both requires and defaults (KubeRay's
``workerGroupSpecs[].minReplicas``/``maxReplicas``) may be left out.

The defaulted tree is used for validation only: gitray applies what Git says and lets the API
server default it, so hashes and diffs never depend on defaults.

The schemas are those of ``scripts/gen-schemas``: a CRD's ``nullable: true`` appears there as
``"null"`` in ``type``; defaults sit next to ``properties``, ``items`` and
``additionalProperties`` (structural schemas allow them nowhere else).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["with_defaults"]


def with_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """A copy of ``value`` with nulls pruned and defaults applied per ``schema``."""
    return _node(schema, copy.deepcopy(value))


def _nullable(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


def _node(schema: Mapping[str, Any], value: Any) -> Any:
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            _object(properties, value)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            known = properties if isinstance(properties, Mapping) else {}
            for key in [k for k in value if k not in known]:
                if value[key] is None and not _nullable(extra):
                    del value[key]
                else:
                    value[key] = _node(extra, value[key])
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [_node(items, item) for item in value]
    return value


def _object(properties: Mapping[str, Any], value: dict[str, Any]) -> None:
    for key, sub in properties.items():
        if not isinstance(sub, Mapping):
            continue
        if key in value and value[key] is None and not _nullable(sub):
            del value[key]  # the API server prunes it, then defaults it like an absent field
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            value[key] = _node(sub, value[key])
