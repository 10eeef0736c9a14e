"""Watching what parked waits wait on, so that a wait that ends is resumed at once. I/O
(watches), around a pure decision (``released_by``).

The re-check rounds (``gitray.daemon.rechecks``) look at a parked wait 2, 4, 8 s after it
parked, then every 15 s: a RayCluster that became ready just after a round was noticed up to
15 s late (benchmark 6 on KubeRay v1.7.0: 7.5 s between the head pod's readiness and gitray's
next step, where KubeRay's own controller, which watches, went on within a second). So the
daemon also keeps one watch per (kind, namespace) that parked waits wait on — a RayCluster
becoming ready, a RayJob's run ending — and an event that settles a wait releases it at once
and asks for a pass, which resumes its run. The rounds stay as they were: they release waits
whose timeout ran out, and every wait this cannot watch (more than ``MAX_WATCHES`` kinds and
namespaces, or the API server refusing or dropping a watch: it is tried again after
``RETRY_S``).

A watch starts without a resourceVersion (the API server first sends every object as it is:
a wait that settled before its watch began is released by that first event) and goes on from
the last version it saw; it ends once no parked wait needs it (at its next event or its
server-side timeout) and when the daemon stops (``stop``: its client's watches are closed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from gitray.core.errors import GitrayError, Interrupted
from gitray.core.model import ObjectKey
from gitray.daemon.rechecks import WATCHED, Read, reads, settled
from gitray.engine.fleet import Fleet, Parked
from gitray.engine.parking import remember
from gitray.k8s.client import Kube
from gitray.plans.steptypes import StepType

__all__ = ["MAX_WATCHES", "WaitWatches", "released_by"]

log = logging.getLogger("gitray.sync")

# (kind, namespace) pairs watched at once (each holds a connection of the client's pool, which
# the runs' requests share); the waits on others are released by the rounds alone
MAX_WATCHES = 8
WATCH_TIMEOUT_S = 60  # server-side end of one watch; the next goes on from the last version
RETRY_S = 2.0  # after a watch failed (the rounds re-check meanwhile)


def _waits_on(key: ObjectKey, p: Parked, read: Read, name: str) -> bool:
    """Whether the parked wait of ``key`` waits on object ``name`` of ``read``. Pure."""
    step = p.waiting.step
    return (key.namespace == read[2] and step.target == name
            and WATCHED.get(step.type) == read[:2])


def released_by(parked: Mapping[ObjectKey, Parked], read: Read, event: str,
                obj: Mapping[str, Any]) -> list[ObjectKey]:
    """The parked waits (not released yet) that ``event`` on ``obj``, seen by the watch of
    ``read``, settles: those waiting on that object, of that kind, in that namespace. Pure."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    seen = None if event == "DELETED" else obj
    return sorted(k for k, p in parked.items()
                  if not p.released and _waits_on(k, p, read, name)
                  and settled(p.waiting.step.type, seen))


class WaitWatches:
    """One watch per (kind, namespace) that the fleet's parked waits wait on, on a client of
    its own (made from ``kube``'s connection: :meth:`stop` closes only its watches)."""

    def __init__(self, kube: Kube, fleet: Fleet, on_release: Callable[[], None]) -> None:
        self.kube = Kube(kube.api_client, kube.settings)
        self.fleet = fleet
        self.on_release = on_release  # a pass is to resume the released runs
        self._lock = threading.Lock()
        self._threads: dict[Read, threading.Thread] = {}
        self._wanted: frozenset[Read] = frozenset()
        self._objects: dict[Read, dict[str, Mapping[str, Any]]] = {}  # as last seen, by name
        self._stopped = threading.Event()

    def follow(self) -> None:
        """Watch what the parked waits wait on now (called by every re-check round), and
        release at once a wait that parked on what a watch already saw settled (it settled
        between its run's check and its parking: no event comes for it any more)."""
        parked = self.fleet.parked()
        waiting = {k: p for k, p in parked.items() if not p.released}
        wanted = frozenset(reads(parked, list(waiting)))
        with self._lock:
            self._wanted = wanted
            released = sorted(k for k, p in waiting.items()
                              if (step := p.waiting.step).type in WATCHED
                              and (seen := self._objects.get((*WATCHED[step.type],
                                                              k.namespace), {}).get(step.target))
                              and settled(step.type, seen))
            for read in sorted(wanted - set(self._threads)):
                if self._stopped.is_set() or len(self._threads) >= MAX_WATCHES:
                    break
                thread = threading.Thread(target=self._run, args=(read,), daemon=True,
                                          name=f"gitray-wait-watch-{read[1]}-{read[2]}")
                self._threads[read] = thread
                thread.start()
        self._release(released, "as seen")

    def watching(self) -> list[Read]:
        with self._lock:
            return sorted(self._threads)

    def stop(self) -> None:
        self._stopped.set()
        self.kube.close_watches()
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout=5)

    def _needed(self, read: Read) -> bool:
        with self._lock:
            return read in self._wanted and not self._stopped.is_set()

    def _run(self, read: Read) -> None:
        api, kind, ns = read
        version = ""
        try:
            while self._needed(read):
                if not version:  # (a watch from now lists every object first)
                    with self._lock:
                        self._objects.pop(read, None)
                try:
                    for event, obj in self.kube.watch(api, kind, ns, resource_version=version,
                                                      timeout_s=WATCH_TIMEOUT_S):
                        if event == "ERROR":  # e.g. its version expired: start afresh
                            version = ""
                            break
                        version = str((obj.get("metadata") or {}).get("resourceVersion")
                                      or version)
                        if event != "BOOKMARK":
                            self._seen(read, event, obj)
                        if not self._needed(read):
                            return
                except Interrupted:
                    return
                except GitrayError as e:
                    log.debug("the watch of %s in %s ended: %s (again in %.0f s)", kind, ns,
                              e, RETRY_S)
                    version = ""
                    self._stopped.wait(RETRY_S)
        finally:
            with self._lock:
                self._threads.pop(read, None)
                self._objects.pop(read, None)

    def _seen(self, read: Read, event: str, obj: Mapping[str, Any]) -> None:
        parked = self.fleet.parked()
        name = str((obj.get("metadata") or {}).get("name") or "")
        with self._lock:
            objects = self._objects.setdefault(read, {})
            if event == "DELETED":
                objects.pop(name, None)
            else:
                objects[name] = obj
        if read[:2] == WATCHED[StepType.WAIT_JOB] and any(
                _waits_on(k, p, read, name) for k, p in parked.items()):
            # a RayJob that KubeRay deletes once its run ends (DeleteSelf): its last state
            # (the deletion event's) carries the final status its run reports
            remember(read[1], read[2], name, obj)
        self._release(released_by(parked, read, event, obj),
                      f"{read[1]} {read[2]}/{name} {event.lower()}")

    def _release(self, released: list[ObjectKey], why: str) -> None:
        if released:
            self.fleet.rechecked(released, [])
            log.debug("waits to resume (%s): %s", why, ", ".join(str(k) for k in released))
            self.on_release()
