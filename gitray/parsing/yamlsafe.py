"""Hostile-input-safe YAML reading: text in, plain JSON-safe values with locations out. Pure.

ruamel.yaml only *parses* here (libyaml through ruamel.yaml.clib when installed, else the
pure-Python parser; both are iterative state machines, so deep nesting cannot exhaust Python's
stack); the values are built from the event stream by this module, which is where every limit is
enforced:

- no object is ever constructed from a tag: only the YAML core schema (str, int, float, bool,
  null, map, seq) is accepted, anything else (``!!python/object``, ``!foo``) is a diagnostic;
- nesting deeper than ``MAX_DEPTH`` stops the file, and so do more than ``MAX_NODES`` nodes
  (the caller may share a ``NodeBudget`` across files to bound a whole revision);
- aliases are expanded by *reference*, and the number of nodes they would add is counted: more
  than ``MAX_ALIAS_NODES`` (a "billion laughs" bomb) stops the file before any memory is spent;
- duplicate mapping keys and non-scalar keys are diagnostics (Kubernetes rejects them too).

Every mapping entry and sequence item gets a ``SourceLocation``, keyed by its path from the
document root, so later checks (JSON Schema, gitray's rules) can point at the exact line.

Recording them is most of the cost of reading a file, and they are shown only when something is
wrong. So a file is read first by ``yamlfast`` (values only, the same limits and rules, giving up
on anything this walk would report); this walk reads it only when that gives up, or later, when
a document's ``locations`` or ``literals`` are first asked for (then the whole file once). The
values, problems and positions are the same either way (tests/unit/test_yaml_fast.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
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
from ruamel.yaml.reader import ReaderError

from gitray.core.model import Diagnostic, SourceLocation
from gitray.parsing.text import JsonPath
from gitray.parsing.yamlfast import fast_documents
from gitray.parsing.yamlscalars import CORE, resolve_scalar, tag_text, unsupported_tag

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_NODES",
    "PARSER",
    "NodeBudget",
    "YamlDocument",
    "parse_documents",
]

MAX_DEPTH = 64  # Kubernetes manifests nest ~20 deep; more is a mistake or an attack
MAX_ALIAS_NODES = 100_000  # nodes that alias expansion may add to one file
MAX_NODES = 250_000  # scalars, collections and aliases in one file (~20x a large manifest)

try:  # libyaml is ~6x faster than the pure-Python parser; both are safe here
    from ruamel.yaml.clib._ruamel_yaml import CParser as _CParser

    PARSER = "c"
except ImportError:  # pragma: no cover - depends on the installation
    _CParser = None
    PARSER = "pure"

@dataclass(frozen=True)
class YamlDocument:
    """One non-empty YAML document as plain data, with where each part of it was written."""

    value: Any
    start: SourceLocation
    positions: _Positions = field(repr=False, compare=False)
    index: int = field(repr=False, compare=False, default=0)  # of the file's documents

    @property
    def locations(self) -> Mapping[JsonPath, SourceLocation]:
        return self.positions.of(self.index)[0]

    @property
    def literals(self) -> Mapping[JsonPath, tuple[int, int]]:
        """Literal block scalars (``key: |``): path -> (file line of the text's first line,
        its indentation)."""
        return self.positions.of(self.index)[1]

    def locate(self, path: JsonPath) -> SourceLocation:
        """The location of ``path``, or of its nearest ancestor that has one."""
        locations = self.locations
        for end in range(len(path), -1, -1):
            location = locations.get(tuple(path[:end]))
            if location is not None:
                return location
        return self.start


_Recorded = tuple[dict[JsonPath, SourceLocation], dict[JsonPath, tuple[int, int]]]


class _Positions:
    """The recorded positions of a file's documents; for a file the fast path read, recorded
    by reading it again with the walk when first asked for (the text is kept until then)."""

    def __init__(self, text: str, path: str, recorded: list[_Recorded] | None = None) -> None:
        self._text: str | None = None if recorded is not None else text
        self._path = path
        self._recorded = recorded

    def of(self, index: int) -> _Recorded:
        if self._recorded is None:
            assert self._text is not None
            builder = _Builder(self._text, self._path, NodeBudget(MAX_NODES))
            for event in _events(self._text):
                builder.feed(event)
            # the fast path read this file without a problem, so the walk finds none either
            assert not builder.diagnostics, builder.diagnostics
            self._recorded = builder.recorded
            self._text = None
        return self._recorded[index]


class _Stop(Exception):
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


def parse_documents(
    text: str, path: str, budget: NodeBudget | None = None
) -> tuple[list[YamlDocument], list[Diagnostic]]:
    """Every non-empty document of ``text``; on a fatal problem, the ones before it."""
    budget = budget or NodeBudget(MAX_NODES)
    fast = _fast(text, path, budget)
    if fast is not None:
        return fast, []
    builder = _Builder(text, path, budget)
    try:
        for event in _events(text):
            builder.feed(event)
    except _Stop as stop:
        builder.diagnostics.append(Diagnostic(stop.location, stop.message))
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = _loc(path, mark) if mark is not None else SourceLocation(path)
        problem = err.problem or err.context or "invalid YAML"
        context = f" ({err.context})" if err.context and err.problem else ""
        builder.diagnostics.append(Diagnostic(where, f"YAML syntax error: {problem}{context}"))
    except ReaderError as err:
        position = err.position
        if PARSER == "c":  # libyaml counts bytes of the UTF-8 encoding
            position = len(text.encode()[:position].decode(errors="ignore"))
        builder.diagnostics.append(
            Diagnostic(
                _char_location(text, position, path),
                f"character {_char_name(err.character)} is not allowed in YAML",
            )
        )
    except (YAMLError, UnicodeError) as err:  # anything else: still one line, no traceback
        first = str(err).strip().splitlines()[0] if str(err).strip() else "invalid YAML"
        builder.diagnostics.append(Diagnostic(SourceLocation(path), f"YAML error: {first}"))
    positions = _Positions(text, path, builder.recorded)
    documents = [YamlDocument(value, start, positions, index)
                 for index, (value, start) in enumerate(builder.documents)]
    return documents, builder.diagnostics


def _fast(text: str, path: str, budget: NodeBudget) -> list[YamlDocument] | None:
    """The documents of ``text`` read without positions, or None: the walk must read it."""
    if _CParser is None:  # pragma: no cover - depends on the installation
        events = iter(YAML(typ="safe", pure=True).parse(text))
        found = fast_documents(lambda: next(events, None), min(MAX_NODES, budget.left),
                               MAX_DEPTH, MAX_ALIAS_NODES)
    else:
        parser = _CParser(text)
        try:
            found = fast_documents(parser.get_event, min(MAX_NODES, budget.left), MAX_DEPTH,
                                   MAX_ALIAS_NODES)
        finally:
            parser.dispose()
    if found is None:
        return None
    values, nodes = found
    budget.left -= nodes
    positions = _Positions(text, path)
    return [YamlDocument(value, SourceLocation(path, line + 1, column + 1), positions, index)
            for index, (value, line, column) in enumerate(values)]


def _events(text: str) -> Iterator[Event]:
    """The parser's events; libyaml's directly (a YAML instance per call cost ~10%)."""
    if _CParser is None:  # pragma: no cover - depends on the installation
        yield from YAML(typ="safe", pure=True).parse(text)
        return
    parser = _CParser(text)
    try:
        while parser.check_event():
            yield parser.get_event()
    finally:
        parser.dispose()


def _char_name(character: object) -> str:
    if isinstance(character, int):
        return f"#x{character:04x}"
    if isinstance(character, str) and len(character) == 1:
        return f"#x{ord(character):04x}"
    return repr(character)


def _char_location(text: str, position: int, path: str) -> SourceLocation:
    position = max(0, min(position, len(text)))
    line_start = text.rfind("\n", 0, position) + 1
    return SourceLocation(path, text.count("\n", 0, position) + 1, position - line_start + 1)


def _loc(path: str, mark: Any) -> SourceLocation:
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


class _Builder:
    """Turns parser events into plain values, enforcing the limits in the module docstring."""

    def __init__(self, text: str, path: str, budget: NodeBudget) -> None:
        self.text = text
        self.path = path
        self.budget = budget
        self.file_nodes = 0
        self.documents: list[tuple[Any, SourceLocation]] = []  # value, where its root starts
        self.recorded: list[_Recorded] = []  # the locations and literals of each
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
            self.root_location = _loc(self.path, event.start_mark)
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
            raise _Stop(
                _loc(self.path, event.start_mark),
                f"more than {MAX_NODES} YAML values in one file; split it",
            )
        if self.budget.left < 0:
            raise _Stop(
                _loc(self.path, event.start_mark),
                f"the files read hold more than {self.budget.total} YAML values in total; "
                "narrow 'paths' or add 'exclude' globs in gitray.yaml",
            )

    # -- values ---------------------------------------------------------------------------

    def _scalar(self, event: ScalarEvent) -> None:
        location = _loc(self.path, event.start_mark)
        if self._take_key(event, location):
            return
        value = self._resolve(event, location)
        path = self._child_path(location)
        if event.style == "|":
            self.literals[path] = self._literal_origin(event)
        self._anchor(event.anchor, value, 1)
        self._add(value, 1, location)

    def _alias(self, event: AliasEvent) -> None:
        location = _loc(self.path, event.start_mark)
        anchor = str(event.anchor)
        if anchor not in self.anchors:
            if any(frame.anchor == anchor for frame in self.stack):
                raise _Stop(location, f"alias *{anchor} refers to a node that contains it")
            raise _Stop(location, f"alias *{anchor} refers to an undefined anchor")
        value, size = self.anchors[anchor]
        if self._expecting_key():
            if isinstance(value, dict | list):
                raise _Stop(location, "a mapping key must be a plain value, not an alias")
            self._set_key(str(value), location)
            return
        self.alias_nodes += size
        if self.alias_nodes > MAX_ALIAS_NODES:
            raise _Stop(
                location,
                f"YAML aliases expand to more than {MAX_ALIAS_NODES} nodes "
                "(an alias bomb?); write the values out instead",
            )
        self._child_path(location)
        self._add(value, size, location)

    def _start(self, event: CollectionStartEvent) -> None:
        location = _loc(self.path, event.start_mark)
        if self._expecting_key():
            raise _Stop(location, "a mapping key must be a plain value, not a mapping or list")
        if len(self.stack) >= MAX_DEPTH:
            raise _Stop(location, f"nesting deeper than {MAX_DEPTH} levels")
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
