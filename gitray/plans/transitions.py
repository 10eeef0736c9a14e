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

from gitray.core.model import Diagnostic, LiveObject, ObjectKey, Workload
from gitray.parsing.cel import rule_findings
from gitray.parsing.kuberay import KubeRaySchemas
from gitray.parsing.text import format_path

__all__ = ["transition_problems"]


def transition_problems(desired: Mapping[ObjectKey, Workload], live: Iterable[LiveObject],
                        kuberay: KubeRaySchemas) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(problems, warnings): the transition rules each update of a live object breaks, and
    those gitray could not evaluate. Reported at the workload's document."""
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
                problems.append(Diagnostic(workload.source, (
                    f"{where}: {finding.message} (updating the live {obj.kind} "
                    f"{obj.namespace}/{obj.name}, which has {_value(obj.body, finding.path)})")))
            else:
                warnings.append(Diagnostic(workload.source, (
                    f"CEL rule not evaluated by gitray: {obj.kind} {where}: "
                    f"{finding.rule.rule!r} ({finding.message})")))
    return problems, warnings


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
