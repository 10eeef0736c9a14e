"""The CRDs' CEL validation rules (``x-kubernetes-validations``), evaluated on a manifest.
Pure, no I/O.

The rules come beside the generated schemas (``gitray.parsing.crdschema.CelRule``: the rule,
its message and the schema path it sits on); the evaluator is ``cel-python`` (``celpy``). As
the API server does, a rule runs once for each value at its path that the manifest sets, with
``self`` bound to that value; a rule that fails is reported with its own ``message``.

Transition rules (those reading ``oldSelf``) apply only on update, and only where the old
object has a value at the same path: :func:`rule_findings` runs them when given ``old`` (the
live object) and skips them otherwise. A value under a list has no old counterpart here
(KubeRay's transition rules sit on plain fields), so those are skipped too, as the API server
does for lists it cannot correlate.

A rule gitray cannot evaluate (a function celpy lacks, such as the Kubernetes library
extensions, or a rule it cannot parse) is a finding with ``evaluated=False``: the caller warns
about it; it is never taken as passed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from gitray.parsing.crdschema import EACH, CelRule
from gitray.parsing.text import JsonPath

__all__ = ["RuleFinding", "rule_findings"]


@dataclass(frozen=True)
class RuleFinding:
    path: JsonPath  # where the rule applied (the value it judged)
    rule: CelRule
    message: str  # the rule's message; or why it could not be evaluated
    evaluated: bool = True  # False: gitray could not evaluate the rule (a warning, not a pass)


class _Unevaluable(Exception):
    pass


_ENV = celpy.Environment()


@lru_cache(maxsize=256)
def _program(expression: str) -> celpy.Runner:
    try:
        return _ENV.program(_ENV.compile(expression))
    except CELParseError as e:
        raise _Unevaluable(f"cannot parse it: {str(e).splitlines()[0]}") from e


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    """The value of ``expression``; ``_Unevaluable`` when celpy cannot compute it; a
    ``KeyError`` for a field the data lacks (an error the API server reports too)."""
    program = _program(expression)
    result: Any
    try:
        result = program.evaluate(activation)
    except CELEvalError as e:
        result = e
    if isinstance(result, CELEvalError):
        kind = result.args[1] if len(result.args) > 1 else None
        text = str(result.args[0]) if result.args else str(result)
        if kind is KeyError and "undeclared reference" not in text:
            raise KeyError(text)
        raise _Unevaluable(text.split(" (in activation")[0][:200])
    return result


def _at(value: Any, path: Sequence[str], where: JsonPath = ()) -> Iterator[tuple[JsonPath, Any]]:
    """Each value of ``value`` at schema path ``path`` (EACH: every list item / map value)."""
    if not path:
        yield where, value
        return
    head, rest = path[0], path[1:]
    if head == EACH:
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _at(item, rest, (*where, i))
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from _at(item, rest, (*where, str(key)))
    elif isinstance(value, dict) and head in value and value[head] is not None:
        yield from _at(value[head], rest, (*where, head))


def _old_value(old: Any, path: JsonPath) -> tuple[bool, Any]:
    """(found, value) of the old object at a concrete path; list items do not correlate."""
    for part in path:
        if isinstance(part, int) or not isinstance(old, dict) or old.get(part) is None:
            return False, None
        old = old[part]
    return True, old


def _message(rule: CelRule, activation: dict[str, Any]) -> str:
    if rule.message_expression:
        try:
            value = _evaluate(rule.message_expression, activation)
            if isinstance(value, str) and value.strip():
                return str(value)
        except (_Unevaluable, KeyError):
            pass  # the API server falls back to the message too
    return rule.text


def rule_findings(rules: Sequence[CelRule], instance: Any,
                  old: Any = None) -> list[RuleFinding]:
    """The rules ``instance`` breaks, and those gitray could not evaluate on it.

    ``old`` is the live object when the manifest would update one; without it transition
    rules are not run (they apply on update only).
    """
    found: list[RuleFinding] = []
    for rule in rules:
        if rule.transition and old is None:
            continue
        for path, value in _at(instance, rule.path):
            activation = {"self": json_to_cel(value)}
            if rule.transition:
                present, before = _old_value(old, path)
                if not present:
                    continue
                activation["oldSelf"] = json_to_cel(before)
            try:
                result = _evaluate(rule.rule, activation)
            except KeyError as e:
                found.append(RuleFinding(path, rule, f"{rule.text} (rule error: {e.args[0]})"))
                continue
            except _Unevaluable as e:
                found.append(RuleFinding(path, rule, str(e), evaluated=False))
                break  # once per rule and manifest is enough
            if not isinstance(result, celtypes.BoolType):
                found.append(RuleFinding(path, rule, f"the rule gave {type(result).__name__}, "
                                         "not a bool", evaluated=False))
                break
            if not result:
                found.append(RuleFinding(path, rule, _message(rule, activation)))
    return found
