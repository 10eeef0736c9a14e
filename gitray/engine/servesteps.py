"""The Serve steps' handlers: send a cluster's Serve config (``deploy-serve``), wait for its
applications to run (``wait-serve-running``), and gate pods on a healthy Serve proxy before a
serve Service selects them. I/O (the dashboard through :class:`Resolver`, pods through
:class:`Kube`); dispatched by ``gitray.engine.actions.Actions``.

Serve status is polled every 0.25 s at first, slowing to every 1.5 s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gitray.core.errors import LeaseLostError, TerminalError, TransientError
from gitray.core.model import ANN_SERVE_CONFIG_HASH, API_VERSION_RAY, LABEL_SERVE
from gitray.core.waits import Backoff, Clock, Deadline, poll
from gitray.engine.fence import Fence
from gitray.k8s.client import Kube
from gitray.plans.plan import Step
from gitray.plans.serve import ServeState, serve_verdict
from gitray.plans.steptypes import DeployServeParams, WaitServeParams, typed_params
from gitray.ray.dashboard import Resolver

__all__ = ["Report", "ServeSteps", "last_put_at", "resend_due"]

Report = Callable[[str], None]
SERVE_POLL_S = 1.5  # steady Serve status poll period; the first polls are quicker:
SERVE_FIRST_POLL_S = 0.25  # Serve often reaches RUNNING within seconds of a deploy, so the
SERVE_POLL_GROWTH = 1.5  # period starts here and grows by this factor up to SERVE_POLL_S
GATING_BUDGET_S = 120.0
REDEPLOY_AFTER_S = 15.0


def last_put_at(deadline: Deadline) -> float:
    """When the Serve config was last sent, as ``wait-serve-running`` (its ``deadline``)
    begins a check: when the wait step first began (``deploy-serve`` sent it just before),
    its time spent before this call included — a wait resumed after a hand-over, and above all
    a wait parked by ``gitray sync``, which each re-check resumes with a new call: counted from
    the call, its re-send would never come. Monotonic, on the deadline's clock. Pure."""
    return deadline.started - deadline.spent


def resend_due(sent: Mapping[str, object], reported: Mapping[str, object],
               since_put: float) -> bool:
    """Whether to send the Serve config again: Serve holds no application at all though some
    were sent (the head restarted and lost them; KubeRay re-sends only for the clusters it
    manages), ``REDEPLOY_AFTER_S`` after the last PUT (just after one, Serve may not list
    them yet). Pure."""
    return (not reported.get("applications") and bool(sent.get("applications"))
            and since_put >= REDEPLOY_AFTER_S)


class ServeSteps:
    def __init__(self, kube: Kube, resolver: Resolver, fence: Fence, clock: Clock) -> None:
        self.kube = kube
        self.resolver = resolver
        self.fence = fence  # checked before the write a wait step makes (the Serve hash)
        self.clock = clock

    def deploy_serve(self, ns: str, step: Step, report: Report, deadline: Deadline) -> str:
        p = typed_params(step, DeployServeParams)
        cluster = p.cluster
        # the dashboard answers some seconds after the head pod is ready: retry the PUT within
        # the step's timeout (180 s at least: gitray.plans.steptypes, min_timeout_s)
        last: list[TransientError] = []
        body = dict(p.serve_config)
        capacity = p.target_capacity
        if isinstance(capacity, int):  # an incremental upgrade's new cluster: maxSurgePercent
            body["target_capacity"] = capacity

        def attempt() -> str | None:
            try:
                with self.resolver.serve_client(ns, cluster) as client:
                    client.deploy(body)
            except TransientError as e:
                last[:] = [e]
                return None
            return f"Serve config sent to {cluster}" + (
                f" at target_capacity {capacity} %" if isinstance(capacity, int) else "")

        def wait(_left: float) -> None:
            report(f"dashboard not reachable yet ({last[0]})")
            self.clock.sleep(2.0)

        def timed_out() -> TerminalError:
            error = TerminalError(f"could not send the Serve config to {cluster} within "
                                  f"{deadline.seconds:.0f} s: {last[0]}")
            error.__cause__ = last[0]
            return error

        return poll(attempt, deadline, wait=wait, timeout=timed_out)

    def wait_serve_running(self, ns: str, step: Step, report: Report, deadline: Deadline) -> str:
        p = typed_params(step, WaitServeParams)
        cluster, serve_hash = str(p.cluster), p.serve_config_hash
        if serve_hash is None:  # (the planner always gives it)
            raise TerminalError(f"step {step.id} has no serveConfigHash to mark {cluster} with")
        sent = p.serve_config or {}
        last_put = last_put_at(deadline)
        summary = "no status yet"
        pauses = Backoff(SERVE_FIRST_POLL_S, factor=SERVE_POLL_GROWTH, cap=SERVE_POLL_S)

        def attempt() -> str | None:
            nonlocal last_put, summary
            try:
                with self.resolver.serve_client(ns, cluster) as client:
                    reported = client.applications()
                    if resend_due(sent, reported, self.clock.monotonic() - last_put):
                        # Serve holds no applications at all: the head restarted and lost the
                        # config (KubeRay re-sends it then too). The PUT is declarative.
                        client.deploy(sent)
                        last_put = self.clock.monotonic()
                        report("Serve had no applications (head restarted?): config sent again")
                    verdict = serve_verdict(sent, reported)
                summary = verdict.summary
                if verdict.state is ServeState.FAILED:
                    raise TerminalError(verdict.message)
                if verdict.state is ServeState.RUNNING:
                    self.fence.ensure_held()  # a leader woken from a pause must not write this
                    self.kube.patch(API_VERSION_RAY, "RayCluster", ns, cluster, {"metadata": {
                        "annotations": {ANN_SERVE_CONFIG_HASH: serve_hash}}})
                    return f"{summary} on {cluster}"
            except LeaseLostError:
                raise
            except TransientError as e:
                summary = str(e)
            return None

        def wait(_left: float) -> None:
            report(f"{summary}, {deadline.elapsed():.0f} s")
            self.clock.sleep(pauses.next())

        return poll(attempt, deadline, wait=wait,
                    timeout=lambda: TerminalError(f"Serve on {cluster} not RUNNING after "
                                                  f"{deadline.seconds:.0f} s ({summary})"))

    def gate_serve_pods(self, ns: str, cluster: str, report: Report,
                         selector: Mapping[str, str] | None = None) -> int:
        """Label the pods the serve Service will select (``selector`` but the Serve label: the
        cluster's, or only its workers) whose Serve proxy is healthy; return how many are."""
        pods_of = ",".join(f"{k}={v}" for k, v in sorted((selector or {}).items())
                           if k != LABEL_SERVE) or f"ray.io/cluster={cluster}"

        def attempt() -> int | None:
            pods, _ = self.kube.list("v1", "Pod", namespace=ns, label_selector=pods_of)
            healthy = 0
            for pod in pods:
                meta = pod.get("metadata") or {}
                ok = (pod.get("status") or {}).get("phase") == "Running" \
                    and self.resolver.proxy_healthy(pod)
                healthy += ok
                current = (meta.get("labels") or {}).get(LABEL_SERVE)
                if ok and current != "true":
                    self.kube.patch("v1", "Pod", ns, meta["name"],
                                    {"metadata": {"labels": {LABEL_SERVE: "true"}}})
                elif not ok and current is not None:
                    self.kube.patch("v1", "Pod", ns, meta["name"],
                                    {"metadata": {"labels": {LABEL_SERVE: None}}})
            return healthy or None

        def wait(_left: float) -> None:
            report("waiting for a healthy Serve proxy")
            self.clock.sleep(2.0)

        return poll(attempt, Deadline(GATING_BUDGET_S, self.clock), wait=wait,
                    timeout=lambda: TerminalError(f"no pod of {cluster} ({pods_of}) has a "
                                                  "healthy Serve proxy after "
                                                  f"{GATING_BUDGET_S:.0f} s"))
