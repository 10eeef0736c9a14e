"""The ``gitray`` command line: parse arguments, call the layers, pick a view. No logic here.

Exit codes (a public contract): 0 success / no changes, 1 error, 2 changes present (only with
``--detailed-exitcode``). User errors print one line each, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitray import __version__
from gitray.errors import GitrayError, UserError, ValidationError
from gitray.model import LiveState
from gitray.plans.load import LoadResult, Snapshot, load_snapshot
from gitray.plans.materialize import materialize
from gitray.plans.plan import Plan, plan_to_json
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.sync.source import read_snapshot

__all__ = ["main"]

EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gitray",
        description="GitOps for Ray on Kubernetes: plan and apply KubeRay workloads from Git.",
    )
    p.add_argument("--version", action="version", version=f"gitray {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def repo_args(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--repo", default=".", metavar="DIR|URL",
                         help="repository directory (may be a subdirectory) or URL [.]")
        cmd.add_argument("--revision", metavar="REV",
                         help="commit, branch or tag to read (default: the working tree of DIR,"
                              " or the default branch of URL)")
        cmd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a gitray.yaml setting, e.g. --set prune=false "
                              "(VALUE is YAML; repeatable)")

    v = sub.add_parser("validate", help="validate every workload in a revision")
    repo_args(v)

    pl = sub.add_parser("plan", help="show what applying a revision would do")
    repo_args(pl)
    pl.add_argument("--against", metavar="live|empty|REV",
                    help="compare with the live cluster, an empty one, or the cluster as a Git "
                         "revision would leave it (default: live when a cluster is configured,"
                         " else empty)")
    pl.add_argument("--format", choices=[f.value for f in Format], default=Format.TEXT.value)
    pl.add_argument("--out", metavar="FILE", help="also save the plan as JSON for gitray apply")
    pl.add_argument("--detailed-exitcode", action="store_true",
                    help="exit 2 when the plan has changes, 0 when it has none")
    pl.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    return p


def _overrides(pairs: Sequence[str]) -> dict[str, Any]:
    from ruamel.yaml import YAML

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--set expects KEY=VALUE, got {pair!r}")
        value = YAML(typ="safe", pure=True).load(raw) if raw else ""
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _load(repo: str, revision: str | None,
          overrides: dict[str, Any]) -> tuple[LoadResult, Snapshot]:
    snapshot = read_snapshot(repo, revision)
    result = load_snapshot(snapshot, overrides)
    if result.diagnostics:
        raise ValidationError(result.diagnostics)
    return result, snapshot


def _cluster_configured() -> bool:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        return any(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p)
    return (Path.home() / ".kube" / "config").is_file()


@dataclass(frozen=True)
class _Basis:
    live: LiveState
    against: str
    exact: bool
    announcement: str | None


def _basis(args: argparse.Namespace, result: LoadResult, overrides: dict[str, Any]) -> _Basis:
    against = args.against
    if against is None:
        if _cluster_configured():
            against = "live"
        else:
            return _Basis(LiveState(), "empty", True,
                          "No Kubernetes cluster is configured: planning against an empty "
                          "cluster (--against empty).")
    if against == "empty":
        return _Basis(LiveState(), "empty", True, None)
    if against == "live":
        raise UserError("--against live needs a cluster connection, which this build of gitray "
                        "does not have yet; use --against empty or --against REV")
    base, base_snapshot = _load(args.repo, against, overrides)
    return _Basis(materialize(base.workloads, base.config),
                  f"revision:{base_snapshot.revision}", True, None)


def _cmd_validate(args: argparse.Namespace) -> int:
    result, snapshot = _load(args.repo, args.revision, _overrides(args.set))
    n = len(result.workloads)
    print(f"{snapshot.label}: {n} workload{'s' if n != 1 else ''} valid")
    return EXIT_OK


def _cmd_plan(args: argparse.Namespace) -> int:
    overrides = _overrides(args.set)
    result, snapshot = _load(args.repo, args.revision, overrides)
    basis = _basis(args, result, overrides)
    if basis.announcement:
        print(basis.announcement, file=sys.stderr)
    plan: Plan = compute_plan(result.workloads, basis.live, result.config,
                              revision=snapshot.revision, against=basis.against,
                              now=datetime.now(UTC), exact=basis.exact, label=snapshot.label)
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(plan_to_json(plan), indent=2, sort_keys=True)
                                      + "\n")
        except OSError as e:
            raise UserError(f"cannot write the plan to {args.out}: {e.strerror}") from None
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                        and not os.environ.get("NO_COLOR"))
    sys.stdout.write(render(plan, Format(args.format), colour=colour))
    if args.detailed_exitcode and plan.has_changes:
        return EXIT_CHANGES
    return EXIT_OK


_COMMANDS = {"validate": _cmd_validate, "plan": _cmd_plan}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except ValidationError as e:
        for diagnostic in e.diagnostics:
            print(diagnostic, file=sys.stderr)
        print(f"gitray: {e}", file=sys.stderr)
        return EXIT_ERROR
    except GitrayError as e:
        print(f"gitray: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("gitray: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
