"""Watch one Lease object, so that a standby hears of a release (or a new holder) at once
instead of on its next retry tick. Does I/O (a GET and a long-running watch).

A background thread reads the Lease, then watches it by name from that ``resourceVersion``
and calls ``on_change(record)`` for the record read and for every change (None: the Lease does
not exist). Any error — the API server away, an expired ``resourceVersion``, a watch the server
ended — is followed by a pause of one retry period and a fresh read. The watch only makes a
standby quicker: the election's own periodic attempts (the poll) stay the fallback and decide
alone whether the Lease may be taken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gitray.core.errors import GitrayError, Interrupted
from gitray.k8s.client import Kube
from gitray.k8s.election import LEASE_API_VERSION, LeaseRecord, LeaseSettings

__all__ = ["LeaseWatch", "OnLeaseChange"]

WATCH_TIMEOUT_S = 300  # server-side end of one watch; a new one starts from the last version

OnLeaseChange = Callable[[LeaseRecord | None], None]

log = logging.getLogger(__name__)


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class LeaseWatch:
    """Calls ``on_change`` from its own thread whenever the Lease named by ``settings``
    changes. ``kube`` should be a client of its own: :meth:`stop` closes its watches."""

    def __init__(self, kube: Kube, settings: LeaseSettings, on_change: OnLeaseChange) -> None:
        self._kube = kube
        self._settings = settings
        self._on_change = on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gitray-lease-watch",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kube.close_watches()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        s = self._settings
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._watch_once()
                failures = 0
            except Interrupted:
                return
            except GitrayError as e:
                failures += 1
                if failures == 1:  # the periodic attempts carry on; say it once per outage
                    log.info("watching the Lease %s/%s: %s (the periodic attempts go on)",
                             s.namespace, s.name, e)
            except Exception:  # never let the thread die silently
                failures += 1
                log.exception("watching the Lease %s/%s failed", s.namespace, s.name)
            # after an error, or a watch the server ended at once (it should last minutes):
            # pause instead of spinning
            if failures or time.monotonic() - started < 1.0:
                self._stop.wait(s.retry_period_s)
        log.debug("stopped watching the Lease %s/%s", s.namespace, s.name)

    def _watch_once(self) -> None:
        s = self._settings
        live = self._kube.get_or_none(LEASE_API_VERSION, "Lease", s.namespace, s.name)
        self._notify(live)
        version = _version(live) if live is not None else ""
        for kind, obj in self._kube.watch(LEASE_API_VERSION, "Lease", s.namespace,
                                          field_selector=f"metadata.name={s.name}",
                                          resource_version=version,
                                          timeout_s=WATCH_TIMEOUT_S):
            if self._stop.is_set():
                return
            if kind == "ERROR":  # e.g. 410 Gone: the version expired; read again
                raise _WatchEnded(f"the watch ended: {obj.get('message') or obj}")
            self._notify(None if kind == "DELETED" else obj)

    def _notify(self, live: Mapping[str, Any] | None) -> None:
        self._on_change(None if live is None else LeaseRecord.from_spec(live.get("spec")))


class _WatchEnded(GitrayError):
    """The API server ended the watch with an error event (read again)."""
