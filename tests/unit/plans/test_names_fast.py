"""The cluster hashes and the Serve config reader give what they gave before they stopped
deep-copying and re-parsing (the earlier implementations are kept here as the reference)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from gitray.core.model import stable_hash
from gitray.parsing.yamlsafe import parse_documents
from gitray.plans import names
from gitray.plans.names import (
    blank_autoscaler_fields,
    cluster_hash,
    cluster_spec_hash,
    parse_serve_config,
    remember_serve_config,
)
from testenv.manifests import cluster_spec, serve_config


def _old_blank(cluster: Mapping[str, Any], *, bounds: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = copy.deepcopy(dict(cluster))
    spec.pop("suspend", None)
    for group in spec.get("workerGroupSpecs") or []:
        if not isinstance(group, dict):
            continue
        group.pop("replicas", None)
        group.pop("suspend", None)
        if bounds:
            group.pop("minReplicas", None)
            group.pop("maxReplicas", None)
        strategy = group.get("scaleStrategy")
        if isinstance(strategy, dict):
            strategy.pop("workersToDelete", None)
            if not strategy:
                group.pop("scaleStrategy")
    return spec


def _old_spec_hash(cluster: Mapping[str, Any]) -> str:
    if cluster.get("enableInTreeAutoscaling") is True:
        return stable_hash(_old_blank(cluster, bounds=False))
    spec = copy.deepcopy(dict(cluster))
    for group in spec.get("workerGroupSpecs") or []:
        if isinstance(group, dict) and isinstance(group.get("scaleStrategy"), dict):
            group["scaleStrategy"].pop("workersToDelete", None)
    return stable_hash(spec)


def _specs() -> list[dict[str, Any]]:
    plain = cluster_spec(realistic=True, suspend=True)
    auto = cluster_spec(autoscaling=True, replicas=2)
    deleting = cluster_spec(replicas=3)
    deleting["workerGroupSpecs"][0]["scaleStrategy"] = {"workersToDelete": ["w-1"]}
    mixed = cluster_spec(autoscaling=True)
    mixed["workerGroupSpecs"] += [
        {**copy.deepcopy(mixed["workerGroupSpecs"][0]), "groupName": "gpu", "suspend": True,
         "scaleStrategy": {"workersToDelete": [], "other": 1}},
        {**copy.deepcopy(mixed["workerGroupSpecs"][0]), "groupName": "empty",
         "scaleStrategy": {}},
        "not a group",
    ]
    return [plain, auto, deleting, mixed, {"headGroupSpec": {}}, {"workerGroupSpecs": None},
            {"workerGroupSpecs": "odd"}]


@pytest.mark.parametrize("spec", _specs())
def test_hashes_and_blanked_specs_are_unchanged(spec: dict[str, Any]) -> None:
    before = copy.deepcopy(spec)
    for bounds in (True, False):
        assert blank_autoscaler_fields(spec, bounds=bounds) == _old_blank(spec, bounds=bounds)
    assert cluster_hash(spec) == stable_hash(_old_blank(spec))
    assert cluster_spec_hash(spec) == _old_spec_hash(spec)
    assert spec == before  # the input is never changed


def test_a_serve_config_the_loader_read_is_not_parsed_again() -> None:
    text = serve_config(("greeter", "/greet"), ("calc", "/calc", "calc:app"))
    (document,), problems = parse_documents(text, "x.yaml")
    assert not problems
    remember_serve_config(text, document.value)
    first, second = parse_serve_config(text), parse_serve_config(text)
    assert first == second == document.value
    assert first is not second and first is not document.value  # callers get their own
    fresh = names._ServeConfigMemo(10)
    assert fresh.get(text) is None
    fresh.put(text, document.value)  # over the bound: the memo starts again, still bounded
    assert fresh.get(text) == document.value and len(fresh._known) == 1


def test_a_serve_config_never_recorded_is_parsed() -> None:
    text = serve_config(("other", "/other"))
    (document,), _ = parse_documents(text, "y.yaml")
    assert parse_serve_config(text) == document.value
    assert parse_serve_config("applications: [unclosed\n") == {}
