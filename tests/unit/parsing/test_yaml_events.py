"""The loader reads libyaml's events directly: exactly the events ruamel.yaml's own
``YAML(typ="safe").parse`` gives (and the same errors)."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from gitray.parsing.yamlsafe import PARSER, _events

TEXTS = [
    "a: 1\nb: [x, 'y', \"z\"]\nc: {d: ~, e: true}\n",
    "---\nbase: &b {cpu: 1}\nhead: {<<: *b, mem: 2}\n...\n--- !!map\nk: !!str 3\n",
    "spec:\n  serveConfigV2: |\n    applications:\n      - name: a\n  other: >-\n    folded\n",
    "%YAML 1.2\n---\nlist:\n- 1\n- - nested\n  - 2.5e3\n",
    "emoji: \"\\u263a\"\nkey: !custom value\n",
    "",
]


def test_libyaml_is_installed() -> None:
    """ruamel.yaml.clib is a dependency (pyproject.toml): the tests below compare its events."""
    assert PARSER == "c", "ruamel.yaml.clib is not importable: pip install -e '.[test]'"


def _describe(events: list[object]) -> list[tuple[object, ...]]:
    def marks(e: object) -> tuple[int, int, int, int]:
        start, end = getattr(e, "start_mark"), getattr(e, "end_mark")  # noqa: B009
        return (start.line, start.column, end.line, end.column)

    return [(type(e).__name__, getattr(e, "value", None), getattr(e, "anchor", None),
             getattr(e, "tag", None), getattr(e, "style", None), getattr(e, "implicit", None),
             marks(e)) for e in events]


@pytest.mark.parametrize("text", TEXTS)
def test_the_same_events_as_ruamel(text: str) -> None:
    assert _describe(list(_events(text))) == _describe(list(YAML(typ="safe").parse(text)))


@pytest.mark.parametrize("text", ["a: [1, 2\n", "a: b: c\n", "x: \x07\n"])
def test_the_same_errors_as_ruamel(text: str) -> None:
    with pytest.raises(YAMLError) as ours:
        list(_events(text))
    with pytest.raises(YAMLError) as theirs:
        list(YAML(typ="safe").parse(text))
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
