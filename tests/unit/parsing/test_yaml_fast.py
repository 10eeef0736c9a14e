"""A file is read first without positions (``yamlfast``) and by the position-recording walk only
when needed: both give the same values, problems, positions and budget, on every YAML text the
tests hold, on the repository's and KubeRay's manifests, and on generated and mutated texts."""

from __future__ import annotations

import ast
import json
import random
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from bench.common import Fleet
from gitray.core.model import Diagnostic, SourceLocation
from gitray.parsing import yamlsafe, yamlwalk
from gitray.parsing.yamlsafe import parse_documents
from gitray.parsing.yamlwalk import MAX_ALIAS_NODES, MAX_DEPTH, MAX_NODES, NodeBudget
from gitray.plans.load import load_snapshot
from tests.unit.plans import test_load
from tests.unit.plans.test_kuberay_samples import SAMPLES, YAML_FILES

ROOT = Path(__file__).resolve().parents[3]

Read = tuple[list[tuple[str, SourceLocation, dict[Any, SourceLocation], dict[Any, Any]]],
             list[Diagnostic], int]


@contextmanager
def walk_only() -> Iterator[None]:
    """Every file read by the position-recording walk, as before the fast path."""
    with mock.patch.object(yamlsafe, "_fast", lambda *_: None):
        yield


@contextmanager
def fast_only() -> Iterator[None]:
    """Fails if the walk reads anything."""
    def refuse(*_: object) -> None:
        raise AssertionError("the position-recording walk ran")

    with mock.patch.object(yamlsafe, "Walk", refuse):
        yield


def read(text: str, budget: int = MAX_NODES) -> Read:
    """Everything ``parse_documents`` gives, typed (``json.dumps`` tells 1 from 1.0 and True)."""
    left = NodeBudget(budget)
    documents, problems = parse_documents(text, "f.yaml", left)
    return ([(json.dumps(d.value), d.start, dict(d.locations), dict(d.literals))
             for d in documents], problems, left.left)


def same_both_ways(text: str, budget: int = MAX_NODES) -> bool:
    """Asserts the fast path and the walk agree on ``text``; whether the fast path read it."""
    fast = yamlsafe._fast(text, "f.yaml", NodeBudget(budget)) is not None
    with walk_only():
        slow = read(text, budget)
    assert read(text, budget) == slow, text
    return fast


def _test_texts() -> list[str]:
    """Every string constant with a line break in the unit tests, as written and dedented."""
    found: set[str] = set()
    for path in sorted((ROOT / "tests" / "unit").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and "\n" in node.value:
                found |= {node.value, textwrap.dedent(node.value)}
    for cases in (test_load.RULE_CASES, test_load.HOSTILE_CASES):
        for case in cases.values():
            found |= {t for t in case.files.values() if isinstance(t, str)}
    return sorted(found)


TEST_TEXTS = _test_texts()
REPO_FILES = sorted(p for p in ROOT.rglob("*.y*ml")
                    if p.suffix in {".yaml", ".yml"} and not {".git", "out", ".testenv"} &
                    set(p.relative_to(ROOT).parts)
                    # a Helm chart's templates are not YAML until helm renders them
                    and not (p.parent.name == "templates"
                             and (p.parent.parent / "Chart.yaml").is_file()))
FLEET = sorted(t for p, t in Fleet(20, frozenset({3, 7})).files().items() if p != "gitray.yaml")

# Cases each path must treat alike; "fast" says whether the fast path reads it.
EDGES: dict[str, tuple[str, bool]] = {
    "yaml 1.1 booleans stay strings": ("a: yes\nb: on\nc: No\nd: off\ne: y\n", True),
    "core booleans, nulls": ("a: true\nb: False\nc: ~\nd: null\ne:\nf: NULL\n", True),
    "numbers": ("a: 0777\nb: 0o17\nc: 0x1F\nd: 1_000\ne: 1e3\nf: .5\ng: -2\nh: +3\n", True),
    "yaml 1.1 timestamps, values and sexagesimals stay strings":
        ("a: 2001-12-14\nb: =\nc: 1:20\nd: 2001-12-14t21:59:43.10-05:00\n", True),
    "quoted scalars are strings": ("a: '1'\nb: \"true\"\nc: |\n  x\nd: >-\n  y\n", True),
    "an infinite float": ("a: .inf\n", False),
    "a huge integer": ("a: " + "9" * 70 + "\n", False),
    "a tag": ("a: !!str 1\n", False),
    "a tagged mapping": ("--- !!map\na: 1\n", False),
    "a python tag": ("a: !!python/object:os.system x\n", False),
    "a duplicate key": ("a: 1\nb: 2\na: 3\n", False),
    "a duplicate key, three times, nested": ("a: {x: 1}\na: {x: 1}\na: {x: 1}\n", False),
    "a merge": ("b: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n", True),
    "a merge of a list": ("b: &b {x: 1}\nd: &d {x: 2, z: 3}\nc: {<<: [*b, *d], w: 0}\n", True),
    "two merges in one mapping": ("c:\n  <<: {x: 1}\n  <<: {x: 2}\n", False),
    "a merge of a scalar": ("b: &b 1\nc: {<<: *b}\n", False),
    "a quoted << is a key": ("c: {'<<': 1}\n", True),
    "an alias as a key": ("a: &k key\n*k : 2\n", True),
    "an alias to a mapping as a key": ("a: &k {x: 1}\n? *k\n: 2\n", False),
    "an alias as a duplicate key": ("a: &k b\nb: 1\n*k : 2\n", False),
    "an anchor redefined": ("a: &x 1\nb: &x 2\nc: *x\n", True),
    "an anchor on a key is not kept": ("&k a: 1\nb: *k\n", False),
    "an undefined alias": ("a: *nope\n", False),
    "an alias that contains itself": ("a: &a\n  b: *a\n", False),
    "anchors do not cross documents": ("a: &x 1\n---\nb: *x\n", False),
    "a mapping as a key": ("? {a: 1}\n: 2\n", False),
    "a key starting with NUL": ('"\\0x": 1\n', False),
    "several documents, some empty": ("---\n---\na: 1\n--- ~\n---\n- 2\n...\n--- 3\n", True),
    "a root scalar": ("just text\n", True),
    "empty": ("", True),
    "a syntax error after a document": ("a: 1\n---\nb: [1\n", False),
    "a tab": ("a:\n\tb: 1\n", False),
    "a control character": ("a: \x07\n", False),
    "non-ascii": ("name: \u00e9t\u00e9 \u263a\n'\u00fc': x\n", True),
    "nested at the depth limit": ("[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n", True),
    "nested past the depth limit": ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n", False),
    "a billion laughs": (test_load.BILLION_LAUGHS, False),
    "a quadratic blow-up": (test_load.QUADRATIC_BLOWUP, False),
}


@pytest.mark.parametrize(("text", "fast"), EDGES.values(), ids=EDGES.keys())
def test_edge_cases_read_the_same(text: str, fast: bool) -> None:
    assert same_both_ways(text) is fast


def test_every_yaml_text_of_the_tests_reads_the_same() -> None:
    assert len(TEST_TEXTS) > 300
    read_fast = sum(same_both_ways(text) for text in TEST_TEXTS)
    assert read_fast > len(TEST_TEXTS) // 2  # most are valid YAML: the fast path is used


def test_the_repositorys_manifests_read_the_same_and_fast() -> None:
    assert len(REPO_FILES) >= 15
    for path in REPO_FILES:
        assert same_both_ways(path.read_text(encoding="utf-8")), path


def test_the_kuberay_samples_read_the_same_and_fast() -> None:
    assert SAMPLES is not None and len(YAML_FILES) >= 60
    for name in YAML_FILES:
        assert same_both_ways((SAMPLES / name).read_text(encoding="utf-8")), name


def test_a_valid_revision_loads_without_recording_a_position() -> None:
    snapshot = test_load.snapshot(Fleet(20, frozenset({3, 7})).files())
    with walk_only():
        slow = load_snapshot(snapshot, {})
    with fast_only():
        fast = load_snapshot(snapshot, {})
    assert not fast.diagnostics and len(fast.workloads) == 40
    assert fast == slow


def test_an_invalid_revision_loads_the_same_both_ways() -> None:
    """Problems found after reading (schema, gitray's rules) are located by the walk then."""
    for cases in (test_load.RULE_CASES, test_load.HOSTILE_CASES):
        for case in cases.values():
            snapshot = test_load.snapshot(case.files)
            with walk_only():
                slow = load_snapshot(snapshot, {})
            assert load_snapshot(snapshot, {}) == slow, case


# -- the limits, counted alike --------------------------------------------------------------

def _aliases(total: int) -> str:
    """A file whose aliases expand to exactly ``total`` nodes (a list of 10 per alias)."""
    assert total % 11 == 0
    return "a: &a [" + ",".join("x" * 10) + "]\nb: [" + ",".join(["*a"] * (total // 11)) + "]\n"


def test_aliases_up_to_the_limit_are_read_fast_and_one_more_is_refused_alike() -> None:
    limit = MAX_ALIAS_NODES - MAX_ALIAS_NODES % 11
    assert same_both_ways(_aliases(limit))
    over = _aliases(limit) + "c: [" + ",".join(["*a"] * 2) + "]\n"
    assert not same_both_ways(over)
    _, problems, _ = read(over)
    assert "aliases expand to more than 100000 nodes" in problems[0].message


_THOUSAND = "a: [" + ",".join(["1"] * 997) + "]\n"  # mapping, key, list, 997 items


@pytest.mark.parametrize(("limit", "fast"), [(1000, True), (999, False)])
def test_the_node_limit_of_a_file_is_counted_alike(monkeypatch: pytest.MonkeyPatch, limit: int,
                                                    fast: bool) -> None:
    monkeypatch.setattr(yamlsafe, "MAX_NODES", limit)  # the fast path and the walk alike
    monkeypatch.setattr(yamlwalk, "MAX_NODES", limit)
    assert same_both_ways(_THOUSAND, budget=5000) is fast
    documents, problems, left = read(_THOUSAND, budget=5000)
    assert (left, bool(documents)) == ((4000, True) if fast else (5000 - limit - 1, False))
    assert fast or problems[0].message.startswith(f"more than {limit} YAML values in one file")


@pytest.mark.parametrize(("budget", "fast"), [(1000, True), (999, False)])
def test_the_budget_of_a_revision_is_counted_alike(budget: int, fast: bool) -> None:
    assert same_both_ways(_THOUSAND, budget=budget) is fast
    _, problems, left = read(_THOUSAND, budget=budget)
    assert left == (0 if fast else -1)
    assert fast or f"hold more than {budget} YAML values in total" in problems[0].message


# -- generated and mutated texts ------------------------------------------------------------

_SCALARS = ["a", "yes", "on", "0777", "0o7", "0x1f", "1e3", ".5", "~", "null", "true", "False",
            "2001-12-14", "=", "'q'", '"d"', "1:20", ".inf", "<<", "9" * 70, "''", "x y", "-1"]


def _generated(rng: random.Random, depth: int = 0) -> str:
    """A YAML value in flow style with anchors, aliases, merges and tricky scalars."""
    choice = rng.random()
    anchor = f"&{rng.choice('ab')} " if rng.random() < 0.2 else ""
    if depth > 3 or choice < 0.45:
        if rng.random() < 0.15:
            return f"*{rng.choice('abc')}"
        return anchor + rng.choice(_SCALARS)
    if choice < 0.7:
        items = [_generated(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        return anchor + "[" + ", ".join(items) + "]"
    keys = [rng.choice(["k", "l", "m", "<<", "'<<'", "*a", "n", "1"])
            for _ in range(rng.randint(0, 4))]
    return anchor + "{" + ", ".join(f"{k}: {_generated(rng, depth + 1)}" for k in keys) + "}"


def test_generated_texts_read_the_same() -> None:
    rng = random.Random(15)
    texts = [f"x: {_generated(rng)}\ny: {_generated(rng)}\n" for _ in range(1000)]
    read_fast = sum(same_both_ways(text) for text in texts)
    assert 100 < read_fast < 900  # both paths are exercised


_TOKENS = ["&a ", "*a", "<<: ", "!!str ", "! ", "- ", ": ", "{", "}", "[", "]", ",", "yes",
           "0777", "\t", "~", "'", '"', "---\n", "\n", "  ", "#", "|\n", ">-\n", "? ", "\\0",
           "\x00", "\x85", "%YAML 1.1\n", "...\n", "=", ".nan"]


def _mutated(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(text) + 1)
        action = rng.random()
        if action < 0.4:
            text = text[:at] + rng.choice(_TOKENS) + text[at:]
        elif action < 0.7:
            text = text[:at] + text[at + rng.randint(1, 5):]
        else:
            lines = text.splitlines(keepends=True)
            if lines:
                line = rng.randrange(len(lines))
                lines.insert(line, lines[line])  # a duplicated line: often a duplicate key
            text = "".join(lines)
    return text


def test_mutated_texts_read_the_same() -> None:
    rng = random.Random(2)
    seeds = [t for t, _ in EDGES.values() if len(t) < 2000] + FLEET[:4] + [
        p.read_text(encoding="utf-8") for p in REPO_FILES[:6]]
    read_fast = sum(same_both_ways(_mutated(rng, rng.choice(seeds))) for _ in range(1000))
    assert 100 < read_fast < 900


def test_scalars_skip_the_patterns_only_when_none_could_match(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``yamlscalars`` answers "a string" from a plain scalar's first character when no null,
    boolean or number pattern can start with it: the same answer the patterns give."""
    from gitray.parsing import yamlscalars

    starts = [chr(c) for c in range(1, 128)] + ["\u00e9", "\u263a", "\uff11"]
    rests = ["", "ull", "ULL", "rue", "RUE", "alse", "1", "o7", "x1f", "inf", "nan", "e3", ".5",
             "~", "_1"]
    texts = [""] + [s + r for s in starts for r in rests]
    quick = [yamlscalars.resolve_scalar(t, None, True) for t in texts]
    monkeypatch.setattr(yamlscalars, "_TYPED_START", frozenset(starts))
    assert [yamlscalars.resolve_scalar(t, None, True) for t in texts] == quick
