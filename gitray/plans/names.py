"""Names and hashes gitray derives from specs. Pure, no I/O.

Deterministic names make steps idempotent: the cluster for a RayService spec is always
``<service>-<hash>``, so repeating ``create-cluster`` after a crash finds the one it made.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from gitray.core.model import JSON, stable_hash
from gitray.parsing.yamlsafe import parse_documents

__all__ = [
    "NAME_HASH_LENGTH",
    "UPGRADE_RECREATE",
    "autoscaling_enabled",
    "blank_autoscaler_fields",
    "cluster_hash",
    "cluster_spec_hash",
    "head_service_name",
    "job_run_name",
    "object_spec_hash",
    "parse_serve_config",
    "recreates_pods",
    "remember_serve_config",
    "serve_config_hash",
    "serve_service_name",
    "service_cluster_name",
    "template_hash",
    "template_view",
]

NAME_HASH_LENGTH = 5  # <service(<=47)>-<5> <= 53 chars, so "<cluster>-serve-svc" fits 63


def autoscaling_enabled(cluster_spec: Mapping[str, JSON]) -> bool:
    return cluster_spec.get("enableInTreeAutoscaling") is True


def _without(cluster_spec: Mapping[str, JSON], top: tuple[str, ...],
             group_keys: tuple[str, ...], *, drop_empty_strategy: bool) -> dict[str, Any]:
    """``cluster_spec`` without ``top`` keys, ``group_keys`` of each worker group and
    ``scaleStrategy.workersToDelete`` (with ``drop_empty_strategy``, a scaleStrategy left
    empty goes too).

    Only the mappings on the way to a removed key are copied; the rest is shared with
    ``cluster_spec`` (read-only, as every mapping held by a workload or live object is):
    a deep copy of the whole spec was most of the time spent hashing it.
    """
    spec = dict(cluster_spec)
    for key in top:
        spec.pop(key, None)
    groups = spec.get("workerGroupSpecs")
    if isinstance(groups, list):
        spec["workerGroupSpecs"] = [
            _group_without(g, group_keys, drop_empty_strategy) if isinstance(g, Mapping) else g
            for g in groups]
    return spec


def _group_without(group: Mapping[str, Any], keys: tuple[str, ...],
                   drop_empty_strategy: bool) -> dict[str, Any]:
    out = dict(group)
    for key in keys:
        out.pop(key, None)
    strategy = out.get("scaleStrategy")
    if isinstance(strategy, Mapping):
        strategy = {k: v for k, v in strategy.items() if k != "workersToDelete"}
        if strategy or not drop_empty_strategy:
            out["scaleStrategy"] = strategy
        else:
            out.pop("scaleStrategy")
    return out


def blank_autoscaler_fields(
    cluster_spec: Mapping[str, JSON], *, bounds: bool = True
) -> dict[str, Any]:
    """A RayCluster spec without the fields the autoscaler (or scaling) owns (sharing the
    rest with ``cluster_spec``: read it, never change it).

    ``bounds`` also blanks min/maxReplicas: a change to them alone updates in place rather
    than building a new cluster (as KubeRay's hash-without-replicas does).
    """
    group_keys = ("replicas", "suspend", "minReplicas", "maxReplicas") if bounds \
        else ("replicas", "suspend")
    return _without(cluster_spec, ("suspend",), group_keys, drop_empty_strategy=True)


def cluster_hash(cluster_spec: Mapping[str, JSON]) -> str:
    """Identity of a RayService cluster: changes to it need a new cluster (blue-green)."""
    return stable_hash(blank_autoscaler_fields(cluster_spec))


def cluster_spec_hash(cluster_spec: Mapping[str, JSON]) -> str:
    """What gitray last applied to a cluster; replicas left out when the autoscaler owns them."""
    if autoscaling_enabled(cluster_spec):
        return stable_hash(blank_autoscaler_fields(cluster_spec, bounds=False))
    return stable_hash(_without(cluster_spec, (), (), drop_empty_strategy=False))


UPGRADE_RECREATE = "Recreate"


def recreates_pods(spec: Mapping[str, Any]) -> bool:
    """``spec.upgradeStrategy.type: Recreate``: KubeRay recreates every pod of the cluster
    when its pod-template hash changes."""
    strategy = spec.get("upgradeStrategy")
    return isinstance(strategy, Mapping) and strategy.get("type") == UPGRADE_RECREATE


def _muted(template: Any) -> Any:
    if not isinstance(template, Mapping):
        return template
    pod = dict(template.get("spec") or {})
    pod.pop("tolerations", None)
    pod.pop("schedulingGates", None)
    return {**template, "spec": pod}


def template_view(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What KubeRay's Recreate upgrade hashes (GenerateHashWithoutReplicasAndWorkersToDelete):
    the spec without worker replicas, min/maxReplicas, workersToDelete, the templates'
    tolerations and schedulingGates, and upgradeStrategy."""
    view = blank_autoscaler_fields(spec)
    view.pop("upgradeStrategy", None)
    head = view.get("headGroupSpec")
    if isinstance(head, Mapping):
        view["headGroupSpec"] = {**head, "template": _muted(head.get("template"))}
    view["workerGroupSpecs"] = [
        {**g, "template": _muted(g.get("template"))} if isinstance(g, Mapping) else g
        for g in view.get("workerGroupSpecs") or []]
    # suspend is no template field, but blank_autoscaler_fields left it out already
    return view


def template_hash(spec: Mapping[str, Any]) -> str:
    return stable_hash(template_view(spec))


def object_spec_hash(manifest: Mapping[str, JSON]) -> str:
    """Hash of a manifest's content: everything but metadata/status, plus labels/annotations."""
    meta = manifest.get("metadata") or {}
    body = {k: v for k, v in manifest.items() if k not in {"metadata", "status"}}
    body["metadata"] = {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
    }
    return stable_hash(body)


def service_cluster_name(service: str, cluster_spec: Mapping[str, JSON]) -> str:
    return f"{service}-{cluster_hash(cluster_spec)[:NAME_HASH_LENGTH]}"


def head_service_name(service: str) -> str:
    return f"{service}-head-svc"


def serve_service_name(service: str) -> str:
    return f"{service}-serve-svc"


def job_run_name(job: str, job_spec: Mapping[str, JSON]) -> str:
    return f"{job}-{stable_hash(job_spec)[:NAME_HASH_LENGTH]}"


class _ServeConfigMemo:
    """serveConfigV2 text (by its SHA-256) -> the JSON of what it parses to, for texts the
    loader validated: planning then needs no second YAML parse of each. A memo of a pure
    function, bounded by size (dropped whole when full)."""

    def __init__(self, max_chars: int) -> None:
        self._known: dict[bytes, str] = {}
        self._chars = 0
        self._max = max_chars

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()

    def put(self, text: str, config: Mapping[str, JSON]) -> None:
        encoded = json.dumps(config)
        if self._chars + len(encoded) > self._max:
            self._known, self._chars = {}, 0
        self._known[self._key(text)] = encoded
        self._chars += len(encoded)

    def get(self, text: str) -> dict[str, Any] | None:
        known = self._known.get(self._key(text))
        if known is None:
            return None
        value: dict[str, Any] = json.loads(known)  # a new value on every call
        return value


_SERVE_CONFIGS = _ServeConfigMemo(8_000_000)


def remember_serve_config(text: str, config: Mapping[str, JSON]) -> None:
    """Record what ``text`` parsed to (the loader did, with its own diagnostics)."""
    _SERVE_CONFIGS.put(text, config)


def parse_serve_config(text: str) -> dict[str, Any]:
    """``serveConfigV2`` (YAML text, already validated by the loader) as JSON-safe data.

    Read with the loader's own parser (same YAML 1.2 core scalars, same limits), so what is
    deployed is exactly what was validated; a text the loader recorded is not parsed again.
    Each call returns a new value.
    """
    known = _SERVE_CONFIGS.get(text)
    if known is not None:
        return known
    documents, problems = parse_documents(text, "spec.serveConfigV2")
    if problems or not documents or not isinstance(documents[0].value, dict):
        return {}
    return documents[0].value


def serve_config_hash(serve_config: Mapping[str, JSON]) -> str:
    return stable_hash(serve_config, 16)
