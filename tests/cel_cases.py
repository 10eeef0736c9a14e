"""Manifests that break each CEL rule (``x-kubernetes-validations``) of the KubeRay v1.7.0
CRDs, and the valid ones they are made from. Shared by the unit tests (gitray refuses them)
and the integration test (a real API server serving the v1.7.0 CRDs refuses them too).

The rules are read from the generated ``cel-rules.json``; a rule without a way to break it
here fails the tests (``break_value`` raises), so a new rule cannot go untested.
"""

from __future__ import annotations

import copy
from typing import Any

from gitray.parsing.crdschema import EACH, CelRule
from gitray.parsing.kuberay import packaged
from testenv.manifests import cluster_spec, serve_config

__all__ = ["BREAKS", "RELEASE", "base_manifest", "breaking_manifest", "checked_rules",
           "transition_rules"]

RELEASE = "v1.7.0"
_ENTRYPOINT = "python -c 'print(1)'"

# rule text -> a value for the rule's node that breaks it (and passes the JSON Schema)
BREAKS: dict[str, Any] = {
    "self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']":
        "example.com/my-operator",
    "!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))": {
        "onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteCluster"},
        "deletionRules": [{"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}]},
    "((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))": {
        "onSuccess": {"policy": "DeleteCluster"}},
    "!(has(self.jobStatus) && has(self.jobDeploymentStatus))": {
        "jobStatus": "FAILED", "jobDeploymentStatus": "Failed"},
    "has(self.jobStatus) || has(self.jobDeploymentStatus)": {"ttlSeconds": 30},
}
# what a new list item needs besides the node under test
_ITEM: dict[str, dict[str, Any]] = {"deletionRules": {"policy": "DeleteCluster"}}


def base_manifest(kind: str, name: str, namespace: str = "ray") -> dict[str, Any]:
    """A small valid manifest of ``kind``."""
    spec: dict[str, Any]
    if kind == "RayCluster":
        spec = cluster_spec()
    elif kind == "RayJob":
        spec = {"entrypoint": _ENTRYPOINT, "rayClusterSpec": cluster_spec()}
    elif kind == "RayService":
        spec = {"serveConfigV2": serve_config(("greeter", "/")), "rayClusterConfig": cluster_spec()}
    elif kind == "RayCronJob":
        spec = {"schedule": "*/5 * * * *",
                "jobTemplate": {"entrypoint": _ENTRYPOINT, "rayClusterSpec": cluster_spec()}}
    else:
        raise ValueError(kind)
    return {"apiVersion": "ray.io/v1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def checked_rules() -> list[tuple[str, CelRule]]:
    """(kind, rule) for every rule of the release that applies on create."""
    rules = packaged(RELEASE).rules
    return [(kind, r) for kind in sorted(rules) for r in rules[kind] if not r.transition]


def transition_rules() -> list[tuple[str, CelRule]]:
    rules = packaged(RELEASE).rules
    return [(kind, r) for kind in sorted(rules) for r in rules[kind] if r.transition]


def set_at(manifest: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``manifest`` with ``value`` at the rule path (EACH: a one-item list)."""
    out = copy.deepcopy(manifest)
    node: Any = out
    for i, part in enumerate(path[:-1]):
        after = path[i + 1]
        if part == EACH:
            continue
        if after == EACH:
            item = copy.deepcopy(_ITEM.get(part, {}))
            node[part] = [item]
            node = item
            continue
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return out


def breaking_manifest(kind: str, rule: CelRule, name: str,
                      namespace: str = "ray") -> dict[str, Any]:
    if rule.rule not in BREAKS:
        raise KeyError(f"no way to break {kind} {'.'.join(rule.path)}: {rule.rule!r}; "
                       "add it to tests/cel_cases.py BREAKS")
    return set_at(base_manifest(kind, name, namespace), rule.path, BREAKS[rule.rule])
