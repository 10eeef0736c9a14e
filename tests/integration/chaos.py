"""Fault injection and observation helpers for the failover, fencing, restart and soak tests.

Everything acts on real processes this test run started, by PID (never by name), and observes
the real API server and the real Ray dashboards:

- :class:`Replica` — one ``gitray sync`` process (JSON logs, /metrics, VmRSS, SIGKILL/STOP/CONT);
- :class:`ClusterWatch` — every RayCluster ever ADDED in a namespace (name, uid), from a
  list + watch loop that re-lists after any error (so it survives an API server restart);
- :class:`TrafficSampler` — samples the serve Service's selector and the selected cluster's
  Serve application statuses from a background thread;
- :func:`restart_apiserver` — stops and restarts the kube-apiserver of an environment this
  test run started (same flags, same port), keeping its ``state.json`` accurate for ``down``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gitray.engine.failpoints import ENV_VAR
from testenv import control, procs
from testenv.helpers import TestEnv, wait_for
from testenv.manifests import dump
from testenv.procs import free_port
from tests.integration.gitops import REPO_ROOT

STEP_LINE = re.compile(r" step (\d+)/(\d+) ([a-z-]+)(:?) ")


@dataclass
class LogLine:
    time: float  # epoch seconds (the daemon's own timestamp)
    msg: str
    level: str
    raw: dict[str, Any]


@dataclass
class Replica:
    """A ``gitray sync`` process started by this test run."""

    proc: subprocess.Popen[str]
    port: int
    log: Path
    name: str
    started: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def get(self, path: str, timeout: float = 20) -> tuple[int, str]:
        """GET from the replica's HTTP server. The 20-s default is for tests that assert on
        the answer: on a machine 95 % busy, a 3-s timeout ran out on /readyz (answered from
        memory) while the daemon waited for the CPU."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=timeout) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body,
                                     headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def metric(self, name: str, labels: str = "") -> float | None:
        """A metric's value; None when the process does not answer."""
        try:
            # 3 s: callers poll and take no answer (e.g. a SIGSTOPped replica) as None
            _, text = self.get("/metrics", timeout=3)
        except (OSError, urllib.error.URLError):
            return None
        # anchored at the start of a sample line: "# HELP <name> 1 while ..." must not match
        pattern = r"^" + re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels
                                            else "") + r" ([0-9.e+-]+)$"
        match = re.search(pattern, text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def lines(self) -> list[LogLine]:
        out: list[LogLine] = []
        for raw in self.log.read_text(errors="replace").splitlines():
            try:
                data = json.loads(raw)
                when = datetime.fromisoformat(data["time"]).timestamp()
            except (ValueError, KeyError, TypeError):
                continue
            out.append(LogLine(when, str(data.get("msg", "")), str(data.get("level", "")),
                               data))
        return out

    def step_lines(self, since: float = 0.0, done_only: bool = False) -> list[
            tuple[LogLine, int, int, str, bool]]:
        """(line, k, total, type, done) for each step line at or after ``since``."""
        found = []
        for line in self.lines():
            if line.time < since:
                continue
            m = STEP_LINE.search(line.msg)
            if m is None:
                continue
            done = m.group(4) == ":"
            if done_only and not done:
                continue
            found.append((line, int(m.group(1)), int(m.group(2)), m.group(3), done))
        return found

    def rss_kib(self) -> int | None:
        try:
            for row in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if row.startswith("VmRSS:"):
                    return int(row.split()[1])
        except OSError:
            return None
        return None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def stopped(self) -> bool:
        """Whether the process is stopped (SIGSTOP, e.g. by a failpoint)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    def kill(self) -> float:
        """SIGKILL; returns the wall time of the kill."""
        when = time.time()
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        return when

    def terminate(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def start_replica(kubeconfig: str, lease_namespace: str, remote: Path | str, workdir: Path,
                  name: str, interval: str = "1s", extra: tuple[str, ...] = (),
                  failpoints: Path | None = None, env: dict[str, str] | None = None) -> Replica:
    """``remote``: a bare repository's path, or any URL. ``extra`` flags come last (so they
    override the defaults here). ``failpoints``: the file gitray.engine.failpoints reads (the
    test writes it). ``env``: added to the environment. stdout and stderr go to the log."""
    port = free_port()
    log = workdir / f"sync-{name}.log"
    url = remote if isinstance(remote, str) else f"file://{remote}"
    argv = [sys.executable, "-m", "gitray", "sync", "--repo", url,
            "--branch", "main", "--interval", interval, "--deletion-interval", "2s",
            "--http-address", f"127.0.0.1:{port}", "--kubeconfig", kubeconfig,
            "--lease-namespace", lease_namespace,
            "--cache-dir", str(workdir / f"cache-{name}"),
            # shorter than client-go's 15/10/2 s so take-overs are quick, but a renew deadline
            # that outlasts the multi-second stalls of a loaded 2-core machine (with 3 s, a
            # replica that had just taken the Lease lost it again in CI at a load of 11)
            "--lease-duration", "8", "--renew-deadline", "6", "--retry-period", "1",
            "--log-format", "json", *extra]
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, text=True,
                                cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {}),
                                     **({ENV_VAR: str(failpoints)} if failpoints else {})})
    replica = Replica(proc, port, log, name)

    def healthy() -> bool | None:
        if not replica.alive():
            raise AssertionError(f"gitray sync {name} exited:\n{log.read_text()[-3000:]}")
        try:
            return replica.get("/healthz")[0] == 200 or None
        except (OSError, urllib.error.URLError):
            return None
    wait_for(healthy, timeout=60, what=f"gitray sync {name} healthy")
    return replica


def lease_holder(env: TestEnv, namespace: str, name: str = "gitray") -> tuple[str, int]:
    """(holderIdentity, leaseTransitions) of the Lease; ("", -1) when absent."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        lease = client.CoordinationV1Api(env.api_client).read_namespaced_lease(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return "", -1
        raise
    return str(lease.spec.holder_identity or ""), int(lease.spec.lease_transitions or 0)


def holder_pid(identity: str) -> int | None:
    """The PID in a default identity ``<hostname>_<pid>_<random>``."""
    parts = identity.rsplit("_", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def isolated(config: str, ns: str) -> str:
    """gitray.yaml scoped to ``ns`` with an instance of its own: several gitrays share the
    environment, and one with allowedNamespaces "*" and the default instance owns (and
    prunes) every object labelled for that instance in every namespace."""
    from ruamel.yaml import YAML

    doc = YAML(typ="safe", pure=True).load(config)
    doc["allowedNamespaces"] = [ns]
    doc["instance"] = f"gitray-{ns}"
    return dump(doc)


# ---- observers ----------------------------------------------------------------------------


class ClusterWatch:
    """Records every RayCluster (name, uid) that ever existed in ``namespace``."""

    def __init__(self, env: TestEnv, namespace: str) -> None:
        self.env, self.ns = env, namespace
        self.seen: dict[str, tuple[str, float]] = {}  # uid -> (name, first seen)
        self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cluster-watch")

    def __enter__(self) -> ClusterWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=40)

    def _note(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        with self._lock:
            self.seen.setdefault(str(meta.get("uid")), (str(meta.get("name")), time.time()))

    def _run(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                listed = self.env.custom.list_namespaced_custom_object(
                    "ray.io", "v1", self.ns, "rayclusters", _request_timeout=5)
                for item in listed["items"]:
                    self._note(item)
                rv = listed["metadata"]["resourceVersion"]
                w = watch.Watch()
                for event in w.stream(self.env.custom.list_namespaced_custom_object,
                                      "ray.io", "v1", self.ns, "rayclusters",
                                      resource_version=rv, timeout_seconds=5,
                                      _request_timeout=10):
                    if event["type"] in {"ADDED", "MODIFIED"}:
                        self._note(event["object"])
                    if self._stop.is_set():
                        w.stop()
            except Exception:
                self.errors += 1
                self._stop.wait(0.5)

    def uids_named(self, prefix: str = "") -> dict[str, str]:
        with self._lock:
            return {uid: name for uid, (name, _) in self.seen.items()
                    if name.startswith(prefix)}

    def since(self, t: float) -> list[tuple[str, str]]:
        """(uid, name) of clusters first seen at or after wall time ``t``."""
        with self._lock:
            return sorted((uid, name) for uid, (name, when) in self.seen.items() if when >= t)


@dataclass
class Sample:
    time: float
    cluster: str
    statuses: dict[str, str] | None  # None: dashboard not reachable


class TrafficSampler:
    """Samples which cluster the serve Service selects and that cluster's Serve statuses."""

    def __init__(self, env: TestEnv, namespace: str, service: str,
                 period_s: float = 0.3) -> None:
        self.env, self.ns, self.service, self.period = env, namespace, service, period_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="traffic-sampler")

    def __enter__(self) -> TrafficSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _selected(self) -> str | None:
        try:
            svc = self.env.core.read_namespaced_service(self.service, self.ns,
                                                        _request_timeout=3)
        except Exception:
            return None
        return (svc.spec.selector or {}).get("ray.io/cluster")

    def _statuses(self, cluster: str) -> dict[str, str] | None:
        try:
            pods = self.env.core.list_namespaced_pod(
                self.ns, label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head",
                _request_timeout=3).items
        except Exception:
            return None
        ips = [p.status.pod_ip for p in pods if p.status and p.status.pod_ip]
        if not ips:
            return None
        try:
            with urllib.request.urlopen(f"http://{ips[0]}:8265/api/serve/applications/",
                                        timeout=3) as r:
                apps = json.load(r).get("applications") or {}
        except (OSError, ValueError, urllib.error.URLError):
            return None
        return {name: str(app.get("status")) for name, app in apps.items()}

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            cluster = self._selected()
            if cluster is None:
                continue
            statuses = self._statuses(cluster)
            # re-read: a switch between the two reads must not blame the new cluster's status
            # on the old selection (or the other way round)
            if self._selected() != cluster:
                continue
            self.samples.append(Sample(time.time(), cluster, statuses))

    def violations(self) -> list[Sample]:
        """Samples where the selected cluster's dashboard answered and not every app (at
        least one) was RUNNING."""
        return [s for s in self.samples if s.statuses is not None
                and (not s.statuses or any(v != "RUNNING" for v in s.statuses.values()))]

    def unreachable(self) -> int:
        return sum(1 for s in self.samples if s.statuses is None)

    def answered(self) -> int:
        return sum(1 for s in self.samples if s.statuses is not None)


# ---- the environment's API server ---------------------------------------------------------


def restart_apiserver(state_dir: Path, down_for_s: float,
                      during: Callable[[], None] | None = None) -> tuple[float, float]:
    """Stop the kube-apiserver this test run started in ``state_dir`` (SIGKILL by PID), keep it
    down ``down_for_s`` seconds (running ``during`` meanwhile), start it again with the same
    flags and port, and wait for /readyz. Returns (seconds down, seconds to ready)."""
    state = control.State.load(state_dir)
    assert state is not None, f"no environment in {state_dir}"
    comp = state.components["kube-apiserver"]
    pid, started = int(comp["pid"]), comp.get("started")
    assert procs.alive(pid, started), "kube-apiserver is not running"  # type: ignore[arg-type]
    args = [str(a) for a in comp["args"]]  # type: ignore[union-attr]
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not procs.alive(pid, started) or None,  # type: ignore[arg-type]
             timeout=30, what="kube-apiserver gone")
    if during is not None:
        during()
    left = down_for_s - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)
    proc = procs.spawn(args, Path(str(comp["log"])), cwd=state.dir)
    down = time.monotonic() - t0
    comp["pid"], comp["started"] = proc.pid, procs.start_time(proc.pid)
    state.save()
    ctx = control._client_ctx(state.dir / "pki")

    def ready() -> bool | None:
        try:
            return control._http_ok(f"{state.apiserver}/readyz", ctx) or None
        except OSError:
            return None
    wait_for(ready, timeout=120, what="kube-apiserver ready again")
    return down, time.monotonic() - t0 - down


def figures(values: list[float]) -> str:
    if not values:
        return "n/a"
    v = sorted(values)
    return f"min {v[0]:.1f} s, median {v[len(v) // 2]:.1f} s, max {v[-1]:.1f} s (n={len(v)})"
