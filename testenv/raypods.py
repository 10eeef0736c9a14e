"""The Ray pod runner: plays the kubelet's part for Ray head pods that kwok runs.

Run by `scripts/testenv up` as its own process::

    python -m testenv.raypods --kubeconfig K --state-dir D --ready-file F

It watches pods labelled ``ray.io/node-type=head``. For each one kwok reports ``Running`` with a
pod IP it starts a real Ray head (``ray start --head --block``) bound to that IP, with the
dashboard on the pod's container port named ``dashboard`` (8265 by default), then starts Serve
with its HTTP proxy on ``<podIP>:<port named serve, 8000>``. When the pod goes away (or stops
being Running) the head is stopped by its recorded session id — never a global ``ray stop``.

Ports Ray binds on every interface or on 127.0.0.1 (GCS, Ray client server, dashboard agent,
metrics export, worker ports) come from a machine-wide 100-port block per head
(20000 + 100*block), claimed through ``procs.claim`` so heads of several environments on one
machine never collide; the pod's ``gcs-server``/``client``/``metrics`` port numbers are therefore
not used. Worker pods get no Ray (tests reach Ray only through the head).

Each head gets ``PYTHONPATH=<repo>:<repo>/tests/integration/apps:<repo>/examples-repo`` so
Serve apps shipped in the repository are importable (e.g. ``import_path: hello:app``, or the
examples' ``serve_apps.greeter:app``).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testenv import procs

log = logging.getLogger("raypods")

REPO = Path(__file__).resolve().parents[1]
APPS = REPO / "tests" / "integration" / "apps"
EXAMPLES = REPO / "examples-repo"  # its Serve apps (serve_apps.*), as an image would ship them
HEAD_SELECTOR = "ray.io/node-type=head"
PORT_BASE, BLOCK_SIZE, BLOCKS = 20000, 100, 100
TEMP_ROOT = Path("/tmp/gitray-ray")
RETRY_AFTER = 20.0
STOP_GRACE = 3.0
HEAD_START_TIMEOUT = 180.0  # for the head's dashboard to answer
SERVE_START_TIMEOUT = 120.0  # then for serve.start
# How long a test may wait for a head: one start that fails at its deadlines and the retry
# after it. A start can fail on a busy machine (Ray gives a raylet a fixed 30 s to register
# with the GCS); the clean-clone run of e828276 waited 300 s for a head in vain (why is not
# known: the runner's log went with its environment)
HEAD_WAIT = 2 * (HEAD_START_TIMEOUT + SERVE_START_TIMEOUT) + RETRY_AFTER

SERVE_START = """
import sys, ray
from ray import serve
ip, gcs, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
ray.init(address=f"{ip}:{gcs}", log_to_driver=False)
serve.start(http_options={"host": ip, "port": port}, detached=True)
print("serve started", ip, port, flush=True)
"""


@dataclass
class Head:
    """One running Ray head (also written to ``<state>/ray-heads/<block>.json``)."""

    key: str
    namespace: str
    pod: str
    uid: str
    ip: str
    block: int
    pid: int
    started: int | None
    temp_dir: str
    ports: dict[str, int]
    ready: bool = False


def block_ports(block: int) -> dict[str, int]:
    base = PORT_BASE + BLOCK_SIZE * block
    return {
        "gcs": base, "client": base + 1, "dashboard-agent": base + 2, "metrics": base + 3,
        "min-worker": base + 20, "max-worker": base + BLOCK_SIZE - 1,
    }


def named_ports(pod: Any) -> dict[str, int]:
    ports: dict[str, int] = {}
    for container in pod.spec.containers or []:
        for port in container.ports or []:
            if port.name and port.name not in ports:
                ports[port.name] = int(port.container_port)
    return ports


def _http_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


class Runner:
    def __init__(self, kubeconfig: str, state_dir: Path) -> None:
        from kubernetes import client, config

        config.load_kube_config(config_file=kubeconfig)
        self.v1 = client.CoreV1Api()
        self.state_dir = state_dir
        self.records = state_dir / "ray-heads"
        self.records.mkdir(parents=True, exist_ok=True)
        self.logs = state_dir / "logs"
        self.heads: dict[str, Head] = {}
        self.starting: set[str] = set()
        self.failed: dict[str, float] = {}
        self.busy_ips: set[str] = set()  # IPs with a head running, starting or stopping
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        me = os.getpid()
        self.owner: dict[str, object] = {"pid": me, "started": procs.start_time(me),
                                         "state_dir": str(state_dir)}
        ray_bin = Path(sys.executable).parent / "ray"
        self.ray = str(ray_bin) if ray_bin.exists() else (shutil.which("ray") or "ray")

    # -- reconciliation -------------------------------------------------------------------
    def resync(self) -> None:
        pods = self.v1.list_pod_for_all_namespaces(label_selector=HEAD_SELECTOR).items
        wanted: dict[str, Any] = {}
        for pod in pods:
            if (pod.metadata.deletion_timestamp is None and pod.status is not None
                    and pod.status.phase == "Running" and pod.status.pod_ip
                    and ipaddress.ip_address(pod.status.pod_ip).is_loopback):
                # only kwok's pods (loopback IPs): pods of the real node run their own Ray
                key = f"{pod.metadata.namespace}/{pod.metadata.name}/{pod.metadata.uid}"
                wanted[key] = pod
        with self.lock:
            running = set(self.heads)
            to_stop = [self.heads[k] for k in running - set(wanted)]
            to_start = []
            for key, pod in wanted.items():
                if key in running or key in self.starting:
                    continue
                if time.monotonic() - self.failed.get(key, -1e9) < RETRY_AFTER:
                    continue
                if pod.status.pod_ip in self.busy_ips:
                    continue  # kwok reuses IPs: wait until the old head on it is gone
                self.starting.add(key)
                self.busy_ips.add(pod.status.pod_ip)
                to_start.append((key, pod))
        for head in to_stop:
            threading.Thread(target=self.stop_head, args=(head,), daemon=True).start()
        for key, pod in to_start:
            threading.Thread(target=self.start_head, args=(key, pod), daemon=True).start()

    def start_head(self, key: str, pod: Any) -> None:
        ns, name, ip = pod.metadata.namespace, pod.metadata.name, pod.status.pod_ip
        t0 = time.monotonic()
        block = -1
        head: Head | None = None
        try:
            block = procs.claim("ray-ports", range(BLOCKS), self.owner, procs.owner_gone)
            named = named_ports(pod)
            ports = {**block_ports(block), "dashboard": named.get("dashboard", 8265),
                     "serve": named.get("serve", 8000)}
            temp_dir = TEMP_ROOT / str(block)
            shutil.rmtree(temp_dir, ignore_errors=True)
            temp_dir.mkdir(parents=True)
            args = [
                self.ray, "start", "--head", "--block", "--disable-usage-stats",
                "--node-ip-address", ip, "--dashboard-host", ip,
                "--dashboard-port", str(ports["dashboard"]), "--port", str(ports["gcs"]),
                "--ray-client-server-port", str(ports["client"]),
                "--dashboard-agent-listen-port", str(ports["dashboard-agent"]),
                "--metrics-export-port", str(ports["metrics"]),
                "--min-worker-port", str(ports["min-worker"]),
                "--max-worker-port", str(ports["max-worker"]),
                "--temp-dir", str(temp_dir), "--num-cpus", "1",
                "--object-store-memory", str(100 * 1024 * 1024),
            ]
            env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                   "PYTHONPATH": os.pathsep.join([str(REPO), str(APPS), str(EXAMPLES)])}
            logfile = self.logs / f"ray-{ns}-{name}.log"
            proc = procs.spawn(args, logfile, env=env)
            head = Head(key=key, namespace=ns, pod=name, uid=pod.metadata.uid, ip=ip,
                        block=block, pid=proc.pid, started=procs.start_time(proc.pid),
                        temp_dir=str(temp_dir), ports=ports)
            self._write(head)
            log.info("starting Ray head for %s/%s at %s (block %d, pid %d)",
                     ns, name, ip, block, proc.pid)
            dashboard = f"http://{ip}:{ports['dashboard']}/api/version"
            deadline = time.monotonic() + HEAD_START_TIMEOUT
            while not _http_ready(dashboard):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Ray head did not come up; see {logfile}")
                if self.stopping.is_set():
                    raise RuntimeError("runner stopping")
                time.sleep(0.5)
            serve = subprocess.run(
                [sys.executable, "-c", SERVE_START, ip, str(ports["gcs"]), str(ports["serve"])],
                env=env, capture_output=True, text=True, timeout=SERVE_START_TIMEOUT,
                check=False,
            )
            with logfile.open("a") as fh:
                fh.write(serve.stdout + serve.stderr)
            if serve.returncode != 0:
                raise RuntimeError(f"serve.start failed: {serve.stderr.strip()[-500:]}")
            head.ready = True
            self._write(head)
            with self.lock:
                self.heads[key] = head
                self.starting.discard(key)
                self.failed.pop(key, None)
            log.info("Ray head for %s/%s ready at %s (dashboard :%d, serve :%d) in %.1fs",
                     ns, name, ip, ports["dashboard"], ports["serve"], time.monotonic() - t0)
        except Exception as exc:
            log.error("Ray head for %s/%s failed: %s", ns, name, exc)
            if head is not None:
                self._teardown(head)
            elif block >= 0:
                procs.release("ray-ports", block)
            with self.lock:
                self.starting.discard(key)
                self.failed[key] = time.monotonic()
                self.busy_ips.discard(ip)

    def stop_head(self, head: Head) -> None:
        with self.lock:
            if self.heads.get(head.key) is not head:
                return
            del self.heads[head.key]
        log.info("stopping Ray head for %s/%s (pid %d)", head.namespace, head.pod, head.pid)
        self._teardown(head)
        with self.lock:
            self.busy_ips.discard(head.ip)
        log.info("stopped Ray head for %s/%s", head.namespace, head.pod)
        if not self.stopping.is_set():
            try:
                self.resync()  # a new pod may be waiting for this IP
            except Exception as exc:
                log.warning("resync after stop failed: %s", exc)

    def _write(self, head: Head) -> None:
        tmp = self.records / f".{head.block}.tmp"
        tmp.write_text(json.dumps(asdict(head)))
        os.replace(tmp, self.records / f"{head.block}.json")

    def _teardown(self, head: Head) -> None:
        # The pod is gone: no need for Ray's 30 s drain. A short grace, then SIGKILL.
        procs.stop_session(head.pid, head.started, grace=STOP_GRACE)
        shutil.rmtree(head.temp_dir, ignore_errors=True)
        (self.records / f"{head.block}.json").unlink(missing_ok=True)
        procs.release("ray-ports", head.block)

    # -- main loop ------------------------------------------------------------------------
    def run(self, ready_file: Path | None) -> None:
        from kubernetes import watch

        self.resync()
        if ready_file is not None:
            ready_file.write_text(str(os.getpid()))
        log.info("watching pods with %s", HEAD_SELECTOR)
        while not self.stopping.is_set():
            try:
                w = watch.Watch()
                for _event in w.stream(self.v1.list_pod_for_all_namespaces,
                                       label_selector=HEAD_SELECTOR, timeout_seconds=5):
                    self.resync()
                    if self.stopping.is_set():
                        break
                self.resync()
            except Exception as exc:
                if self.stopping.is_set():
                    break
                log.warning("watch error: %s", exc)
                time.sleep(1)

    def shutdown(self) -> None:
        self.stopping.set()
        # wait for heads being started, then stop everything
        deadline = time.monotonic() + 30
        while self.starting and time.monotonic() < deadline:
            time.sleep(0.2)
        with self.lock:
            heads = list(self.heads.values())
        threads = [threading.Thread(target=self.stop_head, args=(h,)) for h in heads]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ray pod runner for the gitray test env")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    runner = Runner(args.kubeconfig, args.state_dir)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        runner.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watcher = threading.Thread(target=runner.run, args=(args.ready_file,), daemon=True)
    watcher.start()
    while not runner.stopping.is_set() and watcher.is_alive():
        runner.stopping.wait(1)
    runner.shutdown()
    if args.ready_file is not None:
        with contextlib.suppress(OSError):
            args.ready_file.unlink()
    log.info("runner stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
