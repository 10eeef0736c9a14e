"""The JSON codec of a step's typed parameters (the base of the step registry's params
dataclasses, ``gitray.plans.steptypes``), and how a step's line writes a duration. Pure, no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar

from gitray.core.model import JSON

__all__ = ["P", "Params", "duration"]


def _key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class Params:
    """A step's parameters, typed. The JSON keys are the fields' names in camelCase (or a
    field's ``json`` metadata); keys a row does not name are kept in ``extra``, so that
    ``to_json(from_json(p)) == p``."""

    extra: Mapping[str, JSON] = field(default_factory=dict, kw_only=True)
    # what plan.schema.json says of the params besides their required keys (its properties,
    # a oneOf); generated into the schema by gitray.plans.stepschema
    schema: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def json_keys(cls) -> dict[str, str]:
        """field name -> JSON key, for the fields of the step type (``extra`` aside)."""
        return {f.name: f.metadata.get("json", _key(f.name))
                for f in dataclasses.fields(cls) if f.name != "extra"}

    @classmethod
    def required(cls) -> frozenset[str]:
        """The JSON keys every step of this type has."""
        keys = cls.json_keys()
        return frozenset(keys[f.name] for f in dataclasses.fields(cls)
                         if f.name != "extra" and f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Self:
        """``KeyError`` naming a required key that is missing."""
        keys = cls.json_keys()
        missing = sorted(cls.required() - set(data))
        if missing:
            raise KeyError(f"{cls.__name__} needs {', '.join(missing)}")
        known = {name: data[key] for name, key in keys.items() if key in data}
        extra = {k: v for k, v in data.items() if k not in set(keys.values())}
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        for name, key in self.json_keys().items():
            value = getattr(self, name)
            f = next(f for f in dataclasses.fields(self) if f.name == name)
            if value is None and f.default is None:
                continue  # an optional key that was absent stays absent
            out[key] = value
        out.update(self.extra)
        return out


P = TypeVar("P", bound="Params")


def duration(seconds: JSON) -> str:
    """``90`` -> ``90s``, ``120`` -> ``2m``, ``3600`` -> ``1h``; ``?`` when not a number."""
    if not isinstance(seconds, int):
        return "?"
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
