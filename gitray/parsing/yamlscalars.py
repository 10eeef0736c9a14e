"""YAML scalars to JSON values under the YAML 1.2 core schema, and tag checks. Pure, no I/O.

Plain scalars resolve to null, booleans, integers (decimal, ``0o`` octal, ``0x`` hex) and floats
by the core schema's patterns; quoted and block scalars are strings. Of the explicit tags, only
the core ones are accepted; ``.inf``/``.nan`` and huge integers are refused because they have no
JSON form.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["CORE", "resolve_scalar", "short_tag", "tag_text", "unsupported_tag"]

CORE = "tag:yaml.org,2002:"
_NULL = re.compile(r"^(|~|null|Null|NULL)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT10 = re.compile(r"^[-+]?[0-9]+$")
_INT8 = re.compile(r"^0o[0-7]+$")
_INT16 = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^[-+]?\.(inf|Inf|INF)$")
_NAN = re.compile(r"^\.(nan|NaN|NAN)$")
_MAX_INT_DIGITS = 64
_STRING_TAGS = {CORE + "str", CORE + "timestamp", CORE + "binary"}
_TYPED = {"int": int, "float": float, "bool": bool, "null": type(None)}
# the first characters of the null, boolean and number patterns above: most plain scalars
# (names, paths, images) start otherwise and are strings without trying each pattern
_TYPED_START = frozenset("0123456789+-.~nNtTfF\n")  # "\n": `$` also matches before a final "\n"


def tag_text(tag: object) -> str | None:
    """A parser event's tag as text (ruamel may hand a Tag object or a str)."""
    value = getattr(tag, "value", tag)
    return None if value is None else str(value)


def short_tag(tag: str) -> str:
    return "!!" + tag[len(CORE) :] if tag.startswith(CORE) else tag


def unsupported_tag(tag: str) -> str:
    return (
        f"unsupported YAML tag {short_tag(tag)}: manifests are plain YAML "
        "(strings, numbers, booleans, null, mappings, lists)"
    )


def resolve_scalar(text: str, tag: str | None, plain: bool) -> tuple[Any, str | None]:
    """``(value, problem)``: the JSON value of a scalar, or None and why it has none."""
    if tag in (None, "!"):
        return _implicit(text) if plain and tag is None else (text, None)
    if tag in _STRING_TAGS:
        return text, None
    name = tag[len(CORE) :] if tag.startswith(CORE) else ""
    wanted = _TYPED.get(name)
    if wanted is None:
        return None, unsupported_tag(tag)
    value, problem = _implicit(text)
    if problem:
        return None, problem
    if wanted is float and type(value) is int:
        return float(value), None
    if type(value) is wanted:
        return value, None
    return None, f"{text!r} is not a valid {name}"


def _implicit(text: str) -> tuple[Any, str | None]:
    if text and text[0] not in _TYPED_START:
        return text, None
    if _NULL.match(text):
        return None, None
    if text in _BOOL:
        return _BOOL[text], None
    if _INT10.match(text) or _INT8.match(text) or _INT16.match(text):
        if len(text) > _MAX_INT_DIGITS:
            return text, "number too large; quote it"
        if _INT8.match(text):
            return int(text[2:], 8), None
        return (int(text, 16) if _INT16.match(text) else int(text)), None
    if _FLOAT.match(text) or _INF.match(text) or _NAN.match(text):
        number = float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
        if math.isinf(number) or math.isnan(number):
            return text, f"{text} is not a valid JSON number; quote it"
        return number, None
    return text, None
