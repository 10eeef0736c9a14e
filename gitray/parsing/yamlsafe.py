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
document root, so later checks (JSON Schema, gitray's rules) can point at the exact line (the
walk that records them: ``gitray.parsing.yamlwalk``).

Recording them is most of the cost of reading a file, and they are shown only when something is
wrong. So a file is read first by ``yamlfast`` (values only, the same limits and rules, giving up
on anything this walk would report); this walk reads it only when that gives up, or later, when
a document's ``locations`` or ``literals`` are first asked for (then the whole file once). The
values, problems and positions are the same either way (tests/unit/parsing/test_yaml_fast.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    Event,
)
from ruamel.yaml.reader import ReaderError

from gitray.core.model import Diagnostic, SourceLocation
from gitray.parsing.text import JsonPath
from gitray.parsing.yamlfast import fast_documents
from gitray.parsing.yamlwalk import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_NODES,
    NodeBudget,
    Recorded,
    Stop,
    Walk,
    location_of,
)

__all__ = ["PARSER", "YamlDocument", "parse_documents"]

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


class _Positions:
    """The recorded positions of a file's documents; for a file the fast path read, recorded
    by reading it again with the walk when first asked for (the text is kept until then)."""

    def __init__(self, text: str, path: str, recorded: list[Recorded] | None = None) -> None:
        self._text: str | None = None if recorded is not None else text
        self._path = path
        self._recorded = recorded

    def of(self, index: int) -> Recorded:
        if self._recorded is None:
            assert self._text is not None
            builder = Walk(self._text, self._path, NodeBudget(MAX_NODES))
            for event in _events(self._text):
                builder.feed(event)
            # the fast path read this file without a problem, so the walk finds none either
            assert not builder.diagnostics, builder.diagnostics
            self._recorded = builder.recorded
            self._text = None
        return self._recorded[index]


def parse_documents(
    text: str, path: str, budget: NodeBudget | None = None
) -> tuple[list[YamlDocument], list[Diagnostic]]:
    """Every non-empty document of ``text``; on a fatal problem, the ones before it."""
    budget = budget or NodeBudget(MAX_NODES)
    fast = _fast(text, path, budget)
    if fast is not None:
        return fast, []
    builder = Walk(text, path, budget)
    try:
        for event in _events(text):
            builder.feed(event)
    except Stop as stop:
        builder.diagnostics.append(Diagnostic(stop.location, stop.message))
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = location_of(path, mark) if mark is not None else SourceLocation(path)
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
