"""``--format github|codeclimate|sarif``: validation problems and plans where reviewers look.

I/O: prints to stdout/stderr, and looks for the enclosing ``.git`` on disk to make paths
relative to the repository's top. The views themselves are pure
(:mod:`gitray.plans.annotations`).

- ``github``: workflow commands on stdout (``::error file=...,line=...,col=...::message``),
  the plan's text in a collapsed group, a notice per changed workload.
- ``codeclimate`` / ``sarif``: one JSON document on stdout (errors and warnings); the plan's
  text goes to stderr, so ``> report.json`` keeps the report clean.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gitray import __version__
from gitray.core.errors import ValidationError
from gitray.core.model import Diagnostic
from gitray.core.snapshot import Snapshot
from gitray.plans.annotations import (
    Finding,
    ReportFormat,
    codeclimate_report,
    findings_of,
    github_commands,
    plan_notices,
    sarif_report,
    workflow_command,
)
from gitray.plans.load import LoadResult
from gitray.plans.plan import Plan
from gitray.plans.render import Format, render

__all__ = ["git_prefix", "live_problems", "print_findings", "print_plan", "refusals_reported",
           "report_text"]


def git_prefix(repo: str) -> str:
    """Where the directory ``repo`` stands in its Git working tree ("" at the top, for a URL,
    or outside any repository): annotations name files from the repository's top."""
    if "://" in repo or not Path(repo).is_dir():
        return ""
    here = Path(repo).resolve()
    for top in (here, *here.parents):
        if (top / ".git").exists():
            relative = here.relative_to(top).as_posix()
            return "" if relative == "." else relative
    return ""


def report_text(fmt: ReportFormat, findings: Sequence[Finding], prefix: str) -> str:
    if fmt is ReportFormat.GITHUB:
        return github_commands(findings, prefix)
    if fmt is ReportFormat.CODECLIMATE:
        return codeclimate_report(findings, prefix)
    return sarif_report(findings, __version__, prefix)


def print_findings(fmt: str, errors: Sequence[Diagnostic], warnings: Sequence[Diagnostic],
                   repo: str) -> None:
    """Errors and warnings of a revision, in ``fmt``, on stdout."""
    findings = findings_of(errors, warnings)
    sys.stdout.write(report_text(ReportFormat(fmt), findings, git_prefix(repo)))
    sys.stdout.flush()


def print_plan(fmt: str, plan: Plan, repo: str) -> None:
    """A valid plan: in GitHub's log, its text folded in a group (workflow commands stopped
    while it prints: values from Git could otherwise pose as commands) and a notice per
    changed workload; for the JSON reports, the text on stderr (they hold no plan)."""
    text = render(plan, Format.TEXT)
    if ReportFormat(fmt) is not ReportFormat.GITHUB:
        sys.stderr.write(text)
        return
    token = secrets.token_hex(16)
    out = [workflow_command("group", f"gitray plan for {plan.label or plan.revision[:12]}"),
           workflow_command("stop-commands", token), text.rstrip("\n"), f"::{token}::",
           workflow_command("endgroup", "")]
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.write(github_commands(plan_notices(plan), git_prefix(repo)))
    sys.stdout.flush()


def live_problems(args: argparse.Namespace, result: LoadResult, snapshot: Snapshot,
                   e: ValidationError, report: str | None) -> None:
    """A revision refused against live: in the reviewer's format, and as the PR comment."""
    if report:
        print_findings(report, e.diagnostics, (), args.repo)
        e.reported = True
    if getattr(args, "comment", False) and args.pr is not None:
        from gitray.hosts.api import token_from
        from gitray.hosts.comments import upsert_plan_comment
        from gitray.plans.annotations import problems_markdown

        outcome = upsert_plan_comment(
            result.config.status, token_from("GITRAY_STATUS_TOKEN", args.status_token_file),
            args.pr, args.repo,
            problems_markdown(e.diagnostics, snapshot.label, git_prefix(args.repo)))
        print(f"plan comment on #{args.pr}: {outcome}", file=sys.stderr)


@contextmanager
def refusals_reported(args: argparse.Namespace, result: LoadResult, snapshot: Snapshot,
                      report: str | None) -> Iterator[None]:
    """A ValidationError raised inside goes to :func:`live_problems`, then on."""
    try:
        yield
    except ValidationError as e:
        live_problems(args, result, snapshot, e, report)
        raise
