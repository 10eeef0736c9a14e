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
from gitray.config import env_overrides, parse_duration
from gitray.console import ConsoleReporter
from gitray.errors import GitrayError, UserError, ValidationError
from gitray.logs import setup_logging
from gitray.model import LiveState
from gitray.plans.load import LoadResult, Snapshot, load_snapshot
from gitray.plans.materialize import materialize
from gitray.plans.plan import Plan, plan_from_json, plan_schema_problem, plan_to_json
from gitray.plans.planner import compute_plan
from gitray.plans.render import Format, render
from gitray.sync.comments import upsert_plan_comment
from gitray.sync.daemon import Daemon, DaemonSettings
from gitray.sync.dashboard import DashboardMode, Resolver
from gitray.sync.executor import Outcome
from gitray.sync.kube import Kube, KubeSettings, cluster_configured
from gitray.sync.run import (
    Desired,
    ExecSettings,
    check_saved_plan,
    desired_from,
    execute,
    live_plan,
    read_live,
    snapshot_revision,
)
from gitray.sync.source import read_snapshot
from gitray.sync.status import render_status, workload_status
from gitray.sync.statuses import token_from

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
    pl.add_argument("--comment", action="store_true",
                    help="create or update this repository path's plan comment on the pull "
                         "request (status.provider github, gitea or gitlab in gitray.yaml)")
    pl.add_argument("--pr", type=int, default=_pr_from_env(), metavar="N",
                    help="pull/merge request number for --comment [from $GITRAY_PR, "
                         "$GITHUB_REF, $CI_MERGE_REQUEST_IID]")
    pl.add_argument("--status-token-file", default=os.environ.get("GITRAY_STATUS_TOKEN_FILE"),
                    help="Git host token for --comment [else $GITRAY_STATUS_TOKEN]")
    cluster_args(pl)

    ap = sub.add_parser("apply", help="apply a saved plan, or plan and apply a revision")
    ap.add_argument("plan_file", nargs="?", metavar="PLAN_FILE",
                    help="a plan saved with gitray plan --out; refused if it is stale")
    repo_args(ap)
    ap.add_argument("--yes", action="store_true", help="apply without asking")
    cluster_args(ap)
    exec_args(ap)

    st = sub.add_parser("status", help="per workload: synced revision, step, clusters, Serve")
    repo_args(st)
    cluster_args(st)
    st.add_argument("--lease-namespace", default=os.environ.get("GITRAY_LEASE_NAMESPACE",
                                                                "gitray"))
    st.add_argument("--dashboard", choices=[m.value for m in DashboardMode],
                    default=os.environ.get("GITRAY_DASHBOARD"))
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
    sy.add_argument("--http-address", default=env("GITRAY_HTTP_ADDRESS", "0.0.0.0:8080"),
                    help="HOST:PORT for /healthz, /readyz, /metrics, /hooks/git")
    sy.add_argument("--webhook-secret-file", default=env("GITRAY_WEBHOOK_SECRET_FILE"),
                    help="file holding the push-webhook HMAC secret (no file: webhook off)")
    sy.add_argument("--log-format", choices=["text", "json"],
                    default=env("GITRAY_LOG_FORMAT", "text"))
    sy.add_argument("--log-level", default=env("GITRAY_LOG_LEVEL", "info"),
                    choices=["debug", "info", "warning", "error"])
    sy.add_argument("--cache-dir", default=env("GITRAY_CACHE_DIR"),
                    help="where the Git remote is cached [~/.cache/gitray/repos]")
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


def exec_args(cmd: argparse.ArgumentParser) -> None:
    env = os.environ.get
    cmd.add_argument("--lease-namespace", default=env("GITRAY_LEASE_NAMESPACE",
                                                      _own_namespace() or "gitray"),
                     help="namespace of the Lease and the run records [gitray]")
    cmd.add_argument("--lease-name", default=env("GITRAY_LEASE_NAME", "gitray"))
    cmd.add_argument("--lease-timeout", type=float, default=60.0, metavar="SECONDS",
                     help="how long to wait for another gitray to finish [60]")
    cmd.add_argument("--dashboard", choices=[m.value for m in DashboardMode],
                     default=env("GITRAY_DASHBOARD"),
                     help="how to reach Ray dashboards: service (in-cluster DNS), pod-ip, or "
                          "proxy (through the API server) [service in-cluster, else proxy]")
    cmd.add_argument("--ray-token-file", default=env("GITRAY_RAY_TOKEN_FILE"),
                     help="file holding the Ray dashboard token (x-ray-authorization)")


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


def _load(repo: str, revision: str | None, overrides: dict[str, Any],
          warn: bool = True) -> tuple[LoadResult, Snapshot]:
    snapshot = read_snapshot(repo, revision)
    result = load_snapshot(snapshot, overrides)
    for warning in result.warnings if warn else ():
        print(f"{warning.location}: warning: {warning.message}", file=sys.stderr)
    if result.diagnostics:
        raise ValidationError(result.diagnostics)
    return result, snapshot


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


def _own_namespace() -> str | None:
    """The Pod's namespace when running in a cluster."""
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _seconds(value: str, flag: str) -> float:
    try:
        return float(parse_duration(int(value) if value.isdigit() else value))
    except ValueError as e:
        raise UserError(f"{flag}: {e}") from None


def _kube_settings(args: argparse.Namespace) -> KubeSettings:
    return KubeSettings(kubeconfig=args.kubeconfig, context=args.context)


def _dashboard_mode(args: argparse.Namespace) -> DashboardMode:
    if args.dashboard:
        return DashboardMode(args.dashboard)
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not args.kubeconfig
    return DashboardMode.SERVICE if in_cluster else DashboardMode.PROXY


def _secret_file(path: str | None, what: str) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except OSError as e:
        raise UserError(f"cannot read the {what} file {path}: {e.strerror}") from None


@dataclass(frozen=True)
class _Basis:
    live: LiveState
    against: str
    exact: bool
    announcement: str | None


def _basis(args: argparse.Namespace, result: LoadResult, overrides: dict[str, Any]) -> _Basis:
    against = args.against
    if against is None:
        if cluster_configured(_kube_settings(args)):
            against = "live"
        else:
            return _Basis(LiveState(), "empty", True,
                          "No Kubernetes cluster is configured: planning against an empty "
                          "cluster (--against empty).")
    if against == "empty":
        return _Basis(LiveState(), "empty", True, None)
    if against == "live":
        kube = Kube.connect(_kube_settings(args))
        try:
            live = read_live(kube, Desired(Snapshot("", "", ()), result))
        finally:
            kube.close()
        return _Basis(live, "live", False, None)
    base, base_snapshot = _load(args.repo, against, overrides, warn=False)
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
                              revision=snapshot_revision(snapshot), against=basis.against,
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
    if args.comment:
        if args.pr is None:
            raise UserError("--comment needs the pull request number: --pr N (or $GITRAY_PR)")
        outcome = upsert_plan_comment(result.config.status,
                                      token_from("GITRAY_STATUS_TOKEN", args.status_token_file),
                                      args.pr, args.repo, render(plan, Format.MARKDOWN))
        print(f"plan comment on #{args.pr}: {outcome}", file=sys.stderr)
    if args.detailed_exitcode and plan.has_changes:
        return EXIT_CHANGES
    return EXIT_OK


def _read_plan_file(path: str) -> Plan:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UserError(f"cannot read the plan file {path}: {e.strerror}") from None
    except ValueError as e:
        raise UserError(f"{path} is not a gitray plan (not JSON: {e})") from None
    problem = plan_schema_problem(data)
    if problem:
        raise UserError(f"{path} is not a valid gitray plan: {problem}")
    return plan_from_json(data)


def _confirm() -> None:
    if not sys.stdin.isatty():
        raise UserError("refusing to apply without --yes: standard input is not a terminal")
    answer = input("Apply this plan? Only 'yes' is accepted: ")
    if answer.strip() != "yes":
        raise UserError("apply cancelled")


def _cmd_apply(args: argparse.Namespace) -> int:
    overrides = _overrides(args.set)
    desired = desired_from(read_snapshot(args.repo, args.revision), overrides)
    kube = Kube.connect(_kube_settings(args))
    try:
        if args.plan_file:
            plan = _read_plan_file(args.plan_file)
            check_saved_plan(plan, kube, desired)
            print(f"The saved plan {args.plan_file} is current; applying it.")
        else:
            plan, _ = live_plan(kube, desired)
            sys.stdout.write(render(plan, Format.TEXT, colour=sys.stdout.isatty()))
            if plan.has_changes and not args.yes:
                _confirm()
        settings = ExecSettings(lease_namespace=args.lease_namespace,
                                lease_name=args.lease_name,
                                lease_timeout_s=args.lease_timeout,
                                dashboard_mode=_dashboard_mode(args),
                                ray_token=_secret_file(args.ray_token_file, "Ray token"))

        def waiting(holder: str, seconds: float) -> None:
            print(f"waiting for the Lease {args.lease_namespace}/{args.lease_name} held by "
                  f"{holder or 'nobody'} ({seconds:.0f} s)", file=sys.stderr, flush=True)

        outcomes = execute(kube, desired, plan, settings, ConsoleReporter(), waiting,
                           replan=not args.plan_file)
    finally:
        kube.close()
    failed = [o for o in outcomes if o.outcome is Outcome.FAILED]
    skipped = [o for o in outcomes if o.outcome is Outcome.SKIPPED]
    for o in failed:
        print(f"gitray: {o.key} failed: {o.reason}", file=sys.stderr)
        for message in o.messages[-1:]:
            print(f"gitray: {o.key}: {message}", file=sys.stderr)
    for o in skipped:
        print(f"gitray: {o.key} not run: {o.reason}", file=sys.stderr)
    done = len(outcomes) - len(failed) - len(skipped)
    print(f"Apply finished: {done} workload(s) converged, {len(failed)} failed, "
          f"{len(skipped)} not run.")
    return EXIT_ERROR if failed or skipped else EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    desired = desired_from(read_snapshot(args.repo, args.revision), _overrides(args.set))
    kube = Kube.connect(_kube_settings(args))
    try:
        rows = workload_status(kube, desired, args.lease_namespace,
                               Resolver(kube, _dashboard_mode(args)))
    finally:
        kube.close()
    sys.stdout.write(render_status(rows))
    return EXIT_OK


def _cmd_sync(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, args.log_format == "json")
    host, _, port = args.http_address.rpartition(":")
    if not port.isdigit():
        raise UserError(f"--http-address must be HOST:PORT, got {args.http_address!r}")
    overrides = {**env_overrides(os.environ), **_overrides(args.set)}
    secret = _secret_file(args.webhook_secret_file, "webhook secret")
    settings = DaemonSettings(
        repo=args.repo, branch=args.branch, lease_namespace=args.lease_namespace,
        lease_name=args.lease_name, interval_s=_seconds(args.interval, "--interval"),
        drift_every=args.drift_every,
        deletion_interval_s=_seconds(args.deletion_interval, "--deletion-interval"),
        lease_duration_s=args.lease_duration, renew_deadline_s=args.renew_deadline,
        retry_period_s=args.retry_period, http_host=host or "0.0.0.0", http_port=int(port),
        webhook_secret=secret.encode() if secret else None,
        dashboard_mode=_dashboard_mode(args),
        ray_token=_secret_file(args.ray_token_file, "Ray token"), overrides=overrides,
        kube=_kube_settings(args), cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        status_token=token_from("GITRAY_STATUS_TOKEN", args.status_token_file),
        allowed_signers=Path(args.allowed_signers) if args.allowed_signers else None)
    return Daemon(settings).run_forever()


_COMMANDS = {"validate": _cmd_validate, "plan": _cmd_plan, "apply": _cmd_apply,
             "status": _cmd_status, "sync": _cmd_sync}


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
