"""``gitray status``: per workload, the synced revision, the running step, the active and
pending clusters and its health (gitray.plans.health): a RayCluster's state and pods, a RayJob's
latest run, a RayCronJob's schedule and runs, each Serve application of a RayService; for a
sharded ``gitray sync``, each workload's shard and the replica holding it. I/O (reads records,
live state, the instance's Leases, the RayCronJobs' runs and dashboards).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from gitray.core.errors import GitrayError
from gitray.core.model import Kind, ObjectKey
from gitray.engine.apply import Desired, read_live
from gitray.engine.controls import ControlStore, suspension
from gitray.engine.health import health_by_workload
from gitray.engine.progress import RecordReader
from gitray.engine.record import Record, RunState
from gitray.engine.shardleases import lease_seen
from gitray.engine.shards import shard_label, shard_of
from gitray.engine.shardview import lease_selector, shard_holders
from gitray.k8s.client import Kube
from gitray.k8s.election import LEASE_API_VERSION
from gitray.plans.rayservice.planner import read_rayservice_live
from gitray.plans.steptypes import StepType
from gitray.ray.dashboard import Resolver

__all__ = ["StatusRow", "render_status", "shard_owners", "show_status", "watch",
           "workload_status"]

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


@dataclass(frozen=True)
class StatusRow:
    key: ObjectKey
    revision: str
    state: str
    step: str
    active: str = "-"
    pending: str = "-"
    health: str = "-"
    reason: str = ""
    owner: str = ""  # sharded: "<shard> <holder>" ("free" when no replica holds it)


def _step(record: Record) -> str:
    total = len(record.plan.steps)
    if record.state is RunState.RUNNING and record.cursor < total:
        return f"{record.cursor + 1}/{total} {record.plan.steps[record.cursor].type.value}"
    return f"{min(record.cursor, total)}/{total}"


def _held(record: Record | None) -> str:
    """What a run held at a blue-green upgrade's approval gate waits for ("" otherwise)."""
    if record is None or record.state is not RunState.RUNNING \
            or record.cursor >= len(record.plan.steps):
        return ""
    step = record.plan.steps[record.cursor]
    if step.type is not StepType.AWAIT_APPROVAL:
        return ""
    return (f"held before the switch to {step.params.get('cluster')} until "
            f"`{step.params.get('approve')}`")


def shard_owners(kube: Kube, lease_namespace: str, lease: str) -> Callable[[ObjectKey], str]:
    """Each workload's shard and its holder, from one LIST of the instance's Leases; "" for
    every workload when the instance is not sharded."""
    items, _ = kube.list(LEASE_API_VERSION, "Lease", namespace=lease_namespace,
                         label_selector=lease_selector(lease))
    count, holders = shard_holders(lease, map(lease_seen, items))
    if count == 1:
        return lambda _key: ""

    def owner(key: ObjectKey) -> str:
        shard = shard_of(key, count)
        return f"{shard_label(shard, count)} {holders[shard] or 'free'}"
    return owner


def workload_status(kube: Kube, desired: Desired, lease_namespace: str,
                    resolver: Resolver, lease: str = "gitray") -> list[StatusRow]:
    records = {r.key: r for r in RecordReader(kube, lease_namespace,
                                              desired.config.instance).list()}
    owner = shard_owners(kube, lease_namespace, lease)
    controls = ControlStore(kube, lease_namespace).load_all()  # gitray suspend
    live = read_live(kube, desired)
    keys = sorted({w.key for w in desired.workloads} | set(records) | set(live.owners()))
    health = health_by_workload(kube, resolver, keys, live)
    rows = []
    for key in keys:
        record = records.get(key)
        active = pending = "-"
        if key.kind == Kind.RAY_SERVICE:
            rs = read_rayservice_live(live.owned_by(key))
            active, pending = rs.active or "-", ",".join(sorted(rs.pending())) or "-"
        shown = health[key]
        if key.kind == Kind.RAY_JOB and shown == "-" and record is not None and record.runs:
            last = record.runs[-1]  # KubeRay deleted the run (deletionStrategy): as recorded
            shown = f"{last.name}: {last.outcome} (recorded; the RayJob is gone)"
        reason = "; ".join(r for r in (suspension(controls.get(key)),
                                       _held(record), record.reason if record else "") if r)
        rows.append(StatusRow(key, record.revision[:12] if record else "-",
                              record.state.value if record else "never applied",
                              _step(record) if record else "-", active, pending, shown,
                              reason, owner(key)))
    return rows


def render_status(rows: list[StatusRow]) -> str:
    """The table; an OWNER column (shard and replica) when the instance is sharded."""
    sharded = any(r.owner for r in rows)
    header = ("WORKLOAD", "REVISION", "STATE", "STEP", "ACTIVE", "PENDING", "HEALTH",
              *(("OWNER",) if sharded else ()))
    table = [header] + [(str(r.key), r.revision, r.state, r.step, r.active, r.pending, r.health,
                         *((r.owner,) if sharded else ())) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in table]
    lines += [f"{r.key}: {r.reason}" for r in rows if r.reason]
    return "\n".join(lines) + "\n"


def show_status(kube: Kube, desired: Desired, lease_namespace: str, resolver: Resolver,
                every: float | None, lease: str = "gitray") -> None:
    """Print the status table once, or (``every`` seconds) again and again until Ctrl-C (or
    SIGTERM). ``lease``: the instance's Lease name (``gitray sync --lease-name``)."""
    def table() -> str:
        return render_status(workload_status(kube, desired, lease_namespace, resolver, lease))
    if every is None:
        sys.stdout.write(table())
        return
    # Ctrl-C and SIGTERM end the watch cleanly, even where SIGINT came in ignored (a shell
    # starts background commands so, and an ignored signal stays ignored across exec)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    watch(table, every, sys.stdout, sys.stdout.isatty())


def watch(table: Callable[[], str], every: float, out: TextIO, in_place: bool,
          sleep: Callable[[float], None] = time.sleep, rounds: int | None = None) -> None:
    """Show ``table()`` every ``every`` s: in place on a terminal, else one block after
    another, each under a header line with the time. A read that fails (the API server
    away) is shown in the table's place and the watch goes on; Ctrl-C ends it."""
    done = 0
    try:
        while rounds is None or done < rounds:
            stamp = datetime.now(UTC).strftime("%H:%M:%S UTC")
            try:
                body = table()
            except GitrayError as e:
                body = f"gitray: {e} (trying again in {every:g} s)\n"
            header = f"every {every:g} s: gitray status   {stamp}\n\n"
            out.write((CLEAR if in_place else ("\n" if done else "")) + header + body)
            out.flush()
            done += 1
            if rounds is None or done < rounds:
                sleep(every)
    except KeyboardInterrupt:
        out.write("\n")
