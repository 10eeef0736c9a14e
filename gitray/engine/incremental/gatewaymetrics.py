"""A gateway's Prometheus metrics: parse the text format, compute one backend's traffic over a
window. Pure, no I/O.

The analysis of an incremental upgrade (``run-analysis``) scrapes the gateway's metrics
endpoint at the start and at the end of its window and compares the two scrapes: counters only
grow, so the traffic of the window is the difference (a counter that went *down* was reset —
the gateway restarted — and its whole new value is the window's, as Prometheus' ``increase``
assumes).

Traefik (the ``traefik`` provider, the only one so far) labels its per-service metrics with
``code``, ``method``, ``protocol`` and ``service``:

- ``traefik_service_requests_total`` — a counter per response code;
- ``traefik_service_request_duration_seconds_bucket`` — a cumulative histogram (``le``).

Its Kubernetes Gateway provider names the service of an HTTPRoute backendRef to a Service
``<namespace>-<service>-http-<port>``, suffixed with the provider (``@kubernetesgateway``);
:func:`traefik_service` gives that name and :func:`window` matches it with any provider
suffix. (Seen on Traefik v3.6.12 in the test environment:
``t-1ce0c62f-fruit-9e130-serve-svc-http-8000@kubernetesgateway``.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Series",
    "Traffic",
    "counted",
    "parse_text",
    "quantile",
    "traefik_service",
    "window",
]


@dataclass(frozen=True, order=True)
class Series:
    """One time series: a metric name and its labels (sorted ``(name, value)`` pairs)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, name: str) -> str:
        return next((v for k, v in self.labels if k == name), "")


Samples = Mapping[Series, float]


def _value(text: str, line: int) -> float:
    special = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"line {line}: {text!r} is not a sample value") from None


def _labels(text: str, start: int, line: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """The labels of ``{a="x",b="y"}`` starting at ``text[start] == '{'``; and the index after
    the closing brace. Label values may hold escaped ``\\\\``, ``\\"`` and ``\\n``."""
    pairs: list[tuple[str, str]] = []
    i = start + 1
    while True:
        while i < len(text) and text[i] in " ,":
            i += 1
        if i < len(text) and text[i] == "}":
            return tuple(sorted(pairs)), i + 1
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= len(text) or text[eq + 1] != '"':
            raise ValueError(f"line {line}: malformed labels")
        name = text[i:eq].strip()
        i, value = eq + 2, []
        while True:
            if i >= len(text):
                raise ValueError(f"line {line}: unterminated label value")
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(text[i + 1], text[i + 1]))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                value.append(c)
                i += 1
        pairs.append((name, "".join(value)))


def parse_text(text: str, names: Iterable[str] | None = None) -> dict[Series, float]:
    """The samples of a Prometheus text-format exposition (version 0.0.4), optionally only
    those of the metric ``names``. Comments (``# HELP``, ``# TYPE``) and timestamps are
    ignored. ``ValueError`` names the first malformed line."""
    wanted = frozenset(names) if names is not None else None
    out: dict[Series, float] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        brace, space = line.find("{"), line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name = line[:brace]
            if wanted is not None and name not in wanted:
                continue
            labels, after = _labels(line, brace, number)
            rest = line[after:].split()
        else:
            name, *rest = line.split()
            labels = ()
            if wanted is not None and name not in wanted:
                continue
        if not name or not rest:
            raise ValueError(f"line {number}: no sample value")
        out[Series(name, labels)] = _value(rest[0], number)
    return out


def traefik_service(namespace: str, service: str, port: int) -> str:
    """Traefik's name of the service it makes for an HTTPRoute backendRef (provider suffix
    left out)."""
    return f"{namespace}-{service}-http-{port}"


def _is(label: str, service: str) -> bool:
    return label == service or label.split("@", 1)[0] == service


def _increase(before: float | None, after: float) -> float:
    if before is None or after < before:  # new series, or a counter reset
        return after
    return after - before


@dataclass(frozen=True)
class Traffic:
    """What one backend service received during a window."""

    requests: float  # responses of any code
    server_errors: float  # 5xx responses
    buckets: tuple[tuple[float, float], ...] = ()  # cumulative (le, count), le ascending

    @property
    def success_rate(self) -> float | None:
        """Share of non-5xx responses, in percent; None without requests."""
        if self.requests <= 0:
            return None
        return 100.0 * (self.requests - self.server_errors) / self.requests


def window(before: Samples, after: Samples, service: str, requests_metric: str,
           durations_metric: str) -> Traffic:
    """The traffic of backend ``service`` between two scrapes (``before``, ``after``)."""
    return counted(before, after, lambda s: _is(s.label("service"), service), requests_metric,
                   durations_metric + "_bucket")


def counted(before: Samples, after: Samples, keep: Callable[[Series], bool],
            requests_metric: str, bucket_metric: str, code_label: str = "code",
            le_seconds: float = 1.0) -> Traffic:
    """The traffic of the series ``keep`` selects between two scrapes: responses of
    ``requests_metric`` by their ``code_label``, durations from the cumulative histogram
    ``bucket_metric`` whose bounds are ``le_seconds`` seconds each (0.001 for bounds in
    ms)."""
    requests = errors = 0.0
    by_le: dict[float, float] = {}
    for series, value in after.items():
        if not keep(series):
            continue
        if series.name == requests_metric:
            inc = _increase(before.get(series), value)
            requests += inc
            if series.label(code_label).startswith("5"):
                errors += inc
        elif series.name == bucket_metric:
            le = _value(series.label("le"), 0) * le_seconds if series.label("le") else math.inf
            by_le[le] = by_le.get(le, 0.0) + _increase(before.get(series), value)
    running, buckets = 0.0, []
    for le in sorted(by_le):  # deltas of cumulative buckets reset apart: keep them monotonic
        running = max(running, by_le[le])
        buckets.append((le, running))
    return Traffic(requests, errors, tuple(buckets))


def quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> float | None:
    """The ``q`` quantile (0..1) of a cumulative histogram, interpolated linearly inside its
    bucket as Prometheus' ``histogram_quantile`` does; None when it counted nothing. A rank
    in the ``+Inf`` bucket gives the highest finite bound (the histogram cannot say more)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank and count > lower_count:
            if math.isinf(le):
                return lower_le
            return lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count)
        lower_le, lower_count = (le if not math.isinf(le) else lower_le), count
    return lower_le
