"""Plan preview in CI: what the GitHub Action (``action.yml``) and the GitLab CI template
(``ci/gitlab/gitray-plan.yml``) run. Does I/O: Git, files, the Git host's API, stdout.

``python -m gitray.cli.ci github|gitlab`` reads what the CI system sets (GitHub: the event
JSON at ``$GITHUB_EVENT_PATH``, ``$GITHUB_API_URL``, ``$GITHUB_REPOSITORY``, ``$GITHUB_OUTPUT``;
GitLab: ``$CI_MERGE_REQUEST_IID``, ``$CI_MERGE_REQUEST_DIFF_BASE_SHA``, ``$CI_API_V4_URL``,
``$CI_PROJECT_ID``), then:

1. validates the revision; problems and warnings go where reviewers look (GitHub: workflow
   commands, inline on the diff; GitLab: the code-quality report file) and, when it is
   invalid, into the one PR/MR comment instead of a plan;
2. runs ``gitray plan --against <the PR's base>`` (offline; ``--against live`` with a
   kubeconfig) with ``--comment``: one comment per repository path, edited in place;
3. writes outputs: ``valid``, ``has-changes``, ``workloads-changed``, ``blue-green`` (workloads
   that get a new cluster), ``against`` and ``plan-json`` (``$GITHUB_OUTPUT``; for GitLab a
   dotenv file of ``GITRAY_*`` variables).

The token comes from ``$GITRAY_STATUS_TOKEN`` and is never printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitray.cli.app import main
from gitray.cli.contract import EXIT_ERROR, EXIT_OK
from gitray.core.config import StatusProvider, StatusSettings
from gitray.core.errors import GitrayError, SourceError
from gitray.plans.annotations import (
    codeclimate_report,
    findings_of,
    github_commands,
    plan_notices,
    problems_markdown,
)
from gitray.plans.plan import Action, Plan, plan_from_json
from gitray.plans.render import Format, render

__all__ = ["CiContext", "github_context", "gitlab_context", "outputs_of", "run"]


@dataclass(frozen=True)
class CiContext:
    """What the CI system says about this run."""

    host: StatusProvider
    api_url: str
    repository: str  # GitHub owner/name; GitLab project id (or path)
    number: int | None  # the pull/merge request; None outside one (no comment)
    base: str | None  # the revision the change is based on; None: plan against empty
    outputs: Path | None  # $GITHUB_OUTPUT, or the dotenv file for GitLab
    summary: Path | None = None  # $GITHUB_STEP_SUMMARY


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) or (isinstance(value, str)
                                                    and value.isdigit()) else None


def github_context(env: Mapping[str, str]) -> CiContext:
    event: dict[str, object] = {}
    if env.get("GITHUB_EVENT_PATH"):
        try:
            loaded = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
        except (OSError, ValueError) as e:
            raise SourceError(f"cannot read the event at $GITHUB_EVENT_PATH: {e}") from e
        event = loaded if isinstance(loaded, dict) else {}
    pr = event.get("pull_request")
    number = base = None
    if isinstance(pr, dict):
        number = _int(pr.get("number"))
        base_ref = pr.get("base")
        base = str(base_ref.get("sha")) if isinstance(base_ref, dict) else None
    else:  # a push: the commit before it
        before = event.get("before")
        base = str(before) if isinstance(before, str) and before.strip("0") else None
    parts = env.get("GITHUB_REF", "").split("/")  # refs/pull/<n>/merge
    if number is None and len(parts) >= 3 and parts[1] == "pull":
        number = _int(parts[2])
    return CiContext(StatusProvider.GITHUB, env.get("GITHUB_API_URL", "https://api.github.com"),
                     env.get("GITHUB_REPOSITORY", ""), number, base,
                     Path(env["GITHUB_OUTPUT"]) if env.get("GITHUB_OUTPUT") else None,
                     Path(env["GITHUB_STEP_SUMMARY"]) if env.get("GITHUB_STEP_SUMMARY")
                     else None)


def gitlab_context(env: Mapping[str, str], dotenv: str | None) -> CiContext:
    return CiContext(StatusProvider.GITLAB,
                     env.get("CI_API_V4_URL", "https://gitlab.com/api/v4"),
                     env.get("CI_PROJECT_ID") or env.get("CI_PROJECT_PATH", ""),
                     _int(env.get("CI_MERGE_REQUEST_IID", "")),
                     env.get("CI_MERGE_REQUEST_DIFF_BASE_SHA") or None,
                     Path(dotenv) if dotenv else None)


def outputs_of(plan: Plan | None, against: str) -> dict[str, str]:
    """The step outputs (``plan`` None: the revision is invalid)."""
    changed = [w for w in plan.workloads if w.has_changes] if plan else []
    return {"valid": str(plan is not None).lower(),
            "has-changes": str(bool(changed)).lower(),
            "workloads-changed": str(len(changed)),
            "blue-green": str(sum(1 for w in changed if w.action is Action.REPLACE)),
            "against": against}


def _write_outputs(ctx: CiContext, values: Mapping[str, str]) -> None:
    if ctx.outputs is None:
        return
    if ctx.host is StatusProvider.GITLAB:  # dotenv: GITRAY_HAS_CHANGES=true
        lines = [f"GITRAY_{k.upper().replace('-', '_')}={v}" for k, v in values.items()]
    else:
        lines = [f"{k}={v}" for k, v in values.items()]
    with ctx.outputs.open("a") as out:
        out.write("".join(line.replace("\n", " ") + "\n" for line in lines))


def _comment(ctx: CiContext, args: argparse.Namespace) -> bool:
    if not args.comment or ctx.number is None:
        if args.comment:
            print("gitray: not a pull/merge request: no plan comment", file=sys.stderr)
        return False
    if not os.environ.get("GITRAY_STATUS_TOKEN"):
        print("gitray: $GITRAY_STATUS_TOKEN is not set: no plan comment (GitLab: a masked "
              "CI/CD variable holding a token with the api scope)", file=sys.stderr)
        return False
    return True


def run(ctx: CiContext, args: argparse.Namespace) -> int:
    from gitray.cli.console import say_retry
    from gitray.cli.reports import git_prefix
    from gitray.git.source import read_snapshot, resolve_revision
    from gitray.hosts.comments import upsert_plan_comment
    from gitray.plans.load import load_snapshot
    from gitray.render import runners

    prefix = git_prefix(args.path)
    snapshot = read_snapshot(args.path, args.revision)
    loaded = load_snapshot(snapshot, {}, **runners())
    findings = findings_of(loaded.diagnostics, loaded.warnings)
    if ctx.host is StatusProvider.GITHUB:
        sys.stdout.write(github_commands(findings, prefix))
    else:
        print("".join(f"{d}\n" for d in loaded.diagnostics)
              + "".join(f"{w.location}: warning: {w.message}\n" for w in loaded.warnings), end="")
        if args.codequality:
            Path(args.codequality).write_text(codeclimate_report(findings, prefix))
    comment = _comment(ctx, args)
    if loaded.diagnostics:
        print(f"gitray: {len(loaded.diagnostics)} problem(s) in {snapshot.label}; "
              "nothing would be applied", file=sys.stderr)
        if comment and ctx.number is not None:
            settings = StatusSettings(ctx.host, url=ctx.api_url, repository=ctx.repository)
            outcome = upsert_plan_comment(settings, os.environ.get("GITRAY_STATUS_TOKEN"),
                                          ctx.number, args.path,
                                          problems_markdown(loaded.diagnostics,
                                                            snapshot.label, prefix),
                                          on_retry=say_retry)
            print(f"plan comment on #{ctx.number}: {outcome}", file=sys.stderr)
        _write_outputs(ctx, outputs_of(None, ""))
        return EXIT_ERROR
    against = "live" if args.kubeconfig else ctx.base or "empty"
    if against not in ("live", "empty"):
        try:
            resolve_revision(args.path, against)
        except SourceError as e:
            raise SourceError(f"{e} - the base of the change must be in the clone (GitHub: "
                              "actions/checkout with fetch-depth: 0; GitLab: GIT_DEPTH: 0)"
                              ) from e
    plan_file = Path(args.plan_out) if args.plan_out else _temporary_file()
    argv = ["plan", "--repo", args.path, "--revision", args.revision, "--against", against,
            "--out", str(plan_file), "--color", "never"]
    if args.kubeconfig:
        argv += ["--kubeconfig", args.kubeconfig]
    if comment:
        argv += ["--comment", "--pr", str(ctx.number),
                 "--set", f"status.provider={ctx.host.value}",
                 "--set", f"status.url={json.dumps(ctx.api_url)}",
                 "--set", f"status.repository={json.dumps(ctx.repository)}"]
    sys.stdout.flush()
    code = main(argv)
    if code != EXIT_OK:
        return code
    plan = plan_from_json(json.loads(plan_file.read_text()))
    if ctx.host is StatusProvider.GITHUB:
        sys.stdout.write(github_commands(plan_notices(plan), prefix))
    if ctx.summary is not None:
        with ctx.summary.open("a") as out:
            out.write(render(plan, Format.MARKDOWN))
    _write_outputs(ctx, {**outputs_of(plan, against), "plan-json": str(plan_file)})
    return EXIT_OK


def _temporary_file() -> Path:
    fd, name = tempfile.mkstemp(prefix="gitray-plan-", suffix=".json")
    os.close(fd)
    return Path(name)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gitray.cli.ci",
                                description="gitray's plan preview for a pull/merge request")
    p.add_argument("host", choices=[StatusProvider.GITHUB.value, StatusProvider.GITLAB.value])
    p.add_argument("--path", default=".", help="the repository directory gitray reads [.]")
    p.add_argument("--revision", default="HEAD", help="the revision to plan [HEAD]")
    p.add_argument("--base", help="plan against this revision [the PR's or MR's base]")
    p.add_argument("--comment", default="true", choices=["true", "false"],
                   help="keep one plan comment on the pull/merge request [true]")
    p.add_argument("--kubeconfig", help="plan against the live cluster (read-only access)")
    p.add_argument("--plan-out", help="where to save the plan JSON [a temporary file]")
    p.add_argument("--codequality", help="GitLab: write the code-quality report here")
    p.add_argument("--dotenv", help="GitLab: write the outputs here as GITRAY_* variables")
    return p


def cli(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.comment = args.comment == "true"
    try:
        ctx = (github_context(os.environ) if args.host == StatusProvider.GITHUB.value
               else gitlab_context(os.environ, args.dotenv))
        if args.base:
            ctx = dataclasses.replace(ctx, base=args.base)
        return run(ctx, args)
    except GitrayError as e:
        print(f"gitray: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli())
