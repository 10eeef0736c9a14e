"""The fast path of ``gitray.parsing.yamlsafe``: plain values from parser events, no positions.
Pure, no I/O.

Recording where every value was written costs most of the time spent reading a manifest, and
positions are only shown when something is wrong. So a file is first read here from the same
libyaml events, with every limit counted exactly as the position-recording walk counts it
(nodes per file and per revision, nesting depth, alias expansion), and the same scalar rules
(``yamlscalars``). Whatever that walk would report, or could treat differently, makes this one
give up instead of reporting: a parse error, any tag, a limit reached, a duplicate or non-plain
key, an alias it cannot resolve, a scalar without a JSON value, a second ``<<`` in one mapping
(the walk locates the merged values of both at one path and so reports their shared keys), a
key starting with NUL (the walk's own markers). The caller then reads the file again with the
walk, which says what and where; a file read here has no problem the walk would report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ruamel.yaml.error import YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)

from gitray.parsing.yamlscalars import resolve_scalar

__all__ = ["FastDocument", "fast_documents"]

# (value, line, column) of a non-empty document: 0-based, where its root value starts
FastDocument = tuple[Any, int, int]

_MERGE = "\x00merge"  # the key of a frame whose ``<<`` waits for its value


class _GiveUp(Exception):
    """The walk in ``yamlsafe`` must read this file (it reports something, or may)."""


def fast_documents(
    next_event: Callable[[], Any], max_nodes: int, max_depth: int, max_alias_nodes: int
) -> tuple[list[FastDocument], int] | None:
    """The non-empty documents of an event stream and how many nodes it holds, or None when
    the position-recording walk must read it. ``max_nodes``: the smaller of the per-file
    limit and what is left of the revision's budget."""
    try:
        return _walk(next_event, max_nodes, max_depth, max_alias_nodes)
    except (_GiveUp, YAMLError, UnicodeError):
        return None


def _walk(  # noqa: PLR0915 - one loop over the events, kept flat for speed
    next_event: Callable[[], Any], max_nodes: int, max_depth: int, max_alias_nodes: int
) -> tuple[list[FastDocument], int]:
    documents: list[FastDocument] = []
    # a frame: [container, anchor, size, key (None: a key is next), merge values or None]
    stack: list[list[Any]] = []
    anchors: dict[str, tuple[Any, int]] = {}
    nodes = alias_nodes = 0
    root: Any = None
    root_at = (0, 0)
    while (event := next_event()) is not None:
        kind = type(event)
        if kind is ScalarEvent or kind is AliasEvent:
            nodes += 1
            if nodes > max_nodes:
                raise _GiveUp
            if kind is ScalarEvent:
                if event.tag is not None:
                    raise _GiveUp
                text: str = event.value
                plain = not event.style
                if stack and _take_key(stack[-1], text, plain):
                    continue
                if plain:
                    value, problem = resolve_scalar(text, None, True)
                    if problem:
                        raise _GiveUp
                else:
                    value = text
                size = 1
                if event.anchor is not None:
                    anchors[event.anchor] = (value, 1)
            else:
                found = anchors.get(event.anchor)
                if found is None:
                    raise _GiveUp
                value, size = found
                if stack and _take_alias_key(stack[-1], value):
                    continue
                alias_nodes += size
                if alias_nodes > max_alias_nodes:
                    raise _GiveUp
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            nodes += 1
            if nodes > max_nodes or event.tag is not None or len(stack) >= max_depth:
                raise _GiveUp
            if stack:
                top = stack[-1]
                if top[3] is None and type(top[0]) is dict:
                    raise _GiveUp  # a mapping or list as a key
            else:
                root_at = (event.start_mark.line, event.start_mark.column)
            container: Any = {} if kind is MappingStartEvent else []
            stack.append([container, event.anchor, 1, None, None])
            continue
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            container, anchor, size, _, merges = stack.pop()
            if merges:
                _merge(container, merges)
            if anchor is not None:
                anchors[anchor] = (container, size)
            value = container
        elif kind is DocumentStartEvent:
            anchors = {}
            root = None
            continue
        elif kind is DocumentEndEvent:
            if root is not None:
                documents.append((root, *root_at))
            continue
        else:  # the stream's start and end
            continue
        if not stack:  # the document's root
            root = value
            if kind is ScalarEvent or kind is AliasEvent:
                root_at = (event.start_mark.line, event.start_mark.column)
            continue
        top = stack[-1]
        top[2] += size
        parent = top[0]
        if type(parent) is list:
            parent.append(value)
        elif top[3] is _MERGE:
            top[4].append(value)
            top[3] = None
        else:
            parent[top[3]] = value
            top[3] = None
    return documents, nodes


def _take_key(frame: list[Any], text: str, plain: bool) -> bool:
    """Whether ``text`` is the key the mapping of ``frame`` waits for (then it is taken)."""
    container = frame[0]
    if frame[3] is not None or type(container) is not dict:
        return False
    if plain and text == "<<":
        if frame[4] is not None:
            raise _GiveUp
        frame[3], frame[4] = _MERGE, []
    elif text in container or text[:1] == "\x00":
        raise _GiveUp
    else:
        frame[3] = text
    return True


def _take_alias_key(frame: list[Any], value: Any) -> bool:
    """As ``_take_key``, for an alias: the text of a plain value it refers to."""
    if frame[3] is not None or type(frame[0]) is not dict:
        return False
    if isinstance(value, dict | list):
        raise _GiveUp
    return _take_key(frame, str(value), False)


def _merge(container: dict[str, Any], merges: list[Any]) -> None:
    for value in merges:
        for source in value if isinstance(value, list) else [value]:
            if not isinstance(source, dict):
                raise _GiveUp
            for key, item in source.items():
                container.setdefault(key, item)
