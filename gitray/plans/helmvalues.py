"""Which values-file line a Helm-rendered field comes from (issue 32). Pure.

helm does not say which template line printed which output line, nor which values a line
read. gitray traces the simple, common case and says nothing it cannot show: a template line
whose only actions are ``{{ .Values.a.b }}`` (optionally ``| quote``) is printed again with
the values helm merges (the chart's ``values.yaml``, then the entry's values files in order, a
later file winning); when an output line (a finding's) or a changed field (a plan's) is
exactly what such a line prints, it comes from the values-file lines that line reads. Lines
with any other action (``include``, ``if``, ``toYaml``, trimming ``{{-``), values that are not
plain scalars, and subcharts' templates are never traced: the finding then names the
template, the plan says which chart and values files rendered the workload.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gitray.core.model import JSON, SourceLocation, ValueLine
from gitray.core.snapshot import RepoFile
from gitray.parsing.text import decode_text
from gitray.parsing.yamlsafe import YamlDocument, parse_documents
from gitray.plans.diff import same_value

__all__ = ["Values", "load_values", "match_line", "template_lines", "trace_change"]

_ACTION = re.compile(r"\{\{.*?\}\}")
_SIMPLE = re.compile(r"\{\{ +\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?: *\| *(quote))? +\}\}")
_KEY = re.compile(r"^(?:- )?([A-Za-z0-9_.-]+|\"[^\"]*\"|'[^']*'):(?: (.*))?$")
_BLOCK = re.compile(r"^[|>][+-]?$")


@dataclass(frozen=True)
class Values:
    """The values files a render merges, lowest precedence first (the chart's values.yaml,
    then the entry's files): (path, its one document)."""

    files: tuple[tuple[str, YamlDocument], ...]

    def lookup(self, path: tuple[str, ...]) -> tuple[JSON, SourceLocation] | None:
        """The merged value at ``path`` and the line that sets it (the last file that does)."""
        for _path, document in reversed(self.files):
            node: JSON = document.value
            for part in path:
                if not isinstance(node, dict) or part not in node:
                    break
                node = node[part]
            else:
                return node, document.locate(path)
        return None


def load_values(chart: str, values: Sequence[str], files: Mapping[str, RepoFile]) -> Values:
    """The chart's values.yaml and ``values`` (repository paths), those that are one mapping."""
    out = []
    for path in (posixpath.join(chart, "values.yaml"), *values):
        found = files.get(path)
        if found is None or found.data is None:
            continue
        text, _ = decode_text(found.data, path)
        documents, problems = parse_documents(text, path) if text is not None else ([], [])
        if not problems and len(documents) == 1 and isinstance(documents[0].value, dict):
            out.append((path, documents[0]))
    return Values(tuple(out))


def _printed(value: JSON, quote: bool) -> str | None:
    """What ``{{ value }}`` prints in helm (numbers go through float64: only small integers
    print as written), or None when gitray does not know for sure."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        if abs(value) >= 10 ** 6:
            return None  # helm prints 1000000 as 1e+06
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    if not quote:
        return text
    if not text.isascii() or not text.isprintable() or '"' in text or "\\" in text:
        return None
    return f'"{text}"'


def _substituted(line: str, values: Values) -> tuple[str, tuple[SourceLocation, ...]] | None:
    """The line as helm prints it and the values lines it reads; None when not simple."""
    read: list[SourceLocation] = []
    out, at = [], 0
    for action in _ACTION.finditer(line):
        simple = _SIMPLE.fullmatch(action.group(0))
        if simple is None:
            return None
        found = values.lookup(tuple(simple.group(1)[1:].split(".")))
        printed = _printed(found[0], bool(simple.group(2))) if found else None
        if found is None or printed is None:
            return None
        out += [line[at:action.start()], printed]
        at = action.end()
        if found[1] not in read:
            read.append(found[1])
    return "".join([*out, line[at:]]), tuple(read)


def _scalar(text: str) -> JSON:
    documents, problems = parse_documents(text + "\n", "(line)")
    if problems or len(documents) != 1:
        return None
    value = documents[0].value
    return None if isinstance(value, dict | list) else value


def template_lines(path: str, text: str, values: Values) -> list[ValueLine]:
    """Every line of a template that prints values (simple actions only), with what it
    prints. Lines of a block scalar (``key: |``) carry its key in ``block``."""
    out = []
    block, block_indent = "", -1
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip(" "))
        if block and stripped and indent <= block_indent:
            block = ""
        key_match = _KEY.match(stripped)
        if not block and key_match and _BLOCK.match(key_match.group(2) or ""):
            block, block_indent = key_match.group(1).strip("\"'"), indent
            continue
        if "{{" not in stripped:
            continue
        found = _substituted(stripped, values)
        if found is None or not found[1]:
            continue
        printed, read = found
        key_match = _KEY.match(printed)
        key = key_match.group(1).strip("\"'") if key_match else ""
        value = None if block or not key_match else _scalar(key_match.group(2) or "")
        out.append(ValueLine(SourceLocation(path, number, indent + 1), key, printed, value,
                             read, block))
    return out


def match_line(rendered_line: str, lines: Sequence[ValueLine]) -> list[ValueLine]:
    """The template lines that could have printed ``rendered_line`` when they all read the
    same values (else none: which one did is not known). A line setting a flow collection
    (``{cpu: {{ .Values.cpu }}, memory: 2Gi}``) is not one: a finding there may be about a
    part the template wrote."""
    found = [v for v in lines if v.text == rendered_line.strip()
             and (v.block or v.value is not None)]
    return found if found and all(v.values == found[0].values for v in found) else []


def trace_change(path: str, before: JSON, after: JSON,
                 lines: Sequence[ValueLine]) -> tuple[SourceLocation, ...]:
    """The values-file lines a changed field's new value comes from, () when not traced: the
    template lines setting that key to exactly that value (all reading the same values), or,
    for a block scalar, its lines that are new in it."""
    if after is None or isinstance(after, dict | list):
        return ()

    def sets(key: str) -> bool:  # keys may hold dots (data.config.yaml): match the end
        return bool(key) and (path == key or path.endswith("." + key))

    if isinstance(after, str) and "\n" in after:
        now = {s.strip() for s in after.splitlines()}
        old = {s.strip() for s in before.splitlines()} if isinstance(before, str) else set()
        read: list[SourceLocation] = []
        for v in lines:
            if sets(v.block) and v.text in now and v.text not in old:
                read += [r for r in v.values if r not in read]
        return tuple(read)
    found = [v for v in lines if not v.block and sets(v.key) and same_value(v.value, after)]
    if found and all(v.values == found[0].values for v in found):
        return found[0].values
    return ()
