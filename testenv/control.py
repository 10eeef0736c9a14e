"""Start, inspect and stop the loopback test environment (stdlib only).

`up` starts, in order: etcd, kube-apiserver (TLS, openssl-made certs), the KubeRay CRDs,
kube-controller-manager, kube-scheduler, kwok (+ two fake Nodes with loopback podCIDRs), the
real node by default (node.py: containerd, kubelet, kube-proxy, CoreDNS; Ray runs in real pods
there, and kwok's nodes are tainted for scale tests) and the KubeRay operator (out of cluster;
the release the cache was built with: v1.7.0 from ``../shared/kuberay-v1.7.0``, else the module
proxy's v1.6.2; ``state.json`` records it in the operator's component, ``status`` prints it).
Without the real node (`--no-node`), the Ray pod runner (`testenv/raypods.py`) runs Ray
heads on the host for kwok's pods instead. The control plane binds 127.0.0.1 on free ports;
PIDs, ports and paths go to ``<state-dir>/state.json``. With ``gateway`` (real node only), a
Gateway too: the Gateway API CRDs and Traefik (testenv/gatewayenv.py; not run yet).
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testenv import build, images, kuberay, node, procs

REPO = Path(__file__).resolve().parents[1]
NODE_NAMES = ["kwok-node-0", "kwok-node-1"]
SERVICE_CIDR = "10.0.0.0/24"  # bookkeeping only: never dialled
# etcd and kube-apiserver are served first when the CPU is short: in a cluster they run on
# machines of their own, here on the same two cores as Ray pods and the tests. Without it, a
# few Ray clusters starting at once left Lease requests unanswered for over 10 s. (Lowering the
# niceness needs root, as the real node does; without it `nice` warns and runs them as usual.)
CONTROL_PLANE_NICENESS = -10
# The Kubernetes components collect their garbage less often than Go's default (GOGC=100): in
# the clean-clone run of dc85845 the suite's kube-apiserver used 308 CPU-s, and by its own Go
# runtime metrics a third of its CPU went to the collector (a live heap of about 450 MB,
# collected every 3.7 s). Memory is what this machine has plenty of. Not the KubeRay operator:
# bench/ measures it beside gitray as users run it.
GOGC = "300"
GOGC_COMPONENTS = frozenset({"etcd", "kube-apiserver", "kube-controller-manager",
                             "kube-scheduler", "kwok", "containerd", "kubelet", "kube-proxy",
                             "coredns"})


class EnvError(RuntimeError):
    """The environment could not be started (message says which part and why)."""


def default_state_dir() -> Path:
    env = os.environ.get("GITRAY_TESTENV_STATE")
    if env:
        return Path(env).expanduser()
    return Path(f"/tmp/gitray-testenv-{os.getuid()}")


@dataclass
class State:
    """What `up` recorded; JSON in ``<dir>/state.json``."""

    dir: Path
    cache: str = ""
    kubeconfig: str = ""
    apiserver: str = ""
    components: dict[str, dict[str, object]] = field(default_factory=dict)
    started_at: float = 0.0
    ready_seconds: float = 0.0
    pod_net: int = 0  # pods get IPs in 127.<pod_net>.0.0/16 (claimed machine-wide)
    # The real node (node.py), when started: {"name", "ip", "pod_subnet", "service_cidr",
    # "dns_ip", "before": path of the machine snapshot taken before anything changed}
    node: dict[str, str] = field(default_factory=dict)

    @property
    def pod_network(self) -> str:
        return f"127.{self.pod_net}.0.0/16"

    def node_cidrs(self) -> dict[str, str]:
        return {n: f"127.{self.pod_net}.{i}.0/24" for i, n in enumerate(NODE_NAMES)}

    @property
    def file(self) -> Path:
        return self.dir / "state.json"

    @classmethod
    def load(cls, state_dir: Path) -> State | None:
        path = state_dir / "state.json"
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        data["dir"] = state_dir
        return cls(**data)

    def save(self) -> None:
        data = {k: v for k, v in self.__dict__.items() if k != "dir"}
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.file)

    def ports(self) -> list[int]:
        out: list[int] = []
        for comp in self.components.values():
            out += [int(p) for p in comp.get("ports", [])]  # type: ignore[attr-defined]
        return out

    def alive(self) -> dict[str, bool]:
        return {
            name: procs.alive(int(c["pid"]), int(c["started"]))  # type: ignore[call-overload]
            for name, c in self.components.items()
        }


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise EnvError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()[-800:]}")


# The names a pod uses for the API server (the `kubernetes` Service), in its serving cert.
_IN_CLUSTER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local")


def make_certs(pki: Path, ips: tuple[str, ...] = ()) -> None:
    """A CA, the apiserver serving cert, an admin (system:masters) client cert, SA keys.

    `ips`: addresses the apiserver is also reached at besides 127.0.0.1 (with a real node: the
    node's address and the `kubernetes` Service's ClusterIP, plus the in-cluster DNS names)."""
    pki.mkdir(parents=True, exist_ok=True)
    days = "30"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.crt", "-days", days, "-subj", "/CN=gitray-testenv-ca", cwd=pki)
    sans = ["IP:127.0.0.1", "DNS:localhost", *(f"IP:{ip}" for ip in ips),
            *((f"DNS:{n}" for n in _IN_CLUSTER_NAMES) if ips else ())]
    specs = {
        "apiserver": ("/CN=kube-apiserver",
                      f"subjectAltName={','.join(sans)}\n"
                      "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"),
        "admin": ("/O=system:masters/CN=gitray-testenv-admin",
                  "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n"),
    }
    for name, (subj, ext) in specs.items():
        (pki / f"{name}.ext").write_text(ext)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", "-subj", subj, cwd=pki)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", days,
                 "-extfile", f"{name}.ext", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
    # JSON is valid YAML; kubectl and the Python client both read it.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testenv", "cluster": {
            "server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "admin", "user": {
            "client-certificate": str(pki / "admin.crt"),
            "client-key": str(pki / "admin.key")}}],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": "admin"}}],
        "current-context": "testenv",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")


def _wait(what: str, check: Callable[[], bool], timeout: float, proc_pid: int | None,
          log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_pid is not None and not procs.alive(proc_pid):
            raise EnvError(f"{what} exited during start-up; last log lines:\n{_tail(log)}")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError, ValueError):
            pass
        time.sleep(0.3)
    raise EnvError(f"{what} not ready after {timeout:.0f}s; last log lines:\n{_tail(log)}")


def _tail(log: Path | None, n: int = 20) -> str:
    if log is None or not log.is_file():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-n:])


def _http_ok(url: str, ctx: ssl.SSLContext | None = None, any_status: bool = False) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return any_status


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _client_ctx(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


class _Starter:
    def __init__(self, state: State) -> None:
        self.state = state
        self.logs = state.dir / "logs"

    def start(self, name: str, args: list[str], ports: list[int],
              env: dict[str, str] | None = None, niceness: int = 0) -> tuple[int, Path]:
        log = self.logs / f"{name}.log"
        if name in GOGC_COMPONENTS:
            env = {**(os.environ if env is None else env), "GOGC": GOGC}
        proc = procs.spawn(args, log, env=env, cwd=self.state.dir, niceness=niceness)
        started = procs.start_time(proc.pid)
        self.state.components[name] = {
            "pid": proc.pid, "started": started, "ports": ports, "log": str(log),
            "args": args,
        }
        self.state.save()
        return proc.pid, log


def kubectl(state: State, *args: str, check: bool = True, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    binary = Path(state.cache) / "bin" / "kubectl"
    proc = subprocess.run([str(binary), "--kubeconfig", state.kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise EnvError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()[-1500:]}")
    return proc


def _node_manifest(state: State) -> str:
    items = []
    # With a real node, kwok's nodes take only pods that tolerate KWOK_TAINT (scale tests);
    # everything else (the examples' manifests unchanged) lands on the real node.
    taints = ([{"key": node.KWOK_TAINT, "value": "true", "effect": "NoSchedule"}]
              if state.node else [])
    for name, cidr in state.node_cidrs().items():
        items.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                    node.NODE_LABEL: "kwok",
                                    "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "taints": taints},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                       "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
        })
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def up(state_dir: Path | None = None, say: Callable[[str], None] = print,
       real_node: bool = False, node_wait: float = 0.0, gateway: bool = False) -> State:
    """Start everything (or reuse a running environment in `state_dir`); returns its State.

    With `real_node`, also the real node (node.py): root only, one per machine (waits up to
    `node_wait` s for the machine-wide lock, then fails naming the holder). With `gateway`
    (real node only), also Traefik and the Gateway API CRDs (gatewayenv.py)."""
    if gateway and not real_node:
        raise EnvError("--gateway needs the real node (Traefik dials pod IPs from "
                       "EndpointSlices, which kwok's loopback pods never get)")
    state_dir = state_dir or default_state_dir()
    existing = State.load(state_dir)
    if existing is not None:
        if existing.components and all(existing.alive().values()):
            if gateway and "traefik" not in existing.components:
                raise EnvError(f"testenv already up in {state_dir} without the Gateway; run: "
                               f"scripts/testenv down --state-dir {state_dir}, then up --gateway")
            say(f"testenv already up in {state_dir}")
            return existing
        say(f"stale testenv state in {state_dir}: stopping what is left")
        down(state_dir, say=lambda _m: None)
    lay = build.layout(probe_if_needed=False)
    if not lay.complete():
        raise EnvError(
            f"test environment not built (missing in {lay.root}: "
            f"{', '.join(lay.missing()[:5])}); run: scripts/testenv build"
        )
    if gateway:  # a cache from before Traefik was built: refused here, not half-way up
        from testenv import gatewayenv, traefik

        gatewayenv.require_built(traefik.GatewayLayout(lay.root))
    t0 = time.monotonic()
    if real_node:  # before anything is written: a refused `up` leaves nothing behind
        try:
            node.acquire_lock(state_dir, wait=node_wait,
                              bring_down=lambda left: _bring_down_left_behind(left, say))
        except node.NodeError as exc:
            raise EnvError(str(exc)) from None
    state_dir.mkdir(parents=True, exist_ok=True)
    state = State(dir=state_dir, cache=str(lay.dir), started_at=time.time())
    state.save()
    try:
        if real_node:
            _network_up(state, say)
        _up(state, lay, say, gateway)
    except BaseException:
        say("start-up failed: stopping what was started")
        down(state_dir, say=lambda _m: None, keep_logs=True)
        if real_node:
            node.release_lock(state_dir)
        raise
    state.ready_seconds = round(time.monotonic() - t0, 1)
    state.save()
    return state


def _bring_down_left_behind(left: Path, say: Callable[[str], None]) -> None:
    say(f"a real node was left behind in {left} by a run that is gone: bringing it down")
    down(left, say=lambda m: say(f"  {m}"), keep_logs=True)
    node.release_lock(left)  # also when its state had no node record


def _network_up(state: State, say: Callable[[str], None]) -> None:
    """Snapshot the machine, then: unreachable route, guard table, bridge, Service route."""
    t = time.monotonic()
    node_dir = state.dir / "node"
    node_dir.mkdir(parents=True, exist_ok=True)
    before = node.snapshot()
    (node_dir / "before.json").write_text(json.dumps(before, indent=1) + "\n")
    state.node = {"name": node.NODE_NAME, "ip": node.NODE_IP, "pod_subnet": node.POD_SUBNET,
                  "service_cidr": node.SERVICE_CIDR, "dns_ip": node.DNS_IP,
                  "bridge": node.BRIDGE, "before": str(node_dir / "before.json")}
    state.save()
    try:
        node.network_up(node_dir, before)
    except node.NodeError as exc:
        raise EnvError(str(exc)) from None
    say(f"network (unreachable {node.GUARD_RANGE}, nft {node.GUARD_TABLE}, {node.BRIDGE} "
        f"{node.NODE_IP}/24, route {node.SERVICE_CIDR}): ready [{time.monotonic() - t:.1f}s]")


def _up(state: State, lay: build.Layout, say: Callable[[str], None],
        gateway: bool = False) -> None:
    d = state.dir
    pki = d / "pki"
    bin_ = lay.bin
    starter = _Starter(state)

    def step(label: str) -> Callable[[], None]:
        t = time.monotonic()
        return lambda: say(f"{label}: ready [{time.monotonic() - t:.1f}s]")

    done = step("certificates")
    make_certs(pki, (node.NODE_IP, node.KUBERNETES_SERVICE_IP) if state.node else ())
    done()

    done = step("etcd")
    etcd_client, etcd_peer = procs.free_port(), procs.free_port()
    data = d / "etcd-data"
    pid, log = starter.start("etcd", [
        str(bin_ / "etcd"), "--name", "testenv", "--data-dir", str(data),
        "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
        "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
        "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
        "--initial-cluster", f"testenv=http://127.0.0.1:{etcd_peer}",
        "--unsafe-no-fsync", "--log-level", "warn",
    ], [etcd_client, etcd_peer], niceness=CONTROL_PLANE_NICENESS)
    _wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{etcd_client}/health"), 60, pid, log)
    # The pod network is shared by every environment on the machine: claim one /16 for as long
    # as this etcd lives.
    state.pod_net = procs.claim("pod-net", range(1, 255),
                                {"pid": pid, "started": procs.start_time(pid),
                                 "state_dir": str(d)}, procs.owner_gone)
    state.save()
    done()

    done = step("kube-apiserver")
    api_port = procs.free_port()
    # With a real node, pods reach the API server like in any cluster: the `kubernetes` Service
    # (ClusterIP, kept by the apiserver's endpoint reconciler) -> the node's address, where it
    # listens; ServiceAccount tokens are projected into pods (admission plugin on, the
    # controller-manager publishes kube-root-ca.crt). Without one, loopback only.
    host = node.NODE_IP if state.node else "127.0.0.1"
    in_cluster = ([f"--advertise-address={host}"] if state.node else
                  ["--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                   "--disable-admission-plugins=ServiceAccount"])
    state.apiserver = f"https://{host}:{api_port}"
    state.kubeconfig = str(d / "kubeconfig")
    write_kubeconfig(Path(state.kubeconfig), state.apiserver, pki)
    pid, log = starter.start("kube-apiserver", [
        str(bin_ / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{etcd_client}",
        f"--bind-address={host}", *in_cluster,
        f"--secure-port={api_port}", f"--cert-dir={d / 'apiserver-certs'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={node.SERVICE_CIDR if state.node else SERVICE_CIDR}",
        *([f"--kubelet-client-certificate={pki / 'admin.crt'}",
           f"--kubelet-client-key={pki / 'admin.key'}",
           "--kubelet-preferred-address-types=InternalIP"] if state.node else []),
        "--authorization-mode=RBAC", "--allow-privileged=true", "--profiling=false", "-v=1",
    ], [api_port], niceness=CONTROL_PLANE_NICENESS)
    ctx = _client_ctx(pki)
    _wait("kube-apiserver", lambda: _http_ok(f"{state.apiserver}/readyz", ctx), 120, pid, log)
    state.save()
    done()

    release = lay.versions["kuberay"]
    done = step(f"KubeRay {release} CRDs")
    crds = sorted(str(p) for p in lay.crds.glob("*.yaml"))
    kubectl(state, "apply", "--server-side", *[a for c in crds for a in ("-f", c)])
    names = [f"crd/{Path(c).name.removeprefix('ray.io_').removesuffix('.yaml')}.ray.io"
             for c in crds]
    kubectl(state, "wait", "--for=condition=Established", "--timeout=60s", *names)
    done()

    kconf = state.kubeconfig
    done = step("kube-controller-manager")
    cm_port = procs.free_port()
    pid, log = starter.start("kube-controller-manager", [
        str(bin_ / "kube-controller-manager"), f"--kubeconfig={kconf}",
        f"--authentication-kubeconfig={kconf}", f"--authorization-kubeconfig={kconf}",
        "--bind-address=127.0.0.1", f"--secure-port={cm_port}", "--leader-elect=false",
        f"--cert-dir={d / 'controller-manager-certs'}",
        f"--root-ca-file={pki / 'ca.crt'}", f"--service-account-private-key-file={pki / 'sa.key'}",
        "--use-service-account-credentials=false", "-v=1",
    ], [cm_port])
    insecure = _insecure()
    _wait("kube-controller-manager",
          lambda: _http_ok(f"https://127.0.0.1:{cm_port}/healthz", insecure), 60, pid, log)
    done()

    done = step("kube-scheduler")
    sched_port = procs.free_port()
    pid, log = starter.start("kube-scheduler", [
        str(bin_ / "kube-scheduler"), f"--kubeconfig={kconf}",
        f"--authentication-kubeconfig={kconf}", f"--authorization-kubeconfig={kconf}",
        "--bind-address=127.0.0.1", f"--secure-port={sched_port}", "--leader-elect=false",
        f"--cert-dir={d / 'scheduler-certs'}", "-v=1",
    ], [sched_port])
    _wait("kube-scheduler",
          lambda: _http_ok(f"https://127.0.0.1:{sched_port}/healthz", insecure), 60, pid, log)
    done()

    done = step("kwok + nodes")
    kwok_port = procs.free_port()
    stages = [f"--config={p}" for p in sorted(lay.stages.glob("*.yaml"))]
    pid, log = starter.start("kwok", [
        str(bin_ / "kwok"), f"--kubeconfig={kconf}", *stages,
        # only its own fake nodes, never the real one
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        # keep its nodes' leases (else the node-lifecycle controller marks them NotReady)
        "--node-lease-duration-seconds=40",
        "--node-ip=127.0.0.1", f"--cidr=127.{state.pod_net}.255.0/24",
        f"--server-address=127.0.0.1:{kwok_port}",
    ], [kwok_port])
    kubectl(state, "apply", "-f", "-", stdin=_node_manifest(state))
    _wait("kwok nodes Ready", lambda: kubectl(
        state, "wait", "--for=condition=Ready", "--timeout=5s", "node", *NODE_NAMES, check=False,
    ).returncode == 0, 90, pid, log)
    done()

    if state.node:
        _node_up(state, lay, starter, step)
    if gateway:  # before KubeRay: its incremental-upgrade gate needs the Gateway API kinds
        from testenv import gatewayenv, traefik

        gatewayenv.gateway_up(state, traefik.GatewayLayout(lay.root), starter, step)

    done = step(f"kuberay-operator (KubeRay {release}, {kuberay.origin(lay)})")
    probe_port = procs.free_port()
    # With a real node, KubeRay's own RayService/RayJob controllers reach dashboards through
    # the API server's service proxy (the operator runs on the host, without cluster DNS).
    proxy = ["--use-kubernetes-proxy"] if state.node else []
    pid, log = starter.start("kuberay-operator", [
        str(bin_ / "kuberay-operator"), "--metrics-addr=0", *proxy,
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        "--enable-leader-election=false", "--log-stdout-encoder=console",
        "--feature-gates=RayCronJob=true"
        + (",RayServiceIncrementalUpgrade=true" if gateway else ""),
    ], [probe_port], env={**os.environ, "KUBECONFIG": kconf})
    # which KubeRay runs (status, `up`, the tests): keys of the component's own record
    state.components["kuberay-operator"].update(version=release, origin=kuberay.origin(lay))
    state.save()
    _wait("kuberay-operator",
          lambda: _http_ok(f"http://127.0.0.1:{probe_port}/readyz"), 90, pid, log)
    done()

    if state.node:
        return  # Ray runs in real pods: the Ray pod runner is for kwok-only environments
    done = step("ray pod runner")
    ready_file = d / "raypods.ready"
    ready_file.unlink(missing_ok=True)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    pid, log = starter.start("raypods", [
        sys.executable, "-m", "testenv.raypods", "--kubeconfig", kconf,
        "--state-dir", str(d), "--ready-file", str(ready_file),
    ], [], env=env)
    _wait("ray pod runner", ready_file.is_file, 60, pid, log)
    done()


def _node_up(state: State, lay: build.Layout, starter: _Starter,
             step: Callable[[str], Callable[[], None]]) -> None:
    """containerd (+ images), kubelet, kube-proxy, cluster DNS: the real node."""
    d, bin_, kconf = state.dir / "node", lay.bin, state.kubeconfig
    pki = state.dir / "pki"

    done = step("containerd")
    (d / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
    (d / "cni" / "net.d" / "10-gitray-testenv.conflist").write_text(node.cni_config(d))
    (d / "containerd").mkdir(parents=True, exist_ok=True)
    (d / "containerd" / "config.toml").write_text(
        node.containerd_config(d, images.PAUSE_TAG))
    sock = d / "containerd" / "containerd.sock"
    pid, log = starter.start("containerd", [
        shutil.which("containerd") or "/usr/bin/containerd",
        "--config", str(d / "containerd" / "config.toml"), "--log-level", "warn",
    ], [])
    _wait("containerd", lambda: sock.exists() and node.ctr(
        d, "version", check=False, timeout=10).returncode == 0, 60, pid, log)
    done()

    done = step("pause image imported")
    node.ctr(d, "images", "import", str(images.pause_image_path(lay.root)), timeout=120)
    done()
    # The Ray image (~700 MB) is imported while the kubelet, kube-proxy and CoreDNS start.
    ray_import: dict[str, object] = {}

    def import_ray() -> None:
        t = time.monotonic()
        try:
            node.ctr(d, "images", "import", str(images.ray_image_path(lay.root)), timeout=600)
        except BaseException as exc:  # reported by the join below
            ray_import["error"] = exc
        ray_import["seconds"] = time.monotonic() - t
    importer = threading.Thread(target=import_ray, daemon=True, name="ray-image-import")
    importer.start()

    done = step("kubelet")
    healthz = procs.free_port()
    (d / "kubelet").mkdir(parents=True, exist_ok=True)
    (d / "kubelet" / "config.json").write_text(node.kubelet_config(d, pki, healthz))
    pid, log = starter.start("kubelet", [
        str(bin_ / "kubelet"), f"--config={d / 'kubelet' / 'config.json'}",
        f"--kubeconfig={kconf}", f"--root-dir={d / 'kubelet' / 'root'}",
        f"--cert-dir={d / 'kubelet' / 'pki'}", f"--node-ip={node.NODE_IP}",
        f"--hostname-override={node.NODE_NAME}",
        f"--node-labels={node.NODE_LABEL}=real", "-v=1",
    ], [healthz])
    _wait("kubelet healthz", lambda: _http_ok(f"http://127.0.0.1:{healthz}/healthz"), 60,
          pid, log)
    _wait("real node Ready", lambda: kubectl(
        state, "wait", "--for=condition=Ready", "--timeout=5s", f"node/{node.NODE_NAME}",
        check=False).returncode == 0, 120, pid, log)
    done()

    done = step("kube-proxy (nftables)")
    kp_health, kp_metrics = procs.free_port(), procs.free_port()
    (d / "kube-proxy.json").write_text(node.kube_proxy_config(kconf, kp_health, kp_metrics))
    pid, log = starter.start("kube-proxy", [
        str(bin_ / "kube-proxy"), f"--config={d / 'kube-proxy.json'}", "-v=1",
    ], [kp_health, kp_metrics])
    _wait("kube-proxy", lambda: _http_ok(f"http://127.0.0.1:{kp_health}/healthz"), 60, pid,
          log)
    done()

    done = step("cluster DNS (CoreDNS)")
    kubectl(state, "apply", "-f", "-", stdin=node.dns_objects())
    ready = procs.free_port()
    (d / "Corefile").write_text(node.corefile(kconf, ready))
    pid, log = starter.start("coredns", [
        str(bin_ / "coredns"), "-conf", str(d / "Corefile"), "-dns.port", "53",
    ], [ready])
    _wait("coredns", lambda: _http_ok(f"http://127.0.0.1:{ready}/ready"), 60, pid, log)
    done()

    done = step(f"Ray image {', '.join(images.RAY_TAGS)} imported (in parallel)")
    importer.join(600)
    if importer.is_alive() or "error" in ray_import:
        raise EnvError(f"importing the Ray image failed: {ray_import.get('error', 'timeout')}")
    done()


def _node_down(state: State, say: Callable[[str], None], grace: float) -> None:
    """Pods off the real node, then kubelet, kube-proxy, CoreDNS, containers, containerd."""
    d = state.dir / "node"
    kubelet = state.components.get("kubelet")
    if kubelet and procs.alive(int(kubelet["pid"]), kubelet.get("started")):  # type: ignore[call-overload]
        # Let the kubelet stop its pods properly (volumes unmounted, CNI DEL), briefly.
        kubectl(state, "delete", "pods", "--all-namespaces", "--grace-period=0", "--force",
                "--wait=false", f"--field-selector=spec.nodeName={node.NODE_NAME}",
                check=False, timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            tasks = node.ctr(d, "tasks", "ls", "-q", check=False, timeout=10).stdout.split()
            if not tasks:
                break
            time.sleep(1)
    for name in ("kubelet", "kube-proxy", "coredns"):
        comp = state.components.get(name)
        if comp:
            procs.stop_session(int(comp["pid"]), comp.get("started"), grace=grace)  # type: ignore[call-overload,arg-type]
            say(f"stopped {name} (pid {comp['pid']})")
    containerd = state.components.get("containerd")
    shims: list[int] = []
    if containerd:
        if procs.alive(int(containerd["pid"]), containerd.get("started")):  # type: ignore[call-overload]
            node.stop_all_tasks(d)
        shims = node.shim_pids(d)
        procs.stop_session(int(containerd["pid"]), containerd.get("started"), grace=grace)  # type: ignore[call-overload,arg-type]
        say(f"stopped containerd (pid {containerd['pid']})")
    sock = str(d / "containerd" / "containerd.sock")
    for pid in shims:  # the shims this containerd started (their pid files), if still there
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if sock in cmdline:
            procs.stop_session(pid, procs.start_time(pid), grace=5)
            say(f"stopped containerd shim (pid {pid})")


def _machine_restore(state: State, say: Callable[[str], None]) -> None:
    """Undo what the real node changed on the machine (before.json), then release the lock."""
    before_file = Path(state.node.get("before", ""))
    if before_file.is_file():
        before = json.loads(before_file.read_text())
        node.unmount_under(state.dir)
        node.remove_new_netns(before)
        node.network_down(before, say)
        node.restore_sysctls(before, say)
        node.remove_new_host_paths(before)
        node.remove_new_cgroups(before)
        diff = node.compare(before, node.snapshot())
        for key, (was, now) in diff.items():
            say(f"WARNING: {key} differs from before up:\n  before: {was}\n  now:    {now}")
    node.release_lock(state.dir)


def down(state_dir: Path | None = None, say: Callable[[str], None] = print,
         keep_logs: bool = False, grace: float = 10.0) -> list[tuple[str, int]]:
    """Stop every recorded process (runner and its Ray heads first), check ports, clean up.

    Returns leftover listening sockets (empty when everything is gone).
    """
    state_dir = state_dir or default_state_dir()
    state = State.load(state_dir)
    if state is None:
        say(f"no testenv state in {state_dir}")
        return []
    if state.node:
        for name in ("raypods", "traefik", "kuberay-operator"):
            comp = state.components.get(name)
            if comp:
                procs.stop_session(int(comp["pid"]), comp.get("started"),  # type: ignore[call-overload,arg-type]
                                   grace=max(grace, 45.0) if name == "raypods" else grace)
                say(f"stopped {name} (pid {comp['pid']})")
        _stop_ray_heads(state_dir, grace)
        _node_down(state, say, grace)
    order = ["raypods", "traefik", "kuberay-operator", "kubelet", "kube-proxy", "coredns",
             "containerd", "kwok", "kube-scheduler",
             "kube-controller-manager", "kube-apiserver", "etcd"]
    names = [n for n in order if n in state.components]
    names += [n for n in state.components if n not in order]
    stopped = {"raypods", "traefik", "kuberay-operator", "kubelet", "kube-proxy", "coredns",
               "containerd"} if state.node else set()
    for name in names:
        comp = state.components[name]
        if name in stopped:
            continue  # stopped above, with the real node
        wait = max(grace, 45.0) if name == "raypods" else grace  # it stops its heads first
        procs.stop_session(int(comp["pid"]), comp.get("started"), grace=wait)  # type: ignore[call-overload,arg-type]
        if name == "raypods":
            _stop_ray_heads(state_dir, grace)
        say(f"stopped {name} (pid {comp['pid']})")
    _stop_ray_heads(state_dir, grace)
    networks = (state.pod_network,) if state.pod_net else ()
    leftovers = procs.leftover_listeners(state.ports(), networks=networks)
    if state.pod_net:
        procs.release("pod-net", state.pod_net)
    if state.node:
        _machine_restore(state, say)
    if leftovers:
        say(f"WARNING: listening sockets left: {leftovers}")
    if keep_logs:
        for sub in ("etcd-data", "ray", "node/containerd", "node/kubelet/root", "node/cni"):
            shutil.rmtree(state_dir / sub, ignore_errors=True)
        state.file.rename(state_dir / "state.json.stopped")
    else:
        shutil.rmtree(state_dir, ignore_errors=True)
    return leftovers


def _stop_ray_heads(state_dir: Path, grace: float) -> None:
    """Stop Ray heads the runner recorded (in case the runner could not do it itself)."""
    heads = state_dir / "ray-heads"
    if not heads.is_dir():
        return
    for record in heads.glob("*.json"):
        try:
            head = json.loads(record.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        procs.stop_session(int(head["pid"]), head.get("started"), grace=grace)
        shutil.rmtree(str(head.get("temp_dir", "")) or "/nonexistent", ignore_errors=True)
        procs.release("ray-ports", int(head["block"]))
        record.unlink(missing_ok=True)


def status(state_dir: Path | None = None) -> tuple[bool, str]:
    state_dir = state_dir or default_state_dir()
    state = State.load(state_dir)
    if state is None:
        return False, f"testenv: not running (no state in {state_dir})"
    lines = [f"testenv state: {state_dir}", f"KUBECONFIG={state.kubeconfig}",
             f"apiserver: {state.apiserver}", f"pod network: {state.pod_network}"]
    origin = state.components.get("kuberay-operator", {}).get("origin")
    lines.append(f"KubeRay: {kuberay.recorded_version(state)}" + (f" ({origin})" if origin else ""))
    if state.node:
        lines.append(f"real node: {state.node['name']} {state.node['ip']} (bridge "
                     f"{state.node['bridge']}), pods {state.node['pod_subnet']}, Services "
                     f"{state.node['service_cidr']}, cluster DNS {state.node['dns_ip']}")
    alive = state.alive()
    for name, comp in state.components.items():
        mark = "up" if alive[name] else "DOWN"
        lines.append(f"  {name:<24} {mark:<5} pid {comp['pid']} ports {comp.get('ports')}")
    heads = state_dir / "ray-heads"
    for record in sorted(heads.glob("*.json")) if heads.is_dir() else []:
        head = json.loads(record.read_text())
        lines.append(f"  ray head {head.get('pod')} @ {head.get('ip')} pid {head.get('pid')}")
    ok = bool(alive) and all(alive.values())
    return ok, "\n".join(lines)


def env_lines(state_dir: Path | None = None) -> str:
    state_dir = state_dir or default_state_dir()
    state = State.load(state_dir)
    if state is None:
        raise EnvError(f"testenv not running (no state in {state_dir}); run: scripts/testenv up")
    # A real-node environment is reused through GITRAY_TESTENV_NODE_STATE, not as a kwok-only
    # GITRAY_TESTENV_STATE (whose kwok tests need kwok's nodes untainted).
    var = "GITRAY_TESTENV_NODE_STATE" if state.node else "GITRAY_TESTENV_STATE"
    return (f"export KUBECONFIG={state.kubeconfig}\n"
            f"export {var}={state_dir}\n"
            f"export PATH={Path(state.cache) / 'bin'}:$PATH")
