"""JSON Schema checks with messages that name the offending field. Pure.

A compiled validator (jsonschema-rs) answers "valid?" first — about a thousand times faster
than walking the schema in Python, and nearly every manifest is valid; only an invalid one is
walked again by python-jsonschema, whose errors carry what the messages need (the failing
keyword, its schema, the alternatives of an anyOf). A unit test keeps the two in agreement.

The schemas are package data (``gitray/schemas/*.json``, the same files as ``schemas/`` at the
repository root); reading them is reading gitray itself, never the user's repository.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from gitray.parsing.text import JsonPath

__all__ = ["MAX_ERRORS_PER_DOCUMENT", "document_errors", "load_schema", "schema_errors"]

MAX_ERRORS_PER_DOCUMENT = 20


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The schema ``gitray/schemas/<name>`` (``name`` may hold a ``/``), parsed."""
    text = resources.files("gitray").joinpath("schemas", *name.split("/")).read_text(
        encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(load_schema(name))


@cache
def _compiled(name: str) -> Any:
    return jsonschema_rs.validator_for(load_schema(name))


def schema_errors(name: str, instance: Any) -> Iterator[tuple[JsonPath, str]]:
    """``(path, message)`` for each way ``instance`` breaks schema ``name``, at most a few."""
    if _compiled(name).is_valid(instance):
        return
    yield from _errors(_validator(name), instance)


# Schemas that are not package data (a cluster's CRDs): compiled once per key, a few kept.
_OTHER: dict[str, tuple[Any, Draft202012Validator]] = {}
_MAX_OTHER = 16


def document_errors(key: str, schema: Mapping[str, Any], instance: Any
                    ) -> Iterator[tuple[JsonPath, str]]:
    """Like :func:`schema_errors` for a schema given as a value; ``key`` names it uniquely
    (the same key must always mean the same schema)."""
    if key.startswith("package:"):
        yield from schema_errors(key.removeprefix("package:"), instance)
        return
    if key not in _OTHER:
        if len(_OTHER) >= _MAX_OTHER:
            _OTHER.pop(next(iter(_OTHER)))
        _OTHER[key] = (jsonschema_rs.validator_for(dict(schema)), Draft202012Validator(schema))
    compiled, validator = _OTHER[key]
    if compiled.is_valid(instance):
        return
    yield from _errors(validator, instance)


def _errors(validator: Draft202012Validator, instance: Any) -> Iterator[tuple[JsonPath, str]]:
    count = 0
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.path)))
    for error in errors:
        for path, message in _explain(error):
            yield path, message
            count += 1
            if count >= MAX_ERRORS_PER_DOCUMENT:
                return


def _explain(error: SchemaError) -> Iterator[tuple[JsonPath, str]]:
    path: JsonPath = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extras = sorted(k for k in error.instance if k not in known)
        for key in extras:
            hint = _closest(key, list(known))
            suffix = f" (did you mean {hint!r}?)" if hint else ""
            yield (*path, key), f"unknown field {key!r}{suffix}"
        return
    description = error.schema.get("description") if isinstance(error.schema, dict) else None
    if error.validator in ("oneOf", "anyOf", "pattern") and description:
        yield path, f"{_short(error.instance)} is not valid: {description}"
        return
    if error.validator in ("oneOf", "anyOf") and error.context:
        best = min(error.context, key=lambda e: (len(e.absolute_path), str(e.message)))
        yield path, _short_message(best.message)
        return
    yield path, _short_message(error.message)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short_message(message: str) -> str:
    return message if len(message) <= 200 else message[:197] + "..."


def _closest(key: str, known: list[str]) -> str | None:
    lowered = key.lower()
    for candidate in known:
        if candidate.lower() == lowered:
            return candidate
    best: tuple[int, str] | None = None
    for candidate in known:
        distance = _distance(lowered, candidate.lower())
        if distance <= 2 and (best is None or distance < best[0]):
            best = (distance, candidate)
    return best[1] if best else None


def _distance(a: str, b: str) -> int:
    if abs(len(a) - len(b)) > 2 or len(a) > 64 or len(b) > 64:
        return 99
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
