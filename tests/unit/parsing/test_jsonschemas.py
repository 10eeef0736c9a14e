"""The compiled validator (jsonschema-rs) and python-jsonschema agree on what is valid.

gitray trusts the compiled one's "valid" without a second look, so it must never accept what
python-jsonschema rejects. Checked over every example workload and thousands of systematic
mutations of them: each value swapped for each wrong type, each key removed, an unknown key
added to each mapping, and the numeric edge cases (1.0, True, huge numbers).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitray.parsing.jsonschemas import _compiled, _validator
from gitray.parsing.kuberay import KUBERAY_VERSIONS

EXAMPLES = Path(__file__).resolve().parents[3] / "examples-repo"
Path_ = tuple[str | int, ...]


def examples() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        if any((d / "Chart.yaml").is_file() for d in path.parents):
            continue  # a Helm chart's templates are not YAML until helm renders them
        for doc in YAML(typ="safe").load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("apiVersion") == "ray.io/v1":
                for release in KUBERAY_VERSIONS:
                    out.append((f"kuberay-{release}/{doc['kind'].lower()}.schema.json", doc))
    return out


def paths(value: Any, here: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield here, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*here, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*here, i))


def replaced(doc: dict[str, Any], where: Path_, new: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = new
    return out


def removed(doc: dict[str, Any], where: Path_) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for step in where[:-1]:
        node = node[step]
    del node[where[-1]]
    return out


WRONG: list[Any] = ["text", 7, 1.5, 1.0, True, None, [], {}, [1], {"x": 1}, 2**70, -1]


def mutations(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, value in paths(doc):
        if not where or where[0] in ("apiVersion", "kind"):
            continue
        shown = ".".join(map(str, where))
        for new in WRONG:
            if type(new) is not type(value) or new != value:
                yield f"{shown} = {new!r}", replaced(doc, where, new)
        if isinstance(where[-1], str):
            yield f"without {shown}", removed(doc, where)
        if isinstance(value, dict):
            yield f"{shown} + unknown key", replaced(doc, where, {**value, "notAField": 1})


CASES = [(name, label, mutated) for name, doc in examples()
         for label, mutated in [("as written", doc), *mutations(doc)]]


def test_the_examples_give_the_three_kinds_and_many_cases() -> None:
    assert {name for name, _, _ in CASES} == {
        f"kuberay-{release}/{kind}.schema.json" for release in KUBERAY_VERSIONS
        for kind in ("raycluster", "rayjob", "rayservice")}
    assert len(CASES) > 2000


def test_both_validators_agree_on_every_case() -> None:
    disagree = []
    invalid = 0
    for name, label, doc in CASES:
        python_valid = not any(True for _ in _validator(name).iter_errors(doc))
        invalid += not python_valid
        if _compiled(name).is_valid(doc) != python_valid:
            disagree.append(f"{name}: {label}: python-jsonschema says "
                            f"{'valid' if python_valid else 'invalid'}")
    assert not disagree, "\n".join(disagree[:20])
    assert invalid > len(CASES) // 3  # the mutations do break the schema, mostly


@pytest.mark.parametrize("name", [f"kuberay-{release}/{kind}.schema.json"
                                  for release in KUBERAY_VERSIONS
                                  for kind in ("raycluster", "rayjob", "rayservice")])
def test_a_non_mapping_is_invalid_for_both(name: str) -> None:
    for value in ([], "x", 3, None):
        assert not _compiled(name).is_valid(value)
        assert list(_validator(name).iter_errors(value))
