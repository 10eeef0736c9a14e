"""The located walk of a YAML file: parser events in, plain values with the location of every
mapping entry and sequence item (and of literal block scalars) out, enforcing the limits and
rules ``gitray.parsing.yamlsafe`` describes. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)

from gitray.core.model import Diagnostic, SourceLocation
from gitray.parsing.text import JsonPath
from gitray.parsing.yamlscalars import CORE, resolve_scalar, tag_text, unsupported_tag

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_NODES",
    "NodeBudget",
    "Recorded",
    "Stop",
    "Walk",
    "location_of",
]

MAX_DEPTH = 64  # Kubernetes manifests nest ~20 deep; more is a mistake or an attack
MAX_ALIAS_NODES = 100_000  # nodes that alias expansion may add to one file
MAX_NODES = 250_000  # scalars, collections and aliases in one file (~20x a large manifest)


Recorded = tuple[dict[JsonPath, SourceLocation], dict[JsonPath, tuple[int, int]]]


class Stop(Exception):
    """A problem after which the rest of the file cannot be trusted."""

    def __init__(self, location: SourceLocation, message: str) -> None:
        super().__init__(message)
        self.location = location
        self.message = message


class NodeBudget:
    """How many more YAML nodes may be read (shared by the files of one revision)."""

    def __init__(self, nodes: int) -> None:
        self.total = nodes
        self.left = nodes


def location_of(path: str, mark: Any) -> SourceLocation:
    return SourceLocation(path, int(mark.line) + 1, int(mark.column) + 1)


@dataclass
class _Frame:
    container: dict[str, Any] | list[Any]
    path: JsonPath
    anchor: str | None
    location: SourceLocation
    size: int = 1
    key: str | None = None  # mapping: the key waiting for its value
    key_location: SourceLocation | None = None
    merge_pending: bool = False
    merges: list[tuple[Any, SourceLocation]] = field(default_factory=list)


class Walk:
    """Turns parser events into plain values, enforcing the limits in the module docstring."""

    def __init__(self, text: str, path: str, budget: NodeBudget) -> None:
        self.text = text
        self.path = path
        self.budget = budget
        self.file_nodes = 0
        self.documents: list[tuple[Any, SourceLocation]] = []  # value, where its root starts
        self.recorded: list[Recorded] = []  # the locations and literals of each
        self.diagnostics: list[Diagnostic] = []
        self.alias_nodes = 0
        self._line_starts: list[int] | None = None
        self._reset()

    def _reset(self) -> None:
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.locations: dict[JsonPath, SourceLocation] = {}
        self.literals: dict[JsonPath, tuple[int, int]] = {}
        self.root: Any = None
        self.root_location = SourceLocation(self.path)

    # (libyaml reports plain scalars with style "", the pure parser with None)

    def feed(self, event: Event) -> None:
        kind = type(event)  # the common events first, by exact class (most are scalars)
        if kind is ScalarEvent:
            self._count(event)
            self._scalar(event)  # type: ignore[arg-type]
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            self._count(event)
            self._start(event)  # type: ignore[arg-type]
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            self._end()
        else:
            self._feed_other(event)

    def _feed_other(self, event: Event) -> None:
        if isinstance(event, ScalarEvent | AliasEvent | CollectionStartEvent):
            self._count(event)
        if isinstance(event, DocumentStartEvent):
            self._reset()
            self.root_location = location_of(self.path, event.start_mark)
        elif isinstance(event, DocumentEndEvent):
            if self.root is not None:
                self.documents.append((self.root, self.root_location))
                self.recorded.append((self.locations, self.literals))
        elif isinstance(event, ScalarEvent):
            self._scalar(event)
        elif isinstance(event, AliasEvent):
            self._alias(event)
        elif isinstance(event, CollectionStartEvent):
            self._start(event)
        elif isinstance(event, MappingEndEvent | SequenceEndEvent):
            self._end()

    def _count(self, event: Event) -> None:
        self.file_nodes += 1
        self.budget.left -= 1
        if self.file_nodes > MAX_NODES:
            raise Stop(
                location_of(self.path, event.start_mark),
                f"more than {MAX_NODES} YAML values in one file; split it",
            )
        if self.budget.left < 0:
            raise Stop(
                location_of(self.path, event.start_mark),
                f"the files read hold more than {self.budget.total} YAML values in total; "
                "narrow 'paths' or add 'exclude' globs in gitray.yaml",
            )

    # -- values ---------------------------------------------------------------------------

    def _scalar(self, event: ScalarEvent) -> None:
        location = location_of(self.path, event.start_mark)
        if self._take_key(event, location):
            return
        value = self._resolve(event, location)
        path = self._child_path(location)
        if event.style == "|":
            self.literals[path] = self._literal_origin(event)
        self._anchor(event.anchor, value, 1)
        self._add(value, 1, location)

    def _alias(self, event: AliasEvent) -> None:
        location = location_of(self.path, event.start_mark)
        anchor = str(event.anchor)
        if anchor not in self.anchors:
            if any(frame.anchor == anchor for frame in self.stack):
                raise Stop(location, f"alias *{anchor} refers to a node that contains it")
            raise Stop(location, f"alias *{anchor} refers to an undefined anchor")
        value, size = self.anchors[anchor]
        if self._expecting_key():
            if isinstance(value, dict | list):
                raise Stop(location, "a mapping key must be a plain value, not an alias")
            self._set_key(str(value), location)
            return
        self.alias_nodes += size
        if self.alias_nodes > MAX_ALIAS_NODES:
            raise Stop(
                location,
                f"YAML aliases expand to more than {MAX_ALIAS_NODES} nodes "
                "(an alias bomb?); write the values out instead",
            )
        self._child_path(location)
        self._add(value, size, location)

    def _start(self, event: CollectionStartEvent) -> None:
        location = location_of(self.path, event.start_mark)
        if self._expecting_key():
            raise Stop(location, "a mapping key must be a plain value, not a mapping or list")
        if len(self.stack) >= MAX_DEPTH:
            raise Stop(location, f"nesting deeper than {MAX_DEPTH} levels")
        is_map = isinstance(event, MappingStartEvent)
        expected = CORE + ("map" if is_map else "seq")
        tag = tag_text(event.tag)
        if tag not in (None, "!", expected):
            self.diagnostics.append(Diagnostic(location, unsupported_tag(tag)))
        path = self._child_path(location)
        container: dict[str, Any] | list[Any] = {} if is_map else []
        anchor = None if event.anchor is None else str(event.anchor)
        self.stack.append(_Frame(container, path, anchor, location))

    def _end(self) -> None:
        frame = self.stack.pop()
        if isinstance(frame.container, dict):
            self._apply_merges(frame)
        self._anchor(frame.anchor, frame.container, frame.size)
        self._add(frame.container, frame.size, frame.location)

    # -- helpers --------------------------------------------------------------------------

    def _expecting_key(self) -> bool:
        if not self.stack:
            return False
        frame = self.stack[-1]
        return isinstance(frame.container, dict) and frame.key is None and not frame.merge_pending

    def _take_key(self, event: ScalarEvent, location: SourceLocation) -> bool:
        if not self._expecting_key():
            return False
        frame = self.stack[-1]
        text = str(event.value)
        if not event.style and text == "<<" and tag_text(event.tag) in (None, CORE + "merge"):
            frame.merge_pending = True
            frame.key_location = location
            return True
        self._set_key(text, location)
        return True

    def _set_key(self, text: str, location: SourceLocation) -> None:
        frame = self.stack[-1]
        assert isinstance(frame.container, dict)
        path = (*frame.path, text)
        if text in frame.container or path in self.locations:
            first = self.locations.get(path)
            where = f" (first at line {first.line})" if first else ""
            self.diagnostics.append(Diagnostic(location, f"duplicate key {text!r}{where}"))
            frame.key = "\x00duplicate"  # the value is read and dropped
        else:
            frame.key = text
        frame.key_location = location

    def _child_path(self, location: SourceLocation) -> JsonPath:
        """Path of the value about to be added; records its location."""
        if not self.stack:
            return ()
        frame = self.stack[-1]
        if isinstance(frame.container, list):
            path: JsonPath = (*frame.path, len(frame.container))
            self.locations[path] = location
            return path
        if frame.merge_pending or frame.key is None:
            return (*frame.path, "\x00merge")  # merged values are located at their ``<<``
        path = (*frame.path, frame.key)
        if frame.key_location is not None and not frame.key.startswith("\x00"):
            self.locations[path] = frame.key_location
        return path

    def _add(self, value: Any, size: int, location: SourceLocation) -> None:
        if not self.stack:
            self.root = value
            self.root_location = location
            return
        frame = self.stack[-1]
        frame.size += size
        if isinstance(frame.container, list):
            frame.container.append(value)
        elif frame.merge_pending:
            frame.merges.append((value, frame.key_location or location))
            frame.merge_pending = False
        else:
            key = frame.key
            frame.key = None
            if key is not None and not key.startswith("\x00"):
                frame.container[key] = value

    def _apply_merges(self, frame: _Frame) -> None:
        assert isinstance(frame.container, dict)
        for value, location in frame.merges:
            sources = value if isinstance(value, list) else [value]
            for source in sources:
                if not isinstance(source, dict):
                    self.diagnostics.append(
                        Diagnostic(location, "a merge key (<<) needs a mapping or a list of them")
                    )
                    continue
                for key, item in source.items():
                    frame.container.setdefault(key, item)

    def _anchor(self, anchor: object, value: Any, size: int) -> None:
        if anchor is not None:
            self.anchors[str(anchor)] = (value, size)

    def _resolve(self, event: ScalarEvent, location: SourceLocation) -> Any:
        value, problem = resolve_scalar(str(event.value), tag_text(event.tag), not event.style)
        if problem:
            self.diagnostics.append(Diagnostic(location, problem))
        return value

    def _literal_origin(self, event: ScalarEvent) -> tuple[int, int]:
        """File line of a literal block's first text line, and the text's indentation."""
        first_line = int(event.start_mark.line) + 2  # 1-based, the line after ``|``
        if self._line_starts is None:
            self._line_starts = [0, *(m.end() for m in re.finditer("\n", self.text))]
        starts = self._line_starts
        for number in range(first_line - 1, min(int(event.end_mark.line) + 1, len(starts))):
            end = starts[number + 1] if number + 1 < len(starts) else len(self.text)
            line = self.text[starts[number] : end].rstrip("\n")
            if line.strip():
                return first_line, len(line) - len(line.lstrip(" "))
        return first_line, 0
