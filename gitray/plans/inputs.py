"""What a Ray workload's pods use from ConfigMaps and Secrets of the same revision. Pure.

A RayJob's code often lives in a ConfigMap its head mounts (KubeRay's own samples); a run is
"this spec with this code". So the ConfigMaps and Secrets a Ray workload's pod templates mount
(``volumes`` configMap/secret, ``projected`` sources) or reference (``envFrom``, ``env``
``valueFrom`` configMapKeyRef/secretKeyRef), when the same revision defines them in the same
namespace, become part of its spec: :func:`with_inputs` writes a digest of each one's content
into the annotation ``gitray.io/inputs`` of the head pod template (and of a RayJob's
``submitterPodTemplate``). Everything keyed on the spec then follows by itself:

- a RayJob whose script changed is a new run (its name hashes the spec);
- a RayService whose mounted ConfigMap changed gets a new cluster (blue-green);
- a RayCluster's pod template changed (recreated under ``upgradeStrategy: Recreate``).

:func:`changed_inputs` names what changed, for the plan to say why; the digests themselves are
never shown. Objects the revision does not define (created outside gitray) are not followed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gitray.core.model import JSON, Kind, Workload, json_copy, stable_hash
from gitray.plans.plan import WorkloadPlan
from gitray.plans.raycluster import secret_as_stored

__all__ = ["ANN_INPUTS", "changed_inputs", "explain_inputs", "input_digests", "inputs_annotation",
           "inputs_of", "references", "used", "with_inputs"]

ANN_INPUTS = "gitray.io/inputs"
_DIGEST = 12
_KINDS = ("ConfigMap", "Secret")


def _name(value: object, key: str = "name") -> str | None:
    name = value.get(key) if isinstance(value, Mapping) else None
    return name if isinstance(name, str) and name else None


def _volume(volume: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    if (name := _name(volume.get("configMap"))) is not None:
        yield "ConfigMap", name
    if (name := _name(volume.get("secret"), "secretName")) is not None:
        yield "Secret", name
    projected = volume.get("projected")
    sources = projected.get("sources") if isinstance(projected, Mapping) else None
    for source in sources if isinstance(sources, list) else []:
        if isinstance(source, Mapping):
            if (name := _name(source.get("configMap"))) is not None:
                yield "ConfigMap", name
            if (name := _name(source.get("secret"))) is not None:
                yield "Secret", name


def _walk(value: object) -> Iterator[tuple[str, str]]:
    if isinstance(value, list):
        for item in value:
            yield from _walk(item)
        return
    if not isinstance(value, Mapping):
        return
    for key, item in value.items():
        if key == "volumes" and isinstance(item, list):
            for volume in item:
                if isinstance(volume, Mapping):
                    yield from _volume(volume)
        elif key == "envFrom" and isinstance(item, list):
            for source in item:
                if isinstance(source, Mapping):
                    if (name := _name(source.get("configMapRef"))) is not None:
                        yield "ConfigMap", name
                    if (name := _name(source.get("secretRef"))) is not None:
                        yield "Secret", name
        elif key == "valueFrom" and isinstance(item, Mapping):
            if (name := _name(item.get("configMapKeyRef"))) is not None:
                yield "ConfigMap", name
            if (name := _name(item.get("secretKeyRef"))) is not None:
                yield "Secret", name
        else:
            yield from _walk(item)


def references(spec: Mapping[str, JSON]) -> frozenset[tuple[str, str]]:
    """(kind, name) of every ConfigMap and Secret ``spec``'s pod templates use."""
    return frozenset(_walk(spec))


def _content_digest(manifest: Mapping[str, JSON]) -> str:
    if manifest.get("kind") == "Secret":
        content: Mapping[str, Any] = secret_as_stored(manifest)
        content = {"data": content.get("data") or {}}
    else:
        content = {k: manifest.get(k) or {} for k in ("data", "binaryData")}
    return stable_hash(content, _DIGEST)


def input_digests(workload: Workload, objects: Mapping[tuple[str, str], Workload]
                  ) -> dict[str, str]:
    """``"<Kind>/<name>" -> content digest`` of what ``workload`` uses among ``objects``
    (the same revision's ConfigMaps and Secrets of its namespace, by (kind, name))."""
    spec = workload.spec
    return {f"{kind}/{name}": _content_digest(objects[(kind, name)].manifest)
            for kind, name in sorted(references(spec)) if (kind, name) in objects}


def _encode(digests: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(digests.items()))


def inputs_of(annotation: str) -> dict[str, str]:
    """The ``"<Kind>/<name>" -> digest`` map written in a ``gitray.io/inputs`` annotation."""
    pairs = (item.partition("=") for item in annotation.split(",") if item)
    return {k: v for k, _, v in pairs}


def _annotate(template: Any, value: str) -> None:
    if not isinstance(template, dict):
        return
    meta = template.setdefault("metadata", {})
    if isinstance(meta, dict):
        annotations = meta.setdefault("annotations", {})
        if isinstance(annotations, dict):
            annotations[ANN_INPUTS] = value


def _cluster_spec(kind: str, spec: dict[str, Any]) -> Any:
    if kind == Kind.RAY_SERVICE.value:
        return spec.get("rayClusterConfig")
    if kind == Kind.RAY_JOB.value:
        return spec.get("rayClusterSpec")
    if kind == Kind.RAY_CLUSTER.value:
        return spec
    return None


def _with(workload: Workload, digests: Mapping[str, str]) -> Workload:
    manifest = json_copy(dict(workload.manifest))
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        return workload
    value = _encode(digests)
    cluster = _cluster_spec(workload.key.kind, spec)
    if isinstance(cluster, dict):
        _annotate(cluster.get("headGroupSpec", {}).get("template"), value)
    if workload.key.kind == Kind.RAY_JOB.value and isinstance(
            spec.get("submitterPodTemplate"), dict):
        _annotate(spec["submitterPodTemplate"], value)
    return replace(workload, manifest=manifest)


def with_inputs(workloads: Sequence[Workload]) -> tuple[Workload, ...]:
    """``workloads`` with each Ray workload's input digests in its pod templates (the others,
    and Ray workloads that use nothing the revision defines, unchanged)."""
    objects: dict[str, dict[tuple[str, str], Workload]] = {}
    for w in workloads:
        if w.key.kind in _KINDS:
            objects.setdefault(w.key.namespace, {})[(w.key.kind, w.key.name)] = w
    ray = {Kind.RAY_SERVICE.value, Kind.RAY_JOB.value, Kind.RAY_CLUSTER.value}

    def one(w: Workload) -> Workload:
        in_ns = objects.get(w.key.namespace)
        digests = input_digests(w, in_ns) if in_ns and w.key.kind in ray else {}
        return _with(w, digests) if digests else w

    return tuple(one(w) for w in workloads)


def changed_inputs(before: str, after: str) -> list[str]:
    """What changed between two ``gitray.io/inputs`` annotations, e.g.
    ``["ConfigMap pi-estimate-code"]`` (never the digests)."""
    old, new = inputs_of(before), inputs_of(after)
    keys: Iterable[str] = sorted(set(old) | set(new))
    return [k.replace("/", " ", 1) for k in keys if old.get(k) != new.get(k)]


def inputs_annotation(kind: str, spec: Mapping[str, JSON]) -> str:
    """The ``gitray.io/inputs`` annotation of a (desired or live) spec's head template."""
    cluster = _cluster_spec(kind, dict(spec))
    head = cluster.get("headGroupSpec") if isinstance(cluster, Mapping) else None
    template = head.get("template") if isinstance(head, Mapping) else None
    if not isinstance(template, Mapping) and kind == Kind.RAY_JOB.value:
        template = spec.get("submitterPodTemplate")
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    value = annotations.get(ANN_INPUTS) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) else ""


def used(names: Sequence[str]) -> str:
    """``ConfigMap a, which its pods use,`` / ``ConfigMap a and Secret b, which its pods use,``."""
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"{listed}, which its pods use,"


def explain_inputs(wp: WorkloadPlan) -> WorkloadPlan:
    """``wp`` with each field change of a ``gitray.io/inputs`` annotation replaced by a note
    naming the ConfigMaps/Secrets that changed (their digests are not shown)."""
    suffix = f"annotations.{ANN_INPUTS}"
    changed = [c for c in wp.changes if c.path.endswith(suffix)]
    if not changed:
        return wp
    names = sorted({n for c in changed
                    for n in changed_inputs(str(c.before or ""), str(c.after or ""))})
    keep = tuple(c for c in wp.changes if not c.path.endswith(suffix))
    notes = wp.notes + ((f"the cluster changes because {used(names)} changed",) if names else ())
    return replace(wp, changes=keep, notes=notes)
