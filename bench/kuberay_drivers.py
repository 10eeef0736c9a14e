"""The two controllers compared by ``bench/vs_kuberay.py``, and what is watched meanwhile. I/O.

- ``KubeRay``: the RayService object is applied to the API server (``kubectl apply``); the
  environment's KubeRay operator (its RayService controller) does the rest.
- ``Gitray``: the same manifest is committed and pushed to a bare Git remote on disk, and the
  push webhook is delivered as a Git host sends it (signed, right after the push returned);
  one ``gitray sync --interval 1s --deletion-interval 2s --dashboard pod-ip
  --webhook-secret-file F`` process follows it, with git-notes commit statuses, in the same
  namespace (its Lease too). The poll (1 s) stays: a webhook lost is a poll late.
- ``Observer``: a thread sampling, every 0.5 s, the namespace's RayClusters, the serve
  Service's ready endpoints and which cluster's pods they are; times are wall-clock.

Nothing is imitated: the API server, KubeRay, kube-proxy and Ray are the real node
environment's (testenv), Git is the git command, gitray runs as its own process.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.common import Env, Remote, SyncProc, start_sync
from testenv import procs
from testenv.helpers import TestEnv, get_text, http_json, wait_for
from testenv.manifests import dump, gitray_config

__all__ = [
    "Controller",
    "Gitray",
    "KubeRay",
    "Observer",
    "Sample",
    "bench_env",
    "delete_namespace",
    "head_ip",
    "rayclusters",
    "rayservice_converged",
    "serve_apps",
]

SVC = "serve-demo"
SERVE_SVC = f"{SVC}-serve-svc"
ROLLOUT_TIMEOUT_S = 600.0


class Controller(Protocol):
    name: str
    ns: str

    def rollout(self, doc: dict[str, Any]) -> float:
        """Apply the first version; wait until it serves. Seconds it took."""

    def change(self, doc: dict[str, Any], message: str) -> float:
        """Apply a change; the wall-clock time it landed (API object applied / commit pushed)."""

    def converged(self) -> bool:
        """The controller itself says the last change is done."""

    def failure(self) -> str:
        """Where and how the controller reports a failure of the last change ('' if not)."""

    def kill(self) -> None:
        """SIGKILL the controller process (gitray only)."""

    def restart(self) -> None:
        """Start the controller process again (gitray only)."""

    def close(self) -> None: ...


def bench_env(env: TestEnv) -> Env:
    """bench.common's view of a testenv environment (for start_sync)."""
    return Env(env.state.dir, env.kubeconfig, Path(env.state.cache) / "bin", env.state.apiserver,
               started_here=False)


def delete_namespace(env: TestEnv, ns: str, timeout: float = 180) -> None:
    """Delete the namespace and wait (bounded) until its pods are gone: real pods take real
    memory and CPU on the shared node."""
    with contextlib.suppress(Exception):
        env.core.delete_namespace(ns)
    with contextlib.suppress(Exception):
        wait_for(lambda: not env.core.list_namespaced_pod(ns).items, timeout, interval=2,
                 what=f"pods of {ns} gone")


def rayservice_converged(obj: dict[str, Any]) -> bool:
    """KubeRay says a RayService's last change is done: observed, Ready, no upgrade or
    pending cluster."""
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False  # not yet looked at the change
    conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
    pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName")
    return conds.get("Ready") == "True" and conds.get("UpgradeInProgress") != "True" \
        and not pending


def rayclusters(env: TestEnv, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = env.custom.list_namespaced_custom_object(
        "ray.io", "v1", ns, "rayclusters")["items"]
    return items


def head_ip(env: TestEnv, ns: str, cluster: str) -> str:
    pods = env.cluster_pods(ns, cluster, "head")
    return next((str(p.status.pod_ip) for p in pods if p.status.pod_ip), "")


def serve_apps(env: TestEnv, ns: str, cluster: str) -> dict[str, Any] | None:
    """The Serve applications of a cluster, from its dashboard (pod IP); None if unreachable."""
    ip = head_ip(env, ns, cluster)
    if not ip:
        return None
    try:
        status, body = http_json("GET", f"http://{ip}:8265/api/serve/applications/", timeout=3)
    except OSError:
        return None
    return dict(body.get("applications") or {}) if status == 200 else None


def serve_url(env: TestEnv, ns: str, path: str = "/hello") -> str:
    svc = env.core.read_namespaced_service(SERVE_SVC, ns)
    return f"http://{svc.spec.cluster_ip}:8000{path}"


def _wait_serving(env: TestEnv, ns: str, timeout: float) -> None:
    url = wait_for(lambda: serve_url(env, ns), timeout, interval=1, what=f"{ns}/{SERVE_SVC}")
    wait_for(lambda: get_text(url, timeout=3), timeout, interval=1, what=f"an answer from {url}")


KUBERAY_LEASE = ("kube-system", "ray-operator-leader")  # namespace, name (leader election on)


class KubeRay:
    """KubeRay's RayService controller: the RayService is applied to the API server.

    ``operator_ours``: the environment was started by this benchmark, so its KubeRay operator
    (one process for every namespace) may be killed and started again; on an environment
    given with --state-dir it may serve others, and ``kill`` refuses."""

    name = "KubeRay"

    def __init__(self, env: TestEnv, ns: str, operator_ours: bool = False) -> None:
        self.env, self.ns = env, ns
        self.operator_ours = operator_ours

    def _apply(self, doc: dict[str, Any]) -> None:
        self.env.kubectl("apply", "-n", self.ns, "-f", "-", stdin=json.dumps(doc))

    def rayservice(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.env.custom.get_namespaced_custom_object(
            "ray.io", "v1", self.ns, "rayservices", SVC)
        return obj

    def rollout(self, doc: dict[str, Any]) -> float:
        t0 = time.monotonic()
        self._apply(doc)
        wait_for(self.converged, ROLLOUT_TIMEOUT_S, interval=1, what=f"RayService {SVC} Ready")
        _wait_serving(self.env, self.ns, ROLLOUT_TIMEOUT_S)
        return time.monotonic() - t0

    def change(self, doc: dict[str, Any], message: str) -> float:
        self._apply(doc)
        return time.time()

    def converged(self) -> bool:
        return rayservice_converged(self.rayservice())

    def failure(self) -> str:
        status = self.rayservice().get("status") or {}
        for side in ("pendingServiceStatus", "activeServiceStatus"):
            apps = (status.get(side) or {}).get("applicationStatuses") or {}
            for app, info in sorted(apps.items()):
                if info.get("status") in {"DEPLOY_FAILED", "UNHEALTHY"}:
                    return (f"RayService status.{side}.applicationStatuses.{app}.status "
                            f"{info['status']}")
        for c in status.get("conditions") or []:
            if "fail" in (c.get("reason") or "").lower():
                return f"RayService condition {c['type']}={c['status']} ({c['reason']})"
        return ""

    def kill(self) -> None:
        """SIGKILL the operator process (by the PID the environment recorded)."""
        if not self.operator_ours:
            raise NotImplementedError("the environment's KubeRay operator is not ours to kill")
        comp = self.env.state.components["kuberay-operator"]
        pid = int(str(comp["pid"]))
        started = int(str(comp["started"])) if comp.get("started") is not None else None
        if not procs.alive(pid, started):
            raise RuntimeError(f"kuberay-operator (pid {pid}) is not running")
        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reap it when this process started it
            os.waitpid(pid, 0)

    def leader_elected(self) -> None:
        """Restart the operator as KubeRay is deployed by default: leader election on
        (``DefaultEnableLeaderElection = true``; a Lease ``ray-operator-leader``, in kube-system
        here, as the operator runs outside the cluster). The test environment runs it without
        (an API server outage longer than the renew deadline ends an elected operator, and
        nothing there restarts it); a SIGKILLed operator's successor only waits for the dead
        one's Lease as deployed. Waits until the new process holds the Lease."""
        comp = self.env.state.components["kuberay-operator"]
        args = [str(a) for a in comp["args"]  # type: ignore[attr-defined]
                if not str(a).startswith(("--enable-leader-election", "--leader-election-"))]
        self.kill()
        comp["args"] = [*args, "--enable-leader-election=true",
                        f"--leader-election-namespace={KUBERAY_LEASE[0]}"]
        self.restart()
        pid = str(comp["pid"])

        def holder() -> str | None:
            try:
                out = self.env.kubectl("-n", KUBERAY_LEASE[0], "get", "lease", KUBERAY_LEASE[1],
                                       "-o", "jsonpath={.spec.holderIdentity}")
            except Exception:  # not there yet
                return None
            return out.strip() or None
        # controller-runtime's identity is <hostname>_<uuid>: any holder after a fresh start
        # (no Lease before) is this process
        wait_for(holder, 60, interval=0.5, what=f"kuberay-operator (pid {pid}) holding its Lease")

    def restart(self) -> None:
        """Start the operator again with its recorded flags; wait until it is ready."""
        state = self.env.state
        comp = state.components["kuberay-operator"]
        args = [str(a) for a in comp["args"]]  # type: ignore[attr-defined]
        proc = procs.spawn(args, Path(str(comp["log"])), cwd=state.dir,
                           env={**os.environ, "KUBECONFIG": state.kubeconfig})
        comp["pid"], comp["started"] = proc.pid, procs.start_time(proc.pid)
        state.save()
        probe = next(a.split(":")[-1] for a in args if a.startswith("--health-probe-bind"))

        def ready() -> bool | None:
            if proc.poll() is not None:
                raise RuntimeError(f"kuberay-operator exited ({proc.returncode}) on restart")
            return bool(get_text(f"http://127.0.0.1:{probe}/readyz", timeout=1)) or None
        wait_for(ready, 90, interval=0.5, what="kuberay-operator ready again")

    def close(self) -> None:
        pass


class Gitray:
    """gitray: the manifest in Git, ``gitray sync`` following it (1 s poll)."""

    name = "gitray"

    def __init__(self, env: TestEnv, ns: str, work: Path, ready_timeout: str) -> None:
        self.env, self.ns, self.work = env, ns, work
        self.ready_timeout = ready_timeout
        self.remote = Remote.create(work / "git")
        self.secret = os.urandom(16).hex().encode()
        self.secret_file = work / "webhook-secret"
        self.secret_file.write_bytes(self.secret)
        self.sync: SyncProc | None = None
        self.sha = ""
        self._starts = 0

    def _start(self) -> None:
        self._starts += 1
        self.sync = start_sync(bench_env(self.env), self.remote.bare, self.work,
                               lease_ns=self.ns, interval="1s",
                               extra=["--deletion-interval", "2s",
                                      "--webhook-secret-file", str(self.secret_file)],
                               name=f"sync{self._starts}")

    def rollout(self, doc: dict[str, Any]) -> float:
        t0 = time.monotonic()
        # an instance of its own: another gitray on the shared environment with the default
        # instance and allowedNamespaces "*" would otherwise own (and prune) these objects
        config = gitray_config("60s", self.ns, ready_timeout=self.ready_timeout,
                               status={"provider": "git-notes"}, instance=f"gitray-{self.ns}")
        self.sha = self.remote.commit("first rollout", {"gitray.yaml": config,
                                                        "svc.yaml": dump(doc)})
        self._start()
        wait_for(self.converged, ROLLOUT_TIMEOUT_S, interval=0.5, what="the first rollout")
        _wait_serving(self.env, self.ns, ROLLOUT_TIMEOUT_S)
        return time.monotonic() - t0

    def change(self, doc: dict[str, Any], message: str) -> float:
        self.sha = self.remote.commit(message, {"svc.yaml": dump(doc)})
        landed = time.time()  # the push returned: the webhook's delivery counts against gitray
        if self.sync is not None and self.sync.push_hook(self.secret, self.sha) != 202:
            raise RuntimeError("gitray sync did not accept the push webhook")
        return landed

    def converged(self) -> bool:
        return self.sync is not None and self.sync.synced() == self.sha

    def failure(self) -> str:
        from gitray.hosts.notes import GitNotesProvider

        records = GitNotesProvider(self.remote.bare).records(self.sha)
        context = f"gitray/{self.ns}/RayService/{SVC}"
        mine = records.get(context) or {}
        if mine.get("state") == "failure":
            return f"commit status {context} failure: {mine.get('description', '')[:90]}"
        return ""

    def kill(self) -> None:
        assert self.sync is not None
        self.sync.proc.kill()
        self.sync.proc.wait()

    def restart(self) -> None:
        self._start()

    def close(self) -> None:
        if self.sync is not None:
            self.sync.stop()


@dataclass(frozen=True)
class Sample:
    t: float  # wall clock
    live: frozenset[str]  # RayClusters without a deletionTimestamp
    serving: frozenset[str]  # clusters whose pods are ready endpoints of the serve Service


@dataclass
class Observer:
    """Samples the namespace every ``interval`` seconds in a thread."""

    env: TestEnv
    ns: str
    interval: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    first_seen: dict[str, float] = field(default_factory=dict)
    deleting_at: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Observer:
        self._thread = threading.Thread(target=self._run, daemon=True, name="observer")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:
                self.errors += 1
            self._stop.wait(self.interval)

    def sample(self) -> Sample:
        now = time.time()
        live = set()
        for rc in rayclusters(self.env, self.ns):
            name = rc["metadata"]["name"]
            self.first_seen.setdefault(name, now)
            if rc["metadata"].get("deletionTimestamp"):
                self.deleting_at.setdefault(name, now)
            else:
                live.add(name)
        for name in self.first_seen:  # gone without our seeing the deletionTimestamp
            if name not in live:
                self.deleting_at.setdefault(name, now)
        ips = set(self.env.endpoint_addresses(self.ns, SERVE_SVC))
        pods = self.env.core.list_namespaced_pod(self.ns).items
        serving = {p.metadata.labels.get("ray.io/cluster", "?") for p in pods
                   if p.status.pod_ip in ips}
        sample = Sample(now, frozenset(live), frozenset(serving))
        self.samples.append(sample)
        return sample

    def live(self) -> frozenset[str]:
        return self.samples[-1].live if self.samples else frozenset()

    def created_after(self, t0: float) -> list[str]:
        return sorted((n for n, t in self.first_seen.items() if t >= t0),
                      key=lambda n: self.first_seen[n])

    def two_clusters_s(self, t0: float) -> float:
        """Seconds after t0 during which two or more clusters existed (sampled)."""
        total = 0.0
        after = [s for s in self.samples if s.t >= t0]
        for a, b in itertools.pairwise(after):
            if len(a.live) >= 2:
                total += b.t - a.t
        return total

    def serving_only(self, cluster: str, t0: float) -> float | None:
        """The time from which every later sample shows the serve Service on ``cluster``
        alone (None if the last sample does not)."""
        after = [s for s in self.samples if s.t >= t0]
        if not after or after[-1].serving != {cluster}:
            return None
        start = after[-1].t
        for s in reversed(after):
            if s.serving != {cluster}:
                break
            start = s.t
        return start

    def serving_at_end(self) -> frozenset[str]:
        return self.samples[-1].serving if self.samples else frozenset()
