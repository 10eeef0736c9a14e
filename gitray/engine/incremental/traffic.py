"""The steps of an incremental RayService upgrade: capacity, traffic, holds, analysis. I/O.

- ``set-serve-capacity``: PUT the Serve config with ``target_capacity`` to one cluster's
  dashboard — the config the step carries (the new cluster), or the one the cluster runs (the
  old cluster: its ``deployed_app_config`` sent again). Skipped when already so.
- ``shift-traffic``: server-side apply of the HTTPRoute the step carries (its weighted
  ``backendRefs``), then a bounded look at the route's status: a Gateway controller that
  refuses it (``Accepted``/``ResolvedRefs`` False for this generation) fails the step.
- ``wait-interval`` and ``pause``: hold the weight — ``seconds`` (a resumed hold only what is
  left), or until promoted. Every ~2 s they ask the run's :class:`Steering` whether ``gitray
  abort`` (raise ``Aborted``) or ``gitray promote`` (a pause ends) came. Waits sleep on the
  engine's clock, so a shutdown (SIGTERM) ends them at once and the next leader resumes them.
- ``run-analysis``: scrape the gateway's metrics, hold the window (abortable), scrape again,
  judge the checks (``gitray.engine.incremental.checks``) on the traffic of the new cluster's
  serve Service in between, Serve health on the new cluster, and webhook gates. A failed check
  raises ``AnalysisFailed``; the executor counts it against ``failureLimit``. A blue-green
  gate sends its own probe instead (``gitray.engine.incremental.probes``); after the switch it
  also judges the success-rate and latency checks on all the traffic the new cluster's Serve
  answered, real traffic included (Ray's own counters, ``servemetrics``), and fails when either
  measure fails. Serve's counters that cannot be read leave that measure inconclusive.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gitray.core.errors import Aborted, TerminalError, TransientError
from gitray.core.waits import Clock, Deadline
from gitray.engine.incremental.checks import (
    CheckResult,
    Verdict,
    at_serve,
    judge,
    latency,
    serve_health,
    serve_unmeasured,
    success_rate,
    unmeasured,
    webhook,
)
from gitray.engine.incremental.gatewaymetrics import Series, parse_text, traefik_service, window
from gitray.engine.incremental.gatewaymetrics import Traffic as GatewayTraffic
from gitray.engine.incremental.probes import HttpProbe, probe_traffic
from gitray.engine.incremental.servemetrics import NAMES as SERVE_NAMES
from gitray.engine.incremental.servemetrics import merge, served
from gitray.engine.incremental.upgradecontrol import Control
from gitray.engine.ownership import labelled
from gitray.k8s.client import Kube
from gitray.plans.plan import Step
from gitray.plans.rayservice.bluegreen import AFTER_SWITCH
from gitray.plans.rayservice.gateway import GATEWAY_API_VERSION, route_refs
from gitray.plans.serve import live_config_at
from gitray.plans.steptypes import (
    AwaitApprovalParams,
    RunAnalysisParams,
    SetCapacityParams,
    ShiftTrafficParams,
    StepType,
    typed_params,
)
from gitray.ray.dashboard import Resolver

__all__ = ["TRAFFIC_STEPS", "Steering", "Traffic", "capacity_config", "route_accepted"]

Report = Callable[[str], None]
TRAFFIC_STEPS = frozenset({StepType.SET_SERVE_CAPACITY, StepType.SHIFT_TRAFFIC,
                           StepType.WAIT_INTERVAL, StepType.PAUSE, StepType.RUN_ANALYSIS,
                           StepType.AWAIT_APPROVAL})
SIGNAL_POLL_S = 2.0  # how often a hold asks for promote/abort
REPORT_EVERY_S = 30.0  # progress lines of a hold
ROUTE_STATUS_S = 30.0  # how long a shift looks for the controller's verdict on the route
SCRAPE_TRIES, SCRAPE_PAUSE_S = 3, 2.0
_METRIC_CHECKS = frozenset({"success-rate", "latency"})


class Steering(Protocol):
    """The run's promote/abort signals, as the executor reads them for a step."""

    def check(self, step: Step) -> tuple[Control, str]:
        """(what to do, who asked and when: for messages)."""
        ...


class Traffic:
    def __init__(self, kube: Kube, resolver: Resolver, clock: Clock, probe: HttpProbe,
                 labels: Mapping[str, str] | None = None) -> None:
        self.kube = kube
        self.labels = dict(labels or {})  # added to the HTTPRoute applied (gitray.io/shard)
        self.resolver = resolver
        self.clock = clock
        self.probe = probe

    def run(self, ns: str, step: Step, report: Report, deadline: Deadline | None,
            steering: Steering | None) -> str:
        match step.type:
            case StepType.SET_SERVE_CAPACITY:
                return self._set_capacity(ns, step)
            case StepType.SHIFT_TRAFFIC:
                return self._shift(ns, step, report)
            case StepType.RUN_ANALYSIS:
                return self._analyse(ns, step, report, steering)
            case StepType.AWAIT_APPROVAL:
                return self._await_approval(step, report, steering)
            case _:
                return self._hold(step, report, deadline, steering)

    # ---- capacity and weights -----------------------------------------------------------

    def _set_capacity(self, ns: str, step: Step) -> str:
        p = typed_params(step, SetCapacityParams)
        cluster, percent, sent = p.cluster, int(p.target_capacity), p.serve_config
        with self.resolver.serve_client(ns, cluster) as client:
            body = capacity_config(client.applications(), percent,
                                   sent if isinstance(sent, Mapping) else None)
            if body is None:
                return f"Serve on {cluster} already at target_capacity {percent} %"
            client.deploy(body)
        return f"Serve target_capacity of {cluster} set to {percent} %"

    def _shift(self, ns: str, step: Step, report: Report) -> str:
        p = typed_params(step, ShiftTrafficParams)
        manifest, name = p.manifest, p.route
        split = ", ".join(f"{weight} % to {backend}" for backend, weight in route_refs(manifest))
        live = self.kube.get_or_none(GATEWAY_API_VERSION, "HTTPRoute", ns, name)
        if live is not None and route_refs(live) == route_refs(manifest):
            return f"HTTPRoute {name} already sends {split}"
        applied = self.kube.apply(labelled(manifest, self.labels))
        generation = (applied.get("metadata") or {}).get("generation")
        verdict = self._route_verdict(ns, name, generation, report)
        return f"HTTPRoute {name}: {split}{verdict}"

    def _route_verdict(self, ns: str, name: str, generation: Any, report: Report) -> str:
        deadline = Deadline(ROUTE_STATUS_S, self.clock)
        while True:
            route = self.kube.get_or_none(GATEWAY_API_VERSION, "HTTPRoute", ns, name) or {}
            if route_accepted(route, generation):
                return " (accepted by the Gateway controller)"
            if deadline.left() <= 0:
                return f" (no verdict of a Gateway controller on it within {ROUTE_STATUS_S:.0f} s)"
            report("waiting for the Gateway controller to accept the route")
            self.clock.sleep(1.0)

    # ---- holds --------------------------------------------------------------------------

    def _steer(self, step: Step, steering: Steering | None) -> str | None:
        """Who promoted ``step`` (a pause), None when nobody did; ``Aborted`` on an abort."""
        if steering is None:
            return None
        what, who = steering.check(step)
        if what is Control.ABORT:
            raise Aborted(f"aborted by gitray abort ({who})")
        return who if what is Control.PROMOTE else None

    def _hold(self, step: Step, report: Report, deadline: Deadline | None,
              steering: Steering | None) -> str:
        p = step.params
        percent, cluster = p.get("percent"), p.get("cluster")
        if deadline is None and steering is None:
            raise TerminalError(f"a pause until promoted needs run records (to read "
                                f"`{p.get('promote')}`); none are kept here")
        last_report = self.clock.monotonic()
        while True:
            promoted = self._steer(step, steering)
            if promoted is not None:
                return f"promoted at {percent} % ({promoted})"
            left = deadline.left() if deadline is not None else float("inf")
            if left <= 0:
                assert deadline is not None
                return f"held {percent} % on {cluster} for {deadline.seconds:.0f} s"
            if self.clock.monotonic() - last_report >= REPORT_EVERY_S:
                last_report = self.clock.monotonic()
                report(f"holding {percent} % on {cluster}: " + (
                    f"{left:.0f} s left" if deadline is not None
                    else f"waiting for `{p.get('promote')}`"))
            self.clock.sleep(min(left, SIGNAL_POLL_S if steering is not None else 5.0))

    def _await_approval(self, step: Step, report: Report, steering: Steering | None) -> str:
        """A blue-green upgrade's gate: hold until ``gitray approve`` (abortable)."""
        p = typed_params(step, AwaitApprovalParams)
        if steering is None:
            raise TerminalError(f"an approval gate needs run records (to read `{p.approve}`); "
                                "none are kept here")
        last_report = self.clock.monotonic()
        while True:
            what, who = steering.check(step)
            if what is Control.ABORT:
                raise Aborted(f"aborted by gitray abort ({who})")
            if what is Control.APPROVE:
                return f"approved: the switch to {p.cluster} goes ahead ({who})"
            if self.clock.monotonic() - last_report >= REPORT_EVERY_S:
                last_report = self.clock.monotonic()
                report(f"waiting for `{p.approve}` before switching to {p.cluster}")
            self.clock.sleep(SIGNAL_POLL_S)

    # ---- analysis -----------------------------------------------------------------------

    def _scrape(self, url: str, names: tuple[str, ...], report: Report
                ) -> dict[Series, float] | str:
        """The samples of ``names`` at ``url``, or why they could not be read."""
        why = ""
        for attempt in range(SCRAPE_TRIES):
            try:
                samples = parse_text(self.probe.metrics(url), names)
                if any(s.name == names[0] for s in samples):
                    return samples
                # a wrong URL (an HTML page, another exporter) must not pass as "no traffic"
                why = (f"no {names[0]} samples at {url} (is it the gateway's metrics "
                       "endpoint, with service labels on?)")
            except (TransientError, ValueError) as e:
                why = str(e)
            if attempt + 1 < SCRAPE_TRIES:
                report(f"metrics not read ({why}); trying again")
                self.clock.sleep(SCRAPE_PAUSE_S)
        return why

    def _analyse(self, ns: str, step: Step, report: Report, steering: Steering | None) -> str:
        p = typed_params(step, RunAnalysisParams)
        cluster, percent = p.cluster, p.percent
        checks = [c for c in p.checks or [] if isinstance(c, Mapping)]
        metrics = p.metrics if isinstance(p.metrics, Mapping) else None
        names: tuple[str, ...] = ()
        if metrics is not None and any(c.get("type") in _METRIC_CHECKS for c in checks):
            names = (str(metrics["requests"]), str(metrics["durations"]) + "_bucket")
        before = self._scrape(str(metrics["url"]), names, report) if metrics and names else ""
        seconds = float(p.window_seconds or 0)
        backend = p.backend if isinstance(p.backend, Mapping) else {}
        probe = step.params.get("probe")
        probed = None
        gate = step.params.get("gate")
        sent = probe if isinstance(probe, Mapping) and any(
            c.get("type") in _METRIC_CHECKS for c in checks) else None  # the probe measures
        counts_all = sent is not None and gate == AFTER_SWITCH
        served_before = self._served(ns, cluster) if counts_all else ""
        if sent is not None:
            probed = self._probe(ns, str(backend.get("service")), sent, seconds, report)
        else:
            self._hold(Step(step.id, StepType.WAIT_INTERVAL, step.target,
                            {"percent": percent, "cluster": cluster}),
                       lambda line: report(f"analysis window: {line}"),
                       Deadline(seconds, self.clock), steering)
        after = self._scrape(str(metrics["url"]), names, report) if metrics and names else ""
        all_traffic = self._served_between(served_before, self._served(ns, cluster)) \
            if counts_all else None
        service = traefik_service(str(backend.get("namespace")), str(backend.get("service")),
                                  int(backend.get("port") or 0))
        results: list[CheckResult] = []
        for check in checks:
            kind = str(check.get("type"))
            if kind == "serve-health":
                results.append(self._serve_health(ns, cluster, str(check["name"])))
            elif kind in _METRIC_CHECKS and probed is not None:
                judge_probed = success_rate if kind == "success-rate" else latency
                if isinstance(all_traffic, str):
                    results.append(serve_unmeasured(check, all_traffic))
                elif all_traffic is not None:
                    results.append(at_serve(judge_probed(check, all_traffic)))
                results.append(judge_probed(check, probed))
            elif kind in _METRIC_CHECKS:
                if isinstance(before, str) or isinstance(after, str):
                    why = next(w for w in (before, after) if isinstance(w, str))
                    results.append(unmeasured(check, why or "no metrics url"))
                    continue
                assert metrics is not None
                traffic = window(before, after, service, str(metrics["requests"]),
                                 str(metrics["durations"]))
                judge_one = success_rate if kind == "success-rate" else latency
                results.append(judge_one(check, traffic))
            elif kind == "webhook":
                payload = {"namespace": ns, "cluster": cluster, "previous": p.previous,
                           "percent": percent, "step": p.step, "steps": p.steps,
                           "windowSeconds": seconds,
                           "results": [{"name": r.name, "verdict": r.verdict.value,
                                        "value": r.value} for r in results]}
                status, why = self.probe.webhook(str(check["url"]), payload,
                                                 float(check.get("timeoutSeconds") or 10))
                results.append(webhook(str(check["name"]), status, why))
        where = (f"{cluster} {str(gate).replace('-', ' the ')}" if isinstance(gate, str)
                 else f"{cluster} at {percent} %")
        return judge(results, f"{where} over {seconds:.0f} s")

    def _probe(self, ns: str, service: str, probe: Mapping[str, Any], seconds: float,
               report: Report) -> GatewayTraffic:
        """A blue-green gate's own requests to ``service`` spread over ``seconds``."""
        count = max(1, int(probe.get("requests") or 1))
        port, path = int(probe.get("port") or 0), str(probe.get("path") or "/")
        codes: list[int | None] = []
        durations: list[float] = []
        pause = seconds / count
        for index in range(count):
            began = self.clock.monotonic()
            codes.append(self.probe.serve_get(ns, service, port, path))
            durations.append(self.clock.monotonic() - began)
            if (index + 1) % 10 == 0:
                report(f"analysis window: {index + 1} of {count} requests sent to {service}")
            self.clock.sleep(max(0.0, pause - durations[-1]))
        return probe_traffic(codes, durations)

    def _served(self, ns: str, cluster: str) -> dict[Series, float] | str:
        """Serve's request counters on every pod of ``cluster``, or why they were not read."""
        try:
            return merge({pod: parse_text(text, SERVE_NAMES)
                          for pod, text in self.probe.serve_metrics(ns, cluster).items()})
        except (TransientError, ValueError) as e:
            return str(e)

    @staticmethod
    def _served_between(before: dict[Series, float] | str, after: dict[Series, float] | str
                        ) -> GatewayTraffic | str:
        if isinstance(before, str) or isinstance(after, str):
            return next(w for w in (before, after) if isinstance(w, str))
        return served(before, after)

    def _serve_health(self, ns: str, cluster: str, name: str) -> CheckResult:
        try:
            with self.resolver.serve_client(ns, cluster) as client:
                return serve_health(name, client.applications())
        except TransientError as e:
            return CheckResult(name, Verdict.FAILED, "no answer", f"({e})")


def _deployed(details: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    apps = details.get("applications") or {}
    return {str(n): dict((a or {}).get("deployed_app_config") or {})
            for n, a in apps.items()} if isinstance(apps, Mapping) else {}


def capacity_config(details: Mapping[str, Any], percent: int,
                    sent: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What to PUT to set Serve's ``target_capacity`` to ``percent`` on a cluster whose Serve
    reports ``details``: ``sent`` (the new cluster's config) or, without one, the config the
    cluster runs; None when nothing needs sending (already so). ``TerminalError`` when the
    cluster runs nothing that could be sent again."""
    if sent is not None:
        wanted = {str(a.get("name", "default")): dict(a) for a in sent.get("applications") or []
                  if isinstance(a, Mapping)}
        if details.get("target_capacity") == percent and _deployed(details) == wanted:
            return None
        return {**sent, "target_capacity": percent}
    if details.get("target_capacity") == percent:
        return None
    body = live_config_at(details, percent)
    if body is None:
        raise TerminalError(f"Serve runs no application: there is no config to send again at "
                            f"target_capacity {percent} %")
    return body


def route_accepted(route: Mapping[str, Any], generation: Any) -> bool:
    """Whether the Gateway controller accepted ``generation`` of the route (``Accepted`` and
    ``ResolvedRefs`` True); ``TerminalError`` when it refused it (either False); False while
    it has said nothing about that generation."""
    name = (route.get("metadata") or {}).get("name")
    conditions = [c for parent in (route.get("status") or {}).get("parents") or []
                  for c in parent.get("conditions") or []
                  if c.get("observedGeneration") in {None, generation}]
    for c in conditions:
        if c.get("type") in {"Accepted", "ResolvedRefs"} and c.get("status") == "False":
            raise TerminalError(f"the Gateway controller refused HTTPRoute {name}: "
                                f"{c.get('type')} False ({c.get('reason')}: "
                                f"{c.get('message') or 'no message'})")
    return {c.get("type") for c in conditions if c.get("status") == "True"} >= \
        {"Accepted", "ResolvedRefs"}
