"""``gitray promote`` and ``gitray abort``: leave a signal for the incremental RayService
upgrade in flight. I/O (reads the run record, writes the signal by compare-and-swap).

The command holds no Lease (the leader does, and acts on the signal): it reads the workload's
run record, decides with ``gitray.engine.incremental.upgradecontrol.request`` whether there is
anything to promote or abort, and creates or replaces the signal ConfigMap next to the record
(``gitray.engine.incremental.signals``). A lost compare-and-swap (the executor just consumed a
signal, or another command wrote one) is read again and decided again, a few times.
"""

from __future__ import annotations

import getpass
import socket

from gitray.core.errors import ConflictError, UserError
from gitray.core.model import LABEL_INSTANCE, Kind, ObjectKey
from gitray.core.timefmt import utc_timestamp
from gitray.engine.incremental.signals import SignalStore
from gitray.engine.incremental.upgradecontrol import Signal, SignalAction, request
from gitray.engine.progress import RecordReader
from gitray.engine.record import record_name
from gitray.k8s.client import Kube

__all__ = ["parse_workload", "send_signal", "who"]

_TRIES = 3


def parse_workload(text: str) -> ObjectKey:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise UserError(f"expected NAMESPACE/RAYSERVICE, got {text!r}")
    return ObjectKey(Kind.RAY_SERVICE.value, namespace, name)


def who() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (OSError, KeyError):
        return ""


def send_signal(kube: Kube, lease_namespace: str, key: ObjectKey, action: str) -> str:
    """Promote or abort the upgrade of ``key`` in flight; the line to print."""
    store = SignalStore(kube, lease_namespace)
    for _ in range(_TRIES):
        cm = kube.get_or_none("v1", "ConfigMap", lease_namespace, record_name(key))
        if cm is None:
            raise UserError(f"gitray has no run record of {key} in namespace "
                            f"{lease_namespace}: it never applied that RayService there "
                            "(check the name and --lease-namespace)")
        record = RecordReader(kube, lease_namespace).load(key)
        if record is None:
            continue  # deleted meanwhile: look again (and say so)
        instance = str(((cm.get("metadata") or {}).get("labels") or {}).get(LABEL_INSTANCE)
                       or "gitray")
        decided = request(record, SignalAction(action), store.load(key),
                          utc_timestamp(digits=0), who())
        signal: Signal | None = decided.signal
        if signal is None:
            return decided.message
        try:
            store.put(signal, instance)
        except ConflictError:
            continue  # written meanwhile (a consumed or another signal): read and decide again
        return decided.message
    raise UserError(f"the signal of {key} kept changing while it was written; try again")
