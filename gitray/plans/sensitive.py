"""Sensitive values: kept out of every plan, shown only as which keys changed. Pure, no I/O.

A value is sensitive when its path matches a rule: every ``data.*`` and ``stringData.*`` value
of a Secret, and each ``sensitiveFields`` entry of gitray.yaml (``[<Kind>:]<path glob>``,
e.g. ``RayJob:*.env[API_KEY].value``; ``*`` spans any characters, dots included; the rest is
literal). Paths are written as plan diffs write them: ``spec.headGroupSpec.template.spec.
containers[ray-head].env[API_KEY].value`` (list items by ``name``/``groupName``, else index).

A planned workload goes through :func:`redact_plan` before it leaves the planner, so nothing
downstream — text, markdown and JSON views, PR comments, commit statuses, logs, Events, run
records, saved plan files — ever holds such a value:

- a field change shows ``(sensitive value)`` in place of the value, rendered as
  ``~ data.password: (sensitive value changed)``;
- a manifest in a step's params holds ``gitray:sensitive:sha256:<digest>`` instead. The
  executor puts the value back from the pinned revision (:class:`SensitiveValues`) right
  before the step acts, and refuses a digest that revision does not hold.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gitray.core.model import JSON, Workload
from gitray.plans.diff import list_key
from gitray.plans.plan import FieldChange, Step, WorkloadPlan

__all__ = [
    "PLACEHOLDER_PREFIX",
    "SECRET_RULES",
    "SENSITIVE",
    "SensitiveRules",
    "SensitiveValues",
    "UnknownSensitiveValue",
    "digest",
    "redact_plan",
    "rules_for",
]

SENSITIVE = "(sensitive value)"  # what a plan shows in place of a value
PLACEHOLDER_PREFIX = "gitray:sensitive:sha256:"
SECRET_RULES = ("data.*", "stringData.*")  # every value of a Secret


def digest(value: JSON) -> str:
    """The placeholder standing for ``value`` in a plan (domain-separated SHA-256)."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    text = hashlib.sha256(b"gitray-sensitive\0" + canonical.encode()).hexdigest()
    return PLACEHOLDER_PREFIX + text


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$")


@dataclass(frozen=True)
class SensitiveRules:
    """The path globs that are sensitive in one kind's manifests (and plan diffs)."""

    patterns: tuple[str, ...] = ()
    _compiled: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(_glob(p) for p in self.patterns))

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def matches(self, path: str) -> bool:
        return any(c.match(path) for c in self._compiled)


def rules_for(kind: str, sensitive_fields: Iterable[str]) -> SensitiveRules:
    """The rules for ``kind``: a Secret's values, plus the entries of ``sensitiveFields``
    naming this kind or no kind."""
    patterns = list(SECRET_RULES) if kind == "Secret" else []
    for entry in sensitive_fields:
        head, sep, rest = entry.partition(":")
        if not sep:
            patterns.append(entry)
        elif head == kind:
            patterns.append(rest)
    return SensitiveRules(tuple(patterns))


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _walk(value: JSON, path: str, rules: SensitiveRules, found: list[tuple[str, JSON]]
          ) -> JSON:
    """``value`` with each sensitive subtree swapped for its digest; ``found`` collects them."""
    if path and value is not None and rules.matches(path):
        found.append((path, value))
        return digest(value)
    if isinstance(value, Mapping):
        return {k: _walk(v, _join(path, str(k)), rules, found) for k, v in value.items()}
    if isinstance(value, list):
        key = list_key(value)
        return [_walk(item, f"{path}[{item[key] if key else i}]", rules, found)
                for i, item in enumerate(value)]
    return value


def _mask(value: JSON, path: str, rules: SensitiveRules) -> JSON:
    """``value`` (a diff's before or after) with each sensitive subtree shown as SENSITIVE."""
    found: list[tuple[str, JSON]] = []
    walked = _walk(value, path, rules, found)
    return _unplace(walked) if found else value


def _unplace(value: JSON) -> JSON:
    if isinstance(value, str) and value.startswith(PLACEHOLDER_PREFIX):
        return SENSITIVE
    if isinstance(value, Mapping):
        return {k: _unplace(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unplace(v) for v in value]
    return value


def _redact_params(params: Mapping[str, JSON], rules: SensitiveRules) -> dict[str, JSON]:
    out = dict(params)
    manifest = out.get("manifest")
    if isinstance(manifest, Mapping):
        out["manifest"] = _walk(manifest, "", rules, [])
    return out


def redact_plan(wp: WorkloadPlan, rules: SensitiveRules) -> WorkloadPlan:
    """``wp`` with no sensitive value left: in its field changes and its steps' manifests."""
    if not rules:
        return wp
    steps = tuple(replace(s, params=_redact_params(s.params, rules)) for s in wp.steps)
    changes = tuple(FieldChange(c.path, _mask(c.before, c.path, rules),
                                _mask(c.after, c.path, rules)) for c in wp.changes)
    return replace(wp, steps=steps, changes=changes)


class UnknownSensitiveValue(ValueError):
    """A plan refers to a sensitive value the revision being applied does not hold."""


@dataclass(frozen=True)
class SensitiveValues:
    """Digest -> value, for every sensitive value of a revision's workloads."""

    values: Mapping[str, JSON] = field(default_factory=dict)

    @classmethod
    def of(cls, workloads: Iterable[Workload], sensitive_fields: Iterable[str]
           ) -> SensitiveValues:
        fields = tuple(sensitive_fields)
        values: dict[str, JSON] = {}
        for w in workloads:
            rules = rules_for(w.key.kind, fields)
            if not rules:
                continue
            found: list[tuple[str, JSON]] = []
            _walk(w.manifest, "", rules, found)  # a digest does not depend on the path
            values.update((digest(v), v) for _, v in found)
        return cls(values)

    def reveal(self, step: Step) -> Step:
        """``step`` with its manifest's placeholders replaced by their values."""
        manifest = step.params.get("manifest")
        if not isinstance(manifest, Mapping):
            return step
        return replace(step, params={**step.params, "manifest": self._fill(manifest)})

    def _fill(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith(PLACEHOLDER_PREFIX):
            if value not in self.values:
                raise UnknownSensitiveValue(
                    f"the plan refers to a sensitive value (digest {value[-12:]}) that the "
                    "revision being applied does not hold; run gitray plan again")
            return self.values[value]
        if isinstance(value, Mapping):
            return {k: self._fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._fill(v) for v in value]
        return value
