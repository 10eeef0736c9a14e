"""Server-side dry-run of a plan: every object gitray would create or change is sent to the API
server with ``dryRun=All`` (server-side apply) before anything is changed, so admission
(validating webhooks, ValidatingAdmissionPolicies, ResourceQuota object counts, ...) speaks
during ``plan`` against live and before ``apply``/``sync``. I/O; nothing is stored.

A refusal is a plan error at the workload's place in Git:
``path:line:col: the API server would refuse: RayCluster ns/name: <the server's message>``,
with any sensitive value of the revision blanked out of the message. Credentials that may not
write (a read-only CI identity: RBAC says "cannot patch resource") skip the dry-run with a note,
never pass it silently; an object kind the API server does not serve is the prerequisites
check's business (``gitray.plans.prerequisites``), not a refusal here.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from gitray.core.errors import ForbiddenError, InvalidError, NotFoundError
from gitray.core.model import Diagnostic, ObjectKey, SourceLocation
from gitray.k8s.client import Kube
from gitray.plans.plan import Plan, WorkloadPlan
from gitray.plans.sensitive import SensitiveValues, UnknownSensitiveValue
from gitray.plans.steptypes import STEP_KINDS

__all__ = ["DRY_RUN_STEPS", "dry_run", "dry_run_objects"]

# the steps whose params hold a whole object gitray creates or server-side applies
DRY_RUN_STEPS = frozenset(t for t, kind in STEP_KINDS.items() if kind.dry_run)
_RBAC = re.compile(r"\bcannot [a-z]+ resource\b")
_BLANK = "(sensitive value)"


def _where(wp: WorkloadPlan) -> SourceLocation:
    return wp.source or SourceLocation(f"{wp.key.namespace}/{wp.key.kind}/{wp.key.name}")


def _scrub(text: str, sensitive: SensitiveValues) -> str:
    for value in sensitive.values.values():
        if isinstance(value, str) and len(value) >= 4:
            text = text.replace(value, _BLANK)
    return text


DryRunObject = tuple[WorkloadPlan, Mapping[str, Any], str]


def dry_run_objects(plan: Plan, sensitive: SensitiveValues,
                    skip: Collection[ObjectKey] = ()) -> Iterator[DryRunObject]:
    """(workload, object, "Kind ns/name") of each object ``plan`` would create or apply, but
    for the workloads of ``skip`` (runs going on: their steps are not started from this plan,
    and a pass every few seconds must not send their objects again each time). Pure."""
    for wp in plan.workloads:
        if wp.key in skip:
            continue
        for step in wp.steps:
            if step.type not in DRY_RUN_STEPS:
                continue
            try:
                manifest = sensitive.reveal(step).params.get("manifest")
            except UnknownSensitiveValue:
                continue  # a saved plan of another revision: refused as stale elsewhere
            if not isinstance(manifest, Mapping):
                continue
            meta = manifest.get("metadata") or {}
            yield wp, manifest, (f"{manifest.get('kind')} {meta.get('namespace')}/"
                                 f"{meta.get('name')}")


def dry_run(kube: Kube, plan: Plan, sensitive: SensitiveValues,
            skip: Collection[ObjectKey] = ()) -> tuple[list[Diagnostic], list[str]]:
    """(refusals as plan errors, notes) of a server-side dry-run of ``plan``'s objects (but
    for the workloads of ``skip``: ``dry_run_objects``)."""
    refused: list[Diagnostic] = []
    for wp, body, what in dry_run_objects(plan, sensitive, skip):
        try:
            kube.apply(body, dry_run=True)
        except NotFoundError:
            continue  # the kind is not served: the prerequisites check says so
        except ForbiddenError as e:
            message = _scrub(_server_message(str(e), what), sensitive)
            if _RBAC.search(message):
                return refused, [f"server-side dry-run not done (these credentials may "
                                 f"not write): {message}"]
            refused.append(Diagnostic(_where(wp),
                                      f"the API server would refuse: {what}: {message}"))
        except InvalidError as e:
            message = _scrub(_server_message(str(e), what), sensitive)
            refused.append(Diagnostic(_where(wp),
                                      f"the API server would refuse: {what}: {message}"))
    return refused, []


def _server_message(text: str, what: str) -> str:
    """The API server's message without the client's ``applying <what>: `` prefix."""
    prefix = f"applying {what}: "
    return text[len(prefix):] if text.startswith(prefix) else text
