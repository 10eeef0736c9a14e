"""Problems and plans where reviewers look: GitHub workflow commands, GitLab's code-quality
report (Code Climate issues) and SARIF 2.1.0 for code scanning. Pure, no I/O.

Every view renders from :class:`Finding` values: a validation error or warning (a
:class:`~gitray.core.model.Diagnostic`), or, for ``plan --format github``, a notice on the
file of a workload that would change. Paths are made relative to the Git repository's top
(``prefix`` is where ``--repo`` stands in it), because that is what the hosts annotate.

GitHub's escaping (its toolkit's ``escapeData`` / ``escapeProperty``): in the message ``%``,
CR and LF become ``%25``, ``%0D``, ``%0A``; property values also turn ``:`` into ``%3A`` and
``,`` into ``%2C``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gitray.core.model import Diagnostic, SourceLocation
from gitray.plans.plan import Plan
from gitray.plans.render import COMMENT_MARKER

__all__ = [
    "CHECKS",
    "Finding",
    "Level",
    "ReportFormat",
    "codeclimate_report",
    "escape_data",
    "escape_property",
    "findings_of",
    "github_commands",
    "plan_notices",
    "problems_markdown",
    "sarif_report",
    "workflow_command",
]

SARIF_SCHEMA = ("https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/"
                "sarif-schema-2.1.0.json")


class ReportFormat(StrEnum):
    """The reviewer-facing formats of ``gitray validate|plan --format``. Values: the wire."""

    GITHUB = "github"
    CODECLIMATE = "codeclimate"
    SARIF = "sarif"


class Level(StrEnum):
    """How serious a finding is; the values are GitHub's workflow command names."""

    ERROR = "error"  # the revision is invalid: nothing from it is applied
    WARNING = "warning"  # worth saying, never stops a revision
    NOTICE = "notice"  # information: what a plan would do to a workload


# check name (Code Climate ``check_name``, SARIF rule id) and a one-line description per level
CHECKS = {
    Level.ERROR: ("gitray/invalid-manifest",
                  "The manifest is invalid: nothing from this revision is applied."),
    Level.WARNING: ("gitray/manifest-warning",
                    "Worth fixing, but it does not stop the revision (e.g. a key Ray Serve "
                    "ignores)."),
    Level.NOTICE: ("gitray/plan", "What applying this revision would do to the workload."),
}
_SEVERITY = {Level.ERROR: "major", Level.WARNING: "minor", Level.NOTICE: "info"}


@dataclass(frozen=True, order=True)
class Finding:
    """One thing to show at a place in the repository (``location`` None: no file)."""

    level: Level
    message: str
    location: SourceLocation | None = None


def findings_of(errors: Iterable[Diagnostic], warnings: Iterable[Diagnostic]) -> list[Finding]:
    """Errors then warnings, each in their (sorted) order."""
    return ([Finding(Level.ERROR, d.message, d.location) for d in errors]
            + [Finding(Level.WARNING, d.message, d.location) for d in warnings])


def plan_notices(plan: Plan) -> list[Finding]:
    """A notice per workload the plan changes, on its manifest, then the summary."""
    out = []
    for w in plan.workloads:
        if not w.has_changes:
            continue
        n = len(w.steps)
        origin = f"; {w.origin}" if w.origin else ""  # which values files, for a Helm render
        out.append(Finding(Level.NOTICE,
                           f"{w.action.marker} {w.key.kind} {w.key.namespace}/{w.key.name}: "
                           f"{w.action.value} ({n} step{'s' if n != 1 else ''}{origin})",
                           w.source))
    return out


def _path(location: SourceLocation, prefix: str) -> str:
    top = prefix.strip("/")
    return f"{top}/{location.path}" if top and top != "." else location.path


# -- GitHub workflow commands ----------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message: ``%`` first, so an escape is never escaped twice."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message escapes plus ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(name: str, message: str, properties: Sequence[tuple[str, str]] = ()) -> str:
    """``::name key=value,key=value::message`` with GitHub's escaping."""
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def github_commands(findings: Iterable[Finding], prefix: str = "") -> str:
    """One workflow command per finding: an annotation on the file and line when it has one."""
    lines = []
    for f in findings:
        props: list[tuple[str, str]] = []
        if f.location is not None:
            props += [("file", _path(f.location, prefix)), ("line", str(f.location.line)),
                      ("col", str(f.location.col))]
        props.append(("title", "gitray plan" if f.level is Level.NOTICE else "gitray"))
        lines.append(workflow_command(f.level.value, f.message, props) + "\n")
    return "".join(lines)


# -- GitLab code quality (Code Climate issues) -------------------------------------------------


def _fingerprints(findings: Sequence[Finding], prefix: str) -> list[str]:
    """Stable across pushes that only move a problem (the line is left out); the n-th equal
    problem in a file gets its own fingerprint, so none hides another."""
    seen: dict[tuple[str, ...], int] = {}
    out = []
    for f in findings:
        path = _path(f.location, prefix) if f.location else ""
        key = (CHECKS[f.level][0], path, f.message)
        seen[key] = seen.get(key, 0) + 1
        text = "\x00".join((*key, str(seen[key])))
        out.append(hashlib.sha256(text.encode()).hexdigest()[:32])
    return out


def codeclimate_report(findings: Sequence[Finding], prefix: str = "") -> str:
    """GitLab's code-quality report: a JSON array of issues (description, check_name,
    fingerprint, severity, location.path, location.lines.begin)."""
    issues = []
    for f, fingerprint in zip(findings, _fingerprints(findings, prefix), strict=True):
        location = f.location or SourceLocation("gitray.yaml")
        issues.append({
            "type": "issue",
            "description": f.message,
            "check_name": CHECKS[f.level][0],
            "categories": ["Bug Risk"],
            "fingerprint": fingerprint,
            "severity": _SEVERITY[f.level],
            "location": {"path": _path(location, prefix), "lines": {"begin": location.line}},
        })
    return json.dumps(issues, indent=2) + "\n"


# -- SARIF 2.1.0 -------------------------------------------------------------------------------

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")


def _uri(path: str) -> str:
    """A relative URI reference for a repository path (RFC 3986 percent-encoding)."""
    return "".join(c if c in _UNRESERVED else "".join(f"%{b:02X}" for b in c.encode())
                   for c in path)


def sarif_report(findings: Sequence[Finding], version: str, prefix: str = "") -> str:
    """A SARIF 2.1.0 log with one run of gitray: one rule per level, one result per finding."""
    levels = [Level.ERROR, Level.WARNING, Level.NOTICE]
    rules = [{"id": CHECKS[lv][0], "shortDescription": {"text": CHECKS[lv][1]},
              "defaultConfiguration": {"level": "note" if lv is Level.NOTICE else lv.value}}
             for lv in levels]
    results = []
    for f, fingerprint in zip(findings, _fingerprints(findings, prefix), strict=True):
        result: dict[str, object] = {
            "ruleId": CHECKS[f.level][0], "ruleIndex": levels.index(f.level),
            "level": "note" if f.level is Level.NOTICE else f.level.value,
            "message": {"text": f.message},
            "partialFingerprints": {"gitrayFinding/v1": fingerprint},
        }
        if f.location is not None:
            result["locations"] = [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(_path(f.location, prefix)),
                                     "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": f.location.line, "startColumn": f.location.col}}}]
        results.append(result)
    log = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "gitray", "version": version, "rules": rules}},
        "columnKind": "unicodeCodePoints",
        "results": results,
    }]}
    return json.dumps(log, indent=2) + "\n"


# -- a PR comment for an invalid revision ------------------------------------------------------


def problems_markdown(errors: Sequence[Diagnostic], label: str, prefix: str = "") -> str:
    """The PR comment when a revision is invalid: no plan, every problem as ``path:line:col``."""
    n = len(errors)
    out = [COMMENT_MARKER, f"### gitray: {label} is invalid", "",
           f"**{n} problem{'s' if n != 1 else ''} found; nothing from this revision would be "
           "applied.**", "", "```text"]
    out += [f"{_path(d.location, prefix)}:{d.location.line}:{d.location.col}: "
            f"{d.message.replace('```', '` ` `')}" for d in errors]
    out += ["```", ""]
    return "\n".join(out)
