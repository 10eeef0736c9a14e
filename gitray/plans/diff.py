"""Field-level differences between a desired and a live object. Pure, no I/O.

Two comparisons:

- :func:`subset_changes` looks only at the fields the desired object sets, so fields the API
  server or the KubeRay operator default never show as a permanent diff. Used against live
  objects. Removal of a field from Git is caught by the spec-hash annotation instead.
- :func:`full_changes` compares everything, for previews where "live" was synthesised from
  another Git revision and is therefore exact.

Lists of mappings are paired by ``name``/``groupName`` when every item has one, else by index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gitray.core.model import JSON
from gitray.plans.plan import FieldChange

__all__ = ["full_changes", "list_key", "same_value", "subset_changes"]

_LIST_KEYS = ("name", "groupName")
_MAX_CHANGES = 200  # a display cap; the decision never depends on the change list


def _empty(value: JSON) -> bool:
    return value is None or (isinstance(value, dict | list | str) and len(value) == 0)


def same_value(a: JSON, b: JSON) -> bool:
    """Scalars equal up to int/float (1 == 1.0) and bool identity (True != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def list_key(items: Sequence[JSON]) -> str | None:
    """The key (name, groupName) every item of ``items`` has, if any: items pair by it."""
    for key in _LIST_KEYS:
        if items and all(isinstance(i, Mapping) and isinstance(i.get(key), str) for i in items):
            return key
    return None


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _walk(desired: JSON, live: JSON, path: str, out: list[FieldChange], full: bool) -> None:
    if len(out) >= _MAX_CHANGES:
        return
    if isinstance(desired, Mapping) and isinstance(live, Mapping):
        keys = set(desired) | (set(live) if full else set())
        for key in sorted(keys, key=str):
            d, lv = desired.get(key), live.get(key)
            if _empty(d) and _empty(lv):
                continue
            _walk(d, lv, _join(path, str(key)), out, full)
        return
    if isinstance(desired, list) and isinstance(live, list):
        key = list_key(desired)
        if key is not None and list_key(live) == key:
            live_by = {i[key]: i for i in live}
            desired_by = {i[key]: i for i in desired}
            for name, item in desired_by.items():
                _walk(item, live_by.get(name), f"{path}[{name}]", out, full)
            for name, item in live_by.items():
                if name not in desired_by and (full or not _empty(item)):
                    out.append(FieldChange(f"{path}[{name}]", item, None))
            return
        if len(desired) == len(live):
            for i, (d, lv) in enumerate(zip(desired, live, strict=True)):
                _walk(d, lv, f"{path}[{i}]", out, full)
            return
    if _empty(desired) and _empty(live):
        return
    if desired is None and not full:
        return
    if not same_value(desired, live):
        out.append(FieldChange(path, live, desired))


def subset_changes(desired: JSON, live: JSON, path: str = "") -> tuple[FieldChange, ...]:
    """Fields set in ``desired`` whose live value differs (live-only fields are ignored)."""
    out: list[FieldChange] = []
    _walk(desired, live, path, out, full=False)
    return tuple(out)


def full_changes(desired: JSON, live: JSON, path: str = "") -> tuple[FieldChange, ...]:
    """Every difference, including fields only ``live`` has (shown as removed)."""
    out: list[FieldChange] = []
    _walk(desired, live, path, out, full=True)
    return tuple(out)

