"""The commands of ``gitray``: each reads its inputs, calls the layers and prints a view.

I/O (Git, the cluster, Git hosts). The heavier layers are imported inside the command that
needs them: ``gitray plan`` against an empty cluster never loads the Kubernetes client, and
only ``gitray sync`` loads the daemon.
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
from typing import TYPE_CHECKING, Any

from gitray.cli.contract import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, REPORT_FORMATS
from gitray.cli.reports import refusals_reported
from gitray.core.config import DashboardMode, parse_duration
from gitray.core.errors import GitrayError, UserError, ValidationError
from gitray.core.livestore import LiveStore
from gitray.core.model import LiveState
from gitray.core.snapshot import Snapshot
from gitray.plans.load import LoadResult, load_snapshot
from gitray.plans.materialize import materialized_store, plan_against_store
from gitray.plans.plan import Plan, plan_from_json, plan_schema_problem
from gitray.plans.render import Format, render, write_plan

if TYPE_CHECKING:
    from gitray.k8s.settings import KubeSettings

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run the command ``args`` name; errors are raised for the top level to render."""
    return _COMMANDS[args.command](args)


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


def _read(repo: str, revision: str | None, staged: bool = False) -> Snapshot:
    from gitray.git.source import read_snapshot, read_staged

    if staged:
        if revision:
            raise UserError("--staged reads Git's index: leave out --revision")
        return read_staged(repo)
    return read_snapshot(repo, revision)


def _load(repo: str, revision: str | None, overrides: dict[str, Any],
          warn: bool = True, report: str | None = None,
          staged: bool = False) -> tuple[LoadResult, Snapshot]:
    snapshot = _read(repo, revision, staged)
    from gitray.render import runners

    result = load_snapshot(snapshot, overrides, **runners())
    _check(result, warn, report, repo)
    return result, snapshot


def _check(result: LoadResult, warn: bool = True, report: str | None = None,
           repo: str = "", note: bool = True) -> None:
    """Warnings and (with ``note``, when the manifests are valid) the schemas used on stderr,
    or with ``report`` (--format github|codeclimate|sarif) errors and warnings in one report;
    invalid manifests raise, their errors first: nothing is said before them."""
    if report:
        from gitray.cli.reports import print_findings

        print_findings(report, result.diagnostics, result.warnings, repo)
        if result.diagnostics:
            raise ValidationError(result.diagnostics, reported=True)
        return
    for warning in result.warnings if warn else ():
        print(f"{warning.location}: warning: {warning.message}", file=sys.stderr)
    if result.diagnostics:
        raise ValidationError(result.diagnostics)
    if warn and note and result.kuberay is not None:
        _say_schemas(result)


def _say_schemas(result: LoadResult) -> None:
    print(f"Manifests judged by {_schemas_note(result)}.", file=sys.stderr)


def _schemas_note(result: LoadResult) -> str:
    assert result.kuberay is not None
    kuberay = result.kuberay
    transition = sum(r.transition for rules in kuberay.rules.values() for r in rules)
    checked = sum(len(rules) for rules in kuberay.rules.values()) - transition
    note = f"{kuberay.describe()}: {checked} CEL rules checked"
    if kuberay.origin.startswith("packaged"):
        note += (f"; {transition} transition rules (oldSelf) left to the API server: they "
                 "apply to updates, and no live object was read")
    else:
        note += f", {transition} transition rules against the live objects"
    return note


def _seconds(value: str, flag: str) -> float:
    try:
        return float(parse_duration(int(value) if value.isdigit() else value))
    except ValueError as e:
        raise UserError(f"{flag}: {e}") from e


def _kube_settings(args: argparse.Namespace) -> KubeSettings:
    from gitray.k8s.settings import KubeSettings

    return KubeSettings(kubeconfig=args.kubeconfig, context=args.context)


def _lease_namespace(args: argparse.Namespace) -> str:
    """``--lease-namespace``, else the namespace kubectl would use (in a pod, its own)."""
    if args.lease_namespace:
        return str(args.lease_namespace)
    from gitray.k8s.connection import default_namespace

    return default_namespace(_kube_settings(args))


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
        raise UserError(f"cannot read the {what} file {path}: {e.strerror}") from e


@dataclass(frozen=True)
class _Basis:
    live: LiveState | None  # None: the live cluster or ``base``, planned batch by batch
    against: str
    exact: bool
    announcement: str | None
    base: LiveStore | None = None  # --against REV: what that revision would have created
    base_error: ValidationError | None = None  # that revision is invalid (said after HEAD's)


def _basis(args: argparse.Namespace, overrides: dict[str, Any]) -> _Basis:
    from gitray.k8s.settings import cluster_configured

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
        return _Basis(None, "live", False, None)
    try:
        base, base_snapshot = _load(args.repo, against, overrides, warn=False)
    except ValidationError as e:
        return _Basis(None, against, True, None, base_error=e)
    # the base revision is dropped once materialized (compressed): both revisions' manifests
    # are never held at once
    return _Basis(None, f"revision:{base_snapshot.revision}", True, None,
                  materialized_store(base.workloads, base.config))


def _live_plan(args: argparse.Namespace, overrides: dict[str, Any], report: str | None
               ) -> tuple[LoadResult, Snapshot, Plan]:
    """Load the revision judged by the CRDs the cluster serves, then plan against it."""
    from gitray.engine.apply import Desired, desired_config, live_plan, read_records
    from gitray.engine.schemas import cluster_schemas
    from gitray.k8s.client import Kube
    from gitray.parsing.kuberay import packaged

    snapshot = _read(args.repo, args.revision)
    kube = Kube.connect(_kube_settings(args))
    try:
        kuberay = cluster_schemas(kube, packaged(desired_config(snapshot, overrides)
                                                 .kuberay_version))
        from gitray.render import runners

        result = load_snapshot(snapshot, overrides, kuberay=kuberay, **runners())
        _check(result, report=report, repo=args.repo, note=False)
        try:
            records = read_records(kube, _lease_namespace(args), result.config)
        except GitrayError as e:  # e.g. a CI identity that may not read the records
            print(f"warning: run records not read ({e}): a RayJob run KubeRay deleted when "
                  "it finished shows as a new run", file=sys.stderr)
            records = []
        with refusals_reported(args, result, snapshot, report):  # admission, capacity, None
            plan, _ = live_plan(kube, Desired(snapshot, result), records=records)
        if report is None:  # after a refusal by the planner (its error comes first)
            _say_schemas(result)
    finally:
        kube.close()
    return result, snapshot, plan


def _report(args: argparse.Namespace) -> str | None:
    return str(args.format) if args.format in REPORT_FORMATS else None


def _cmd_validate(args: argparse.Namespace) -> int:
    result, snapshot = _load(args.repo, args.revision, _overrides(args.set),
                             report=_report(args), staged=args.staged)
    n = len(result.workloads)
    print(f"{snapshot.label}: {n} workload{'s' if n != 1 else ''} valid",
          file=sys.stderr if args.format in ("codeclimate", "sarif") else sys.stdout)
    return EXIT_OK


def _cmd_plan(args: argparse.Namespace) -> int:
    from gitray.core.snapshot import snapshot_revision
    from gitray.k8s.settings import cluster_configured
    from gitray.plans.planner import compute_plan

    overrides = _overrides(args.set)
    report = _report(args)
    if args.against == "live" or (args.against is None
                                  and cluster_configured(_kube_settings(args))):
        # judged by the cluster's CRDs
        result, snapshot, plan = _live_plan(args, overrides, report)
    else:
        basis = _basis(args, overrides)  # first: see materialized_store
        result, snapshot = _load(args.repo, args.revision, overrides, report=report)
        if basis.base_error is not None:
            print(f"gitray: {basis.against}, the revision to plan against, is invalid:",
                  file=sys.stderr)
            raise basis.base_error
        if basis.announcement:
            print(basis.announcement, file=sys.stderr)
        revision, now = snapshot_revision(snapshot), datetime.now(UTC)
        if basis.base is not None:
            plan = plan_against_store(result.workloads, result.config, basis.base,
                                      revision=revision, against=basis.against, now=now,
                                      label=snapshot.label)
        else:
            assert basis.live is not None
            plan = compute_plan(result.workloads, basis.live, result.config, revision=revision,
                                against=basis.against, now=now, exact=basis.exact,
                                label=snapshot.label)
    if args.out:
        try:
            with Path(args.out).open("w") as out:
                write_plan(plan, Format.JSON, out)
        except OSError as e:
            raise UserError(f"cannot write the plan to {args.out}: {e.strerror}") from e
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                        and not os.environ.get("NO_COLOR"))
    if _report(args):
        from gitray.cli.reports import print_plan

        print_plan(args.format, plan, args.repo)
    else:
        write_plan(plan, Format(args.format), sys.stdout, colour=colour)
    if args.comment:
        if args.pr is None:
            raise UserError("--comment needs the pull request number: --pr N (or $GITRAY_PR)")
        from gitray.cli.console import say_retry
        from gitray.hosts.api import token_from
        from gitray.hosts.comments import upsert_plan_comment

        outcome = upsert_plan_comment(result.config.status,
                                      token_from("GITRAY_STATUS_TOKEN", args.status_token_file),
                                      args.pr, args.repo, render(plan, Format.MARKDOWN),
                                      on_retry=say_retry)
        print(f"plan comment on #{args.pr}: {outcome}", file=sys.stderr)
    if args.detailed_exitcode and plan.has_changes:
        return EXIT_CHANGES
    return EXIT_OK


def _read_plan_file(path: str) -> Plan:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UserError(f"cannot read the plan file {path}: {e.strerror}") from e
    except ValueError as e:
        raise UserError(f"{path} is not a gitray plan (not JSON: {e})") from e
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
    from gitray.cli.notifying import ApplyNotices
    from gitray.engine.apply import (
        check_saved_plan,
        desired_from,
        execute,
        live_plan,
        read_records,
        refuse_unappliable,
    )
    from gitray.engine.executor import Outcome
    from gitray.engine.wiring import ExecSettings, Wiring
    from gitray.k8s.client import Kube

    overrides = _overrides(args.set)
    snapshot = _read(args.repo, args.revision)
    kube = Kube.connect(_kube_settings(args))
    try:
        desired = desired_from(snapshot, overrides, kube=kube)  # judged by the cluster's CRDs
        records = read_records(kube, _lease_namespace(args), desired.config)
        if args.plan_file:
            plan = _read_plan_file(args.plan_file)
            check_saved_plan(plan, kube, desired, records)
            _say_schemas(desired.result)
            print(f"The saved plan {args.plan_file} is current; applying it.")
        else:
            plan, _ = live_plan(kube, desired, records=records)
            _say_schemas(desired.result)  # after a refusal by the planner (its error first)
            sys.stdout.write(render(plan, Format.TEXT, colour=sys.stdout.isatty()))
            refuse_unappliable(kube, plan)  # before asking (execute checks again)
            if plan.has_changes and not args.yes:
                _confirm()
        lease_ns = _lease_namespace(args)
        settings = ExecSettings(lease_namespace=lease_ns,
                                lease_name=args.lease_name,
                                lease_timeout_s=args.lease_timeout,
                                dashboard_mode=_dashboard_mode(args),
                                ray_token=_secret_file(args.ray_token_file, "Ray token"))

        def waiting(holder: str, seconds: float) -> None:
            print(f"waiting for the Lease {lease_ns}/{args.lease_name} held by "
                  f"{holder or 'nobody'} ({seconds:.0f} s)", file=sys.stderr, flush=True)

        outcomes = ApplyNotices(desired.config, snapshot.revision).run(  # console + receivers
            lambda report: execute(Wiring(kube, settings), desired, plan, report, waiting,
                                   replan=not args.plan_file,
                                   override_freeze=args.override_freeze or ""))
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
    from gitray.cli.status import show_status
    from gitray.engine.apply import desired_from
    from gitray.k8s.client import Kube
    from gitray.ray.dashboard import Resolver

    desired = desired_from(_read(args.repo, args.revision), _overrides(args.set))
    kube = Kube.connect(_kube_settings(args))
    try:
        show_status(kube, desired, _lease_namespace(args),
                    Resolver(kube, _dashboard_mode(args)), args.watch, args.lease_name)
    finally:
        kube.close()
    return EXIT_OK


def _cmd_sync(args: argparse.Namespace) -> int:
    from gitray.daemon.daemon import Daemon
    from gitray.daemon.logs import setup_logging
    from gitray.daemon.settings import DaemonSettings
    from gitray.engine.wiring import ExecSettings
    from gitray.git.source import default_cache_dir
    from gitray.hosts.api import token_from
    from gitray.parsing.config import env_overrides

    setup_logging(args.log_level, args.log_format == "json")
    host, _, port = args.http_address.rpartition(":")
    if not port.isdigit():
        raise UserError(f"--http-address must be HOST:PORT, got {args.http_address!r}")
    overrides = {**env_overrides(os.environ), **_overrides(args.set)}
    secret = _secret_file(args.webhook_secret_file, "webhook secret")
    execution = ExecSettings(
        lease_namespace=_lease_namespace(args), lease_name=args.lease_name,
        lease_timeout_s=args.lease_timeout, lease_duration_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline, retry_period_s=args.retry_period,
        dashboard_mode=_dashboard_mode(args),
        ray_token=_secret_file(args.ray_token_file, "Ray token"))
    settings = DaemonSettings(
        repo=args.repo, execution=execution, branch=args.branch,
        interval_s=_seconds(args.interval, "--interval"), drift_every=args.drift_every,
        deletion_interval_s=_seconds(args.deletion_interval, "--deletion-interval"),
        http_host=host or "0.0.0.0", http_port=int(port),
        webhook_secret=secret.encode() if secret else None, overrides=overrides,
        kube=_kube_settings(args), workers=args.workers, shards=args.shards,
        cache_dir=default_cache_dir(args.repo, Path(args.cache_dir)) if args.cache_dir else None,
        status_token=token_from("GITRAY_STATUS_TOKEN", args.status_token_file),
        allowed_signers=Path(args.allowed_signers) if args.allowed_signers else None)
    return Daemon(settings).run_forever()


def _cmd_signal(args: argparse.Namespace) -> int:
    from gitray.cli.control import act, parse_for
    from gitray.k8s.client import Kube

    key = parse_for(args.command, args.workload)  # promote|abort|approve|suspend|resume|retry
    kube = Kube.connect(_kube_settings(args))
    try:
        print(act(kube, _lease_namespace(args), key, args.command))
    finally:
        kube.close()
    return EXIT_OK


_COMMANDS = {"validate": _cmd_validate, "plan": _cmd_plan, "apply": _cmd_apply,
             "status": _cmd_status, "sync": _cmd_sync, "promote": _cmd_signal,
             "abort": _cmd_signal, "suspend": _cmd_signal, "resume": _cmd_signal,
             "retry": _cmd_signal, "approve": _cmd_signal}


