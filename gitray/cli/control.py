"""``gitray suspend``, ``gitray resume`` and ``gitray retry``: ask ``gitray sync`` (and
``gitray apply``) to leave a workload alone, to go on with it, or to run its failed run once
more at the same revision (``promote``, ``abort`` and ``approve`` leave a signal for the run
in flight instead: ``gitray.cli.steer``). I/O (reads the run record, writes the control by
compare-and-swap: ``gitray.engine.controls``). Holds no Lease: the leader reads the control
on its next pass.
"""

from __future__ import annotations

from dataclasses import replace

from gitray.cli.steer import parse_workload, send_signal, who
from gitray.core.errors import ConflictError, UserError
from gitray.core.model import Kind, ObjectKey
from gitray.core.timefmt import utc_timestamp
from gitray.engine.controls import Control, ControlStore
from gitray.engine.progress import RecordReader
from gitray.engine.record import RunState
from gitray.k8s.client import Kube

__all__ = ["act", "parse_any_workload", "parse_for", "set_control"]

_TRIES = 3
_RAY_KINDS = {k.value.lower(): k.value for k in Kind}


def parse_any_workload(text: str) -> ObjectKey:
    """``NAMESPACE/KIND/NAME`` as gitray prints workloads (Ray kinds in any case)."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise UserError(f"expected NAMESPACE/KIND/NAME (e.g. ray/RayService/serve), got "
                        f"{text!r}")
    namespace, kind, name = parts
    return ObjectKey(_RAY_KINDS.get(kind.lower(), kind), namespace, name)


def parse_for(command: str, text: str) -> ObjectKey:
    """The workload a command names: promote and abort take NAMESPACE/RAYSERVICE (and approve
    either form)."""
    if command in {"promote", "abort"} or (command == "approve" and text.count("/") == 1):
        return parse_workload(text)
    return parse_any_workload(text)


def act(kube: Kube, lease_namespace: str, key: ObjectKey, command: str) -> str:
    """Run ``command`` (promote, abort, approve, suspend, resume, retry) on ``key``; the line
    to print."""
    if command in {"promote", "abort", "approve"}:
        return send_signal(kube, lease_namespace, key, command)
    return set_control(kube, lease_namespace, key, command)


def set_control(kube: Kube, lease_namespace: str, key: ObjectKey, action: str) -> str:
    """Suspend, resume or retry ``key``; the line to print."""
    store = ControlStore(kube, lease_namespace)
    for _ in range(_TRIES):
        current = store.load(key) or Control(key)
        now = utc_timestamp(digits=3)
        if action == "suspend":
            if current.suspended:
                return f"{key} was already suspended (since {current.suspended_at})"
            wanted = replace(current, suspended_by=who(), suspended_at=now)
            said = (f"{key} suspended: gitray sync and gitray apply start no run of it until "
                    f"gitray resume {key} (a run under way goes on to its end)")
        elif action == "resume":
            if not current.suspended:
                return f"{key} is not suspended: nothing to resume"
            wanted = replace(current, suspended_by="", suspended_at="")
            said = f"{key} resumed: gitray sync goes on with it at its next poll"
        else:
            record = RecordReader(kube, lease_namespace).load(key)
            if record is None or record.state is not RunState.FAILED:
                state = "no run record" if record is None else f"its run is {record.state}"
                raise UserError(f"nothing to retry: {key} has {state} in namespace "
                                f"{lease_namespace} (retry runs a failed run again)")
            wanted = replace(current, retry_by=who(), retry_at=now)
            said = (f"{key}: its failed run at {record.revision[:12]} runs again at gitray "
                    "sync's next poll")
        try:
            store.put(wanted)
        except ConflictError:
            continue  # written meanwhile: read again and decide again
        return said
    raise UserError(f"{key}: the control was changed by someone else {_TRIES} times in a row; "
                    "try again")
