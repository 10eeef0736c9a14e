"""What a Gateway API HTTPRoute did to real requests (stdlib + the kubernetes client).

- :class:`RouteObserver` records the route's backend weights over time, as the API server holds
  them (polled every 0.25 s), keyed by cluster (``<cluster>-serve-svc`` backends, the naming of
  both gitray's and KubeRay's incremental upgrade).
- :func:`periods` splits a load generator's timeline (testenv/load.py) by those weights:
  the requests sent while each set of weights held, from ``settle`` seconds after the change
  (Traefik applies a route change after its provider's watch and a 2 s throttle) to the next,
  with what answered them.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from testenv.load import LoadResult

__all__ = ["Period", "RouteLog", "RouteObserver", "describe", "periods"]

SETTLE_S = 4.0


@dataclass
class RouteLog:
    """The HTTPRoute's backend weights over time (wall clock), as the API server holds them."""

    changes: list[tuple[float, dict[str, int]]] = field(default_factory=list)

    def last(self) -> dict[str, int]:
        return self.changes[-1][1] if self.changes else {}

    def max_weight(self, cluster: str) -> int:
        return max((w.get(cluster, 0) for _, w in self.changes), default=0)

    def first_at(self, cluster: str, weight: int) -> float | None:
        """When ``cluster`` first had ``weight``."""
        return next((t for t, w in self.changes if w.get(cluster) == weight), None)


@dataclass
class RouteObserver:
    """``with RouteObserver(custom_api, namespace, route) as log:`` records ``log``."""

    custom: Any  # kubernetes.client.CustomObjectsApi
    ns: str
    route: str
    interval: float = 0.25
    log: RouteLog = field(default_factory=RouteLog)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _weights(self) -> dict[str, int] | None:
        try:
            route = self.custom.get_namespaced_custom_object(
                "gateway.networking.k8s.io", "v1", self.ns, "httproutes", self.route)
            refs = route["spec"]["rules"][0]["backendRefs"]
        except Exception:  # absent yet, or between writes
            return None
        return {r["name"].removesuffix("-serve-svc"): int(r.get("weight", 1)) for r in refs}

    def _run(self) -> None:
        last: dict[str, int] | None = None
        while not self._stop.wait(self.interval):
            weights = self._weights()
            if weights is not None and weights != last:
                self.log.changes.append((time.time(), weights))
                last = weights

    def __enter__(self) -> RouteLog:
        self._thread = threading.Thread(target=self._run, daemon=True, name="route-observer")
        self._thread.start()
        return self.log

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


@dataclass(frozen=True)
class Period:
    start: float
    weights: dict[str, int]
    sent: int
    answers: dict[str, int]  # 2xx body or "!<failure kind>" -> count

    def share(self, body: str) -> float:
        """Percent of this period's requests answered ``body``."""
        return 100.0 * self.answers.get(body, 0) / self.sent if self.sent else float("nan")


def periods(log: RouteLog, load: LoadResult, settle: float = SETTLE_S) -> list[Period]:
    """The requests sent while each set of weights held (from ``settle`` s after the change
    to the next change), with what answered them; periods without requests left out."""
    out = []
    bounds = [*log.changes, (float("inf"), {})]
    for (start, weights), (end, _) in itertools.pairwise(bounds):
        answers: dict[str, int] = {}
        for sent_at, body in load.timeline:
            if start + settle <= sent_at < end:
                answers[body] = answers.get(body, 0) + 1
        if answers:
            out.append(Period(start, weights, sum(answers.values()), answers))
    return out


def describe(ps: list[Period], body: str) -> str:
    """One line per period: when, the weights, how many requests, the share of ``body``."""
    return "\n".join(f"  {time.strftime('%H:%M:%S', time.gmtime(p.start))} weights "
                     f"{p.weights}: {p.sent} requests, {body} {p.share(body):.1f} %, "
                     f"answers {p.answers}" for p in ps)
