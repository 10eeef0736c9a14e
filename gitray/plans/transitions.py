"""The CRDs' transition rules (CEL rules reading ``oldSelf``) against the live objects an apply
would update. Pure, no I/O.

The API server runs a transition rule only on update, with ``oldSelf`` the stored object's
value at the rule's path. gitray updates in place the objects it applies under the workload's
own name (a RayCluster, a RayCronJob); a RayService's clusters and a RayJob's runs get new
names when their spec changes, so their updates never change what these rules guard. Offline
(``gitray validate``, ``plan --against empty``) there is no stored object: the rules are left
to apply time, and the load says so (``gitray.plans.load``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gitray.core.model import Diagnostic, LiveObject, ObjectKey, SourceLocation, Workload
from gitray.core.snapshot import Snapshot
from gitray.parsing.cel import rule_findings
from gitray.parsing.kuberay import KubeRaySchemas
from gitray.parsing.text import JsonPath, decode_text, format_path
from gitray.parsing.yamlsafe import parse_documents

__all__ = ["transition_problems"]


def transition_problems(desired: Mapping[ObjectKey, Workload], live: Iterable[LiveObject],
                        kuberay: KubeRaySchemas, snapshot: Snapshot | None = None
                        ) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(problems, warnings): the transition rules each update of a live object breaks, and
    those gitray could not evaluate. Reported at the field in ``snapshot`` (the revision the
    workloads were loaded from), else at the workload's document."""
    problems: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    for obj in live:
        workload = desired.get(obj.key)
        if workload is None or not workload.is_ray:
            continue
        rules = [r for r in kuberay.rules.get(obj.kind, ()) if r.transition]
        for finding in rule_findings(rules, workload.manifest, obj.body):
            where = format_path(finding.path)
            if finding.evaluated:
                at = _locate(snapshot, workload.source, finding.path)
                problems.append(Diagnostic(at, (
                    f"{where}: {finding.message} (updating the live {obj.kind} "
                    f"{obj.namespace}/{obj.name}, which has {_value(obj.body, finding.path)})")))
            else:
                warnings.append(Diagnostic(workload.source, (
                    f"CEL rule not evaluated by gitray: {obj.kind} {where}: "
                    f"{finding.rule.rule!r} ({finding.message})")))
    return problems, warnings


def _locate(snapshot: Snapshot | None, start: SourceLocation, path: JsonPath
            ) -> SourceLocation:
    """Where ``path`` is written in the document starting at ``start`` (parsed again: this
    runs only for an update that is refused)."""
    found = next((f for f in snapshot.files if f.path == start.path), None) if snapshot else None
    text = decode_text(found.data, found.path)[0] if found and found.data else None
    if text is None:
        return start
    documents, _ = parse_documents(text, start.path)
    document = next((d for d in documents if d.start == start), None)
    return document.locate(path) if document is not None else start


def _value(body: Mapping[str, object], path: tuple[str | int, ...]) -> str:
    value: object = body
    for part in path:
        if isinstance(value, Mapping):
            value = value.get(str(part))
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return "no value there"
    return repr(value)
