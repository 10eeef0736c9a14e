"""The checks of a ``run-analysis`` step, judged from what was measured. Pure, no I/O.

Each check (``gitray.plans.rayservice.analysis``: serve-health, success-rate, latency, webhook)
gives a :class:`CheckResult` — passed, failed or inconclusive — with the value it measured, in
words a commit status can show ("success-rate 91.2 % < 99 % (114 of 125 requests)"). An analysis
fails when any check failed; inconclusive checks (too few requests in the window) do not fail
it. :func:`judge` turns the results into the step's message or an ``AnalysisFailed`` naming the
first failed check and its value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gitray.core.errors import AnalysisFailed
from gitray.engine.incremental.gatewaymetrics import Traffic, quantile

__all__ = [
    "CheckResult",
    "Verdict",
    "at_serve",
    "judge",
    "latency",
    "serve_health",
    "serve_unmeasured",
    "success_rate",
    "unmeasured",
    "webhook",
]

_BAD_DEPLOYMENTS = frozenset({"UNHEALTHY", "DEPLOY_FAILED"})


class Verdict(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class CheckResult:
    name: str
    verdict: Verdict
    value: str  # what was measured, e.g. "91.2 %", "420 ms", "HTTP 503"
    detail: str = ""  # e.g. "< 99 % (114 of 125 requests)"

    def describe(self) -> str:
        return " ".join(p for p in (self.name, self.value, self.detail) if p)


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def success_rate(check: Mapping[str, Any], traffic: Traffic) -> CheckResult:
    """Non-5xx share of the new cluster's requests at the gateway, against ``min``."""
    name, minimum = str(check["name"]), float(check["min"])
    needed = int(check.get("minRequests", 0))
    rate = traffic.success_rate
    counted = f"{_n(traffic.requests - traffic.server_errors)} of {_n(traffic.requests)} " \
              "requests"
    if rate is None or traffic.requests < needed:
        return CheckResult(name, Verdict.INCONCLUSIVE, f"{_n(traffic.requests)} requests",
                           f"(fewer than minRequests {needed})")
    value = f"{rate:.1f} %"
    if rate < minimum:
        return CheckResult(name, Verdict.FAILED, value, f"< {_n(minimum)} % ({counted})")
    return CheckResult(name, Verdict.PASSED, value, f">= {_n(minimum)} % ({counted})")


def latency(check: Mapping[str, Any], traffic: Traffic) -> CheckResult:
    """A percentile of the new cluster's request durations at the gateway, against
    ``maxMs``."""
    name, percentile = str(check["name"]), int(check.get("percentile", 95))
    limit_ms, needed = float(check["maxMs"]), int(check.get("minRequests", 0))
    counted = traffic.buckets[-1][1] if traffic.buckets else 0.0
    seconds = quantile(percentile / 100, traffic.buckets)
    if seconds is None or counted < needed:
        return CheckResult(name, Verdict.INCONCLUSIVE, f"{_n(counted)} requests",
                           f"(fewer than minRequests {needed})")
    value = f"p{percentile} {seconds * 1000:.0f} ms"
    if seconds * 1000 > limit_ms:
        return CheckResult(name, Verdict.FAILED, value,
                           f"> {_n(limit_ms)} ms ({_n(counted)} requests)")
    return CheckResult(name, Verdict.PASSED, value,
                       f"<= {_n(limit_ms)} ms ({_n(counted)} requests)")


def serve_health(name: str, reported: Mapping[str, Any]) -> CheckResult:
    """Every Serve application RUNNING and none of its deployments UNHEALTHY or
    DEPLOY_FAILED (``GET /api/serve/applications/``)."""
    apps = reported.get("applications") or {}
    if not isinstance(apps, Mapping) or not apps:
        return CheckResult(name, Verdict.FAILED, "no Serve applications")
    for app_name, app in sorted(apps.items()):
        status = str((app or {}).get("status") or "unknown")
        if status != "RUNNING":
            return CheckResult(name, Verdict.FAILED, f"application {app_name} {status}")
        for dep_name, dep in sorted(((app or {}).get("deployments") or {}).items()):
            dep_status = str((dep or {}).get("status") or "")
            if dep_status in _BAD_DEPLOYMENTS:
                return CheckResult(name, Verdict.FAILED,
                                   f"deployment {app_name}/{dep_name} {dep_status}")
    return CheckResult(name, Verdict.PASSED, f"{len(apps)} application(s) RUNNING")


def webhook(name: str, status: int | None, error: str = "") -> CheckResult:
    """An external gate: any 2xx passes; another status or no answer fails."""
    if status is None:
        return CheckResult(name, Verdict.FAILED, "no answer", f"({error})" if error else "")
    verdict = Verdict.PASSED if 200 <= status < 300 else Verdict.FAILED
    return CheckResult(name, verdict, f"HTTP {status}")


def at_serve(result: CheckResult) -> CheckResult:
    """``result`` as judged on all the traffic the cluster's Serve answered (Ray's own
    counters), not only on a gate's own probe."""
    return replace(result, detail=f"{result.detail} at Serve, all traffic".strip())


def serve_unmeasured(check: Mapping[str, Any], why: str) -> CheckResult:
    """Serve's counters could not be read: inconclusive, not failed — the gate's own probe
    still judges the check."""
    return CheckResult(str(check["name"]), Verdict.INCONCLUSIVE, "no Serve metrics",
                       f"({why})")


def unmeasured(check: Mapping[str, Any], why: str) -> CheckResult:
    """A metrics check whose metrics could not be read: failed (a gate that cannot look does
    not let an upgrade through)."""
    return CheckResult(str(check["name"]), Verdict.FAILED, "no metrics", f"({why})")


def judge(results: Sequence[CheckResult], where: str) -> str:
    """The step's message when no check failed; else raise ``AnalysisFailed`` naming the
    first failed check and its value (``where``: e.g. "fruit-14f9f at 25 %")."""
    failed = [r for r in results if r.verdict is Verdict.FAILED]
    if failed:
        first = failed[0]
        others = "".join(f"; {r.describe()}" for r in failed[1:])
        raise AnalysisFailed(f"{first.describe()} on {where}{others}", first.name, first.value)
    return f"analysis of {where} passed: " + "; ".join(r.describe() for r in results)
