"""The ``gitray`` command line: parse arguments, run the command, render errors. No logic here.

Exit codes (a public contract, ``gitray.cli.contract``): 0 success / no changes, 1 error, 2
changes present (only with ``--detailed-exitcode``). User errors print one line each, never a
traceback: exceptions are rendered here, at the top, and nowhere else.

Importing this module loads the parser only; ``gitray.cli.commands`` (imported when a command
runs) loads what that command needs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from gitray import __version__
from gitray.cli.contract import EXIT_ERROR, FORMATS, REPORT_FORMATS
from gitray.core.config import DashboardMode
from gitray.core.errors import GitrayError, ValidationError

__all__ = ["main"]


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
    v.add_argument("--staged", action="store_true",
                   help="validate the files staged in Git's index, as the next commit would "
                        "hold them (the pre-commit hook)")
    v.add_argument("--format", choices=["text", *REPORT_FORMATS], default="text",
                   help="text; github (workflow commands: inline annotations), codeclimate "
                        "(GitLab code quality JSON) or sarif (code scanning) [text]")

    pl = sub.add_parser("plan", help="show what applying a revision would do")
    repo_args(pl)
    pl.add_argument("--against", metavar="live|empty|REV",
                    help="compare with the live cluster, an empty one, or the cluster as a Git "
                         "revision would leave it (default: live when a cluster is configured,"
                         " else empty)")
    pl.add_argument("--format", choices=[*FORMATS, *REPORT_FORMATS], default=FORMATS[0],
                    help="a view of the plan (text, markdown, json), or problems and warnings "
                         "where reviewers look (github, codeclimate, sarif; the plan's text "
                         "then goes to the log) [text]")
    pl.add_argument("--out", metavar="FILE", help="also save the plan as JSON for gitray apply")
    pl.add_argument("--detailed-exitcode", action="store_true",
                    help="exit 2 when the plan has changes, 0 when it has none")
    pl.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    pl.add_argument("--comment", action="store_true",
                    help="create or update this repository path's plan comment on the pull "
                         "request (status.provider github, gitea or gitlab in gitray.yaml)")
    pl.add_argument("--pr", type=int, default=_pr_from_env(), metavar="N",
                    help="pull/merge request number for --comment [from $GITRAY_PR, "
                         "$GITHUB_REF, $CI_MERGE_REQUEST_IID]")
    pl.add_argument("--status-token-file", default=os.environ.get("GITRAY_STATUS_TOKEN_FILE"),
                    help="Git host token for --comment [else $GITRAY_STATUS_TOKEN]")
    cluster_args(pl)
    lease_namespace_arg(pl)  # where the run records are: the runs gitray started

    ap = sub.add_parser("apply", help="apply a saved plan, or plan and apply a revision")
    ap.add_argument("plan_file", nargs="?", metavar="PLAN_FILE",
                    help="a plan saved with gitray plan --out; refused if it is stale")
    repo_args(ap)
    ap.add_argument("--yes", action="store_true", help="apply without asking")
    ap.add_argument("--override-freeze", metavar="REASON", default=None, type=_reason,
                    help="apply workloads an open freeze window holds (gitray.yaml "
                         "freezeWindows); the reason is kept in their run records")
    cluster_args(ap)
    exec_args(ap)

    st = sub.add_parser("status", help="per workload: synced revision, step, clusters, Serve")
    repo_args(st)
    cluster_args(st)
    lease_namespace_arg(st)
    st.add_argument("--lease-name", default=os.environ.get("GITRAY_LEASE_NAME", "gitray"),
                    help="the Lease name of the gitray sync instance (its shards' owners)")
    st.add_argument("--dashboard", choices=[m.value for m in DashboardMode],
                    default=os.environ.get("GITRAY_DASHBOARD"))
    st.add_argument("--watch", nargs="?", const=2.0, default=None, type=_seconds,
                    metavar="SECONDS", help="refresh every SECONDS (default 2) until Ctrl-C; "
                    "in place on a terminal")
    for name, what in (("promote", "end the pause an incremental RayService upgrade is in (or "
                                   "the next one)"),
                       ("abort", "roll an incremental RayService upgrade in flight back")):
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("workload", metavar="NAMESPACE/RAYSERVICE")
        cluster_args(cmd)
        lease_namespace_arg(cmd)
    for name, what in (("suspend", "start no run of a workload (gitray sync and apply) until "
                                   "resumed"),
                       ("resume", "let gitray run a suspended workload again"),
                       ("retry", "run a workload's failed run once more at the same revision"),
                       ("approve", "let a blue-green RayService upgrade held by its approval "
                                   "gate switch to the new cluster")):
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("workload", metavar="NAMESPACE/KIND/NAME")
        cluster_args(cmd)
        lease_namespace_arg(cmd)
    _sync_parser(sub)
    return p


def _sync_parser(sub: Any) -> None:
    sy = sub.add_parser("sync", help="run in-cluster: follow a branch, apply every commit")
    env = os.environ.get
    sy.add_argument("--repo", required=env("GITRAY_REPO") is None, default=env("GITRAY_REPO"),
                    metavar="URL", help="Git URL to follow [$GITRAY_REPO]")
    sy.add_argument("--branch", default=env("GITRAY_BRANCH"),
                    help="branch to follow [the remote's default branch]")
    sy.add_argument("--interval", default=env("GITRAY_INTERVAL", "30s"),
                    help="poll interval [30s]")
    sy.add_argument("--drift-every", type=int, default=int(env("GITRAY_DRIFT_EVERY", "10")),
                    metavar="N", help="check for drift every N polls (0: never) [10]")
    sy.add_argument("--deletion-interval", default=env("GITRAY_DELETION_INTERVAL", "15s"),
                    help="how often due deletions of old clusters are checked [15s]")
    sy.add_argument("--workers", type=_at_least_one, default=env("GITRAY_WORKERS", "8"),
                    metavar="N", help="workloads whose runs go on at the same time [8]")
    sy.add_argument("--shards", type=_shard_count, default=env("GITRAY_SHARDS", "1"),
                    metavar="S", help="shard the workloads over the replicas, each shard on a "
                                      "Lease of its own (docs/sharding.md) [1: one leader]")
    sy.add_argument("--http-address", default=env("GITRAY_HTTP_ADDRESS", "0.0.0.0:8080"),
                    help="HOST:PORT for /healthz, /readyz, /metrics, /hooks/git")
    sy.add_argument("--webhook-secret-file", default=env("GITRAY_WEBHOOK_SECRET_FILE"),
                    help="file holding the push-webhook HMAC secret (no file: webhook off)")
    sy.add_argument("--log-format", choices=["text", "json"],
                    default=env("GITRAY_LOG_FORMAT", "text"))
    sy.add_argument("--log-level", default=env("GITRAY_LOG_LEVEL", "info"),
                    choices=["debug", "info", "warning", "error"])
    sy.add_argument("--cache-dir", default=env("GITRAY_CACHE_DIR"),
                    help="directory gitray keeps its clone of the remote in (under "
                         "repos/) [~/.cache/gitray]")
    sy.add_argument("--status-token-file", default=env("GITRAY_STATUS_TOKEN_FILE"),
                    help="file holding the Git host token for commit statuses "
                         "[else $GITRAY_STATUS_TOKEN]")
    sy.add_argument("--allowed-signers", default=env("GITRAY_ALLOWED_SIGNERS"), metavar="FILE",
                    help="apply only commits SSH-signed by a key in FILE (git's allowed "
                         "signers format)")
    sy.add_argument("--lease-duration", type=int, default=15, help=argparse.SUPPRESS)
    sy.add_argument("--renew-deadline", type=float, default=10.0, help=argparse.SUPPRESS)
    sy.add_argument("--retry-period", type=float, default=2.0, help=argparse.SUPPRESS)
    sy.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a gitray.yaml setting (also GITRAY_<KEY> variables)")
    cluster_args(sy)
    exec_args(sy)


def cluster_args(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--kubeconfig", default=None, help="kubeconfig file [$KUBECONFIG]")
    cmd.add_argument("--context", default=None, help="kubeconfig context")


def lease_namespace_arg(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--lease-namespace", default=os.environ.get("GITRAY_LEASE_NAMESPACE"),
                     metavar="NS",
                     help="namespace of the Lease and the run records [$GITRAY_LEASE_NAMESPACE, "
                          "else the kubeconfig context's namespace, in a pod its own]")


def exec_args(cmd: argparse.ArgumentParser) -> None:
    env = os.environ.get
    lease_namespace_arg(cmd)
    cmd.add_argument("--lease-name", default=env("GITRAY_LEASE_NAME", "gitray"))
    cmd.add_argument("--lease-timeout", type=float, default=60.0, metavar="SECONDS",
                     help="how long to wait for another gitray to finish [60]")
    cmd.add_argument("--dashboard", choices=[m.value for m in DashboardMode],
                     default=env("GITRAY_DASHBOARD"),
                     help="how to reach Ray dashboards: service (in-cluster DNS), pod-ip, or "
                          "proxy (through the API server) [service in-cluster, else proxy]")
    cmd.add_argument("--ray-token-file", default=env("GITRAY_RAY_TOKEN_FILE"),
                     help="file holding the Ray dashboard token (x-ray-authorization)")


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of at least 1 expected, got {text!r}")
    return int(text)


def _shard_count(text: str) -> int:
    from gitray.core.errors import ConfigError
    from gitray.engine.shards import MAX_SHARDS, check_shards  # (pure; only for gitray sync)

    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {MAX_SHARDS} expected, "
                                         f"got {text!r}")
    try:
        check_shards(int(text))
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.5 <= value <= 3600:
        raise argparse.ArgumentTypeError("between 0.5 and 3600 seconds")
    return value


def _reason(text: str) -> str:
    """The reason given to --override-freeze: one line, something said, at most 300
    characters."""
    reason = " ".join(text.split())
    if not reason:
        raise argparse.ArgumentTypeError("give a reason, e.g. 'hotfix for incident 42'")
    if len(reason) > 300:
        raise argparse.ArgumentTypeError("the reason is longer than 300 characters")
    return reason


def _pr_from_env() -> int | None:
    env = os.environ
    for value in (env.get("GITRAY_PR"), env.get("CI_MERGE_REQUEST_IID")):
        if value and value.isdigit():
            return int(value)
    ref = env.get("GITHUB_REF", "")  # refs/pull/<n>/merge
    parts = ref.split("/")
    if len(parts) >= 3 and parts[1] == "pull" and parts[2].isdigit():
        return int(parts[2])
    return None



def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from gitray.cli import commands

    try:
        return commands.run(args)
    except ValidationError as e:
        for diagnostic in () if e.reported else e.diagnostics:
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
