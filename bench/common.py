"""Shared plumbing for the benchmarks: the real test environment, request counting at the API
server, measured child processes, generated GitOps repositories and live populations.

Nothing here imitates a component: the API server, etcd, KubeRay and Ray are the test
environment's (scripts/testenv), Git is the git command, gitray runs as its own process.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testenv.helpers import WaitTimeout, wait_for
from testenv.manifests import (
    RAY_IMAGE,
    cluster_spec,
    dump,
    gitray_config,
    serve_config,
    write_files,
)
from testenv.procs import free_port

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("GITRAY_BENCH_OUT") or REPO / "bench" / "out")
COUNTED = REPO / "bench" / "counted.py"
BENCH_NS_PREFIX = "bench-"
NAMESPACES = [f"{BENCH_NS_PREFIX}{i:02d}" for i in range(10)]
# The environment's Service CIDR is a /24 (253 ClusterIPs): not enough for thousands of
# RayService Services. Kubernetes >= 1.33 takes extra ranges as ServiceCIDR objects, so the
# benchmark adds one through the API instead of touching testenv.
EXTRA_SERVICE_CIDR = "10.64.0.0/12"


# `bench/run --only scale`: benchmarks 1 and 5 at the sizes of the scale issue
SCALE: dict[str, Any] = {"plan_sizes": [1000, 5000, 10000], "plan_runs": 1, "kubectl_max": 5000,
                         "git": [(10000, 5000), (10000, 20000)], "git_reps": 3}


def expand_only(only: str, profile: dict[str, Any], full: bool) -> list[str]:
    """The benchmarks ``--only`` names, ``scale`` expanded to plan + git; in a full run
    ``scale`` also sets their sizes in ``profile`` (explicit size flags override them later)."""
    wanted = [x.strip() for x in only.split(",") if x.strip()]
    if "scale" not in wanted:
        return wanted
    if full:
        profile.update(SCALE)
    rest = [w for w in wanted if w != "scale"]
    return rest + [b for b in ("plan", "git") if b not in rest]


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stats(values: Iterable[float]) -> dict[str, float]:
    v = sorted(values)
    if not v:
        return {}
    return {"n": len(v), "min": v[0], "median": statistics.median(v), "max": v[-1]}


def run_by_run(cells: list[str], numbers: list[float], runs: int) -> str:
    """One table cell over several runs: each run's figure in order ("17.8; 17.9; 18.1"),
    then their median when every one of the ``runs`` (more than one) gave a number."""
    text = "; ".join(cells)
    if len(numbers) == runs > 1:
        text += f" (median {statistics.median(numbers):.1f})"
    return text


def write_result(name: str, data: dict[str, Any]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


# ---- the environment -------------------------------------------------------------------------


@dataclass
class Env:
    state_dir: Path
    kubeconfig: str
    bin: Path
    apiserver: str
    started_here: bool
    _kube: Any = None

    @property
    def kubectl_path(self) -> str:
        return str(self.bin / "kubectl")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.kubectl_path, "--kubeconfig", self.kubeconfig, *args],
                              input=stdin, capture_output=True, text=True, check=check,
                              timeout=timeout)

    def kube(self) -> Any:
        """gitray's own Kube client (admin credentials of the environment)."""
        if self._kube is None:
            from gitray.k8s.client import Kube
            from gitray.k8s.settings import KubeSettings

            self._kube = Kube.connect(KubeSettings(kubeconfig=self.kubeconfig,
                                                   request_timeout_s=60))
        return self._kube

    def new_kube(self) -> Any:
        from gitray.k8s.client import Kube
        from gitray.k8s.settings import KubeSettings

        return Kube.connect(KubeSettings(kubeconfig=self.kubeconfig, request_timeout_s=60))

    def metrics(self) -> Counter[tuple[str, ...]]:
        return apiserver_requests(self.kube())

    def versions(self) -> dict[str, Any]:
        cache = Path(self.bin).parent
        try:
            data: dict[str, Any] = json.loads((cache / "versions.json").read_text())
        except (OSError, ValueError):
            data = {}
        return {"cache": cache.name, "components": data}


def _testenv(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "testenv"), *args],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=REPO)


def env_up(state_dir: Path) -> Env:
    """Reuse the environment running in ``state_dir``, or start one there."""
    started = False
    if _testenv("status", "--state-dir", str(state_dir)).returncode != 0:
        if (state_dir / "state.json").exists():
            _testenv("down", "--state-dir", str(state_dir))
        say(f"starting the test environment in {state_dir}")
        # kwok + the host Ray runner, as every figure in bench/README.md was measured (the real
        # node is one per machine and would make benchmarks wait for the test suite's)
        r = _testenv("up", "--no-node", "--state-dir", str(state_dir), timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"scripts/testenv up failed:\n{r.stdout}\n{r.stderr}")
        started = True
    state = json.loads((state_dir / "state.json").read_text())
    env = Env(state_dir, state["kubeconfig"], Path(state["cache"]) / "bin", state["apiserver"],
              started)
    env.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps({
        "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "gitray-bench"}, "spec": {"cidrs": [EXTRA_SERVICE_CIDR]}}))
    return env


def env_down(env: Env) -> None:
    if env._kube is not None:
        env._kube.close()
    if env.started_here:
        say("stopping the test environment")
        r = _testenv("down", "--state-dir", str(env.state_dir), timeout=300)
        if r.returncode != 0:
            say(f"testenv down: {r.stdout} {r.stderr}")


# ---- counting requests -----------------------------------------------------------------------

_METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_requests(kube: Any) -> Counter[tuple[str, ...]]:
    """apiserver_request_total by (verb, resource, subresource, dry_run), summed over codes.

    The scrape itself is a GET on /metrics: it is left out.
    """
    api = kube.api_client
    method, url, headers, body, post = api.param_serialize("GET", "/metrics",
                                                           auth_settings=["BearerToken"])
    resp = api.call_api(method, url, headers, body, post, _request_timeout=30)
    resp.read()
    text = resp.data.decode()
    out: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if labels.get("subresource") == "/metrics":
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""),
               labels.get("subresource", ""), labels.get("dry_run", ""))
        out[key] += int(float(m.group("value")))
    return out


def delta(after: Counter[tuple[str, ...]],
          before: Counter[tuple[str, ...]]) -> Counter[tuple[str, ...]]:
    d: Counter[tuple[str, ...]] = Counter()
    for k, v in after.items():
        if v - before.get(k, 0):
            d[k] = v - before.get(k, 0)
    return d


def summarize(d: Counter[tuple[str, ...]], resources: set[str] | None = None) -> dict[str, int]:
    """'VERB resource[/sub][ dry-run]' -> count, optionally only for some resources."""
    out: dict[str, int] = {}
    for (verb, res, sub, dry), n in sorted(d.items()):
        if resources is not None and res not in resources:
            continue
        name = f"{verb} {res or '(non-resource ' + sub + ')'}"
        if res and sub:
            name += f"/{sub}"
        if dry:
            name += " dry-run"
        out[name] = out.get(name, 0) + n
    return out


def read_counts(path: Path) -> dict[str, int]:
    """Requests a gitray process made, as recorded by bench/counted.py."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def gitray_argv(*args: str, counts: Path | None = None) -> list[str]:
    if counts is None:
        return [sys.executable, "-m", "gitray", *args]
    return [sys.executable, str(COUNTED), str(counts), *args]


def gitray_env(src: Path = REPO) -> dict[str, str]:
    """The environment gitray runs in; ``src``: the checkout whose code runs (another one
    than this, for a side-by-side benchmark)."""
    return {**os.environ, "PYTHONPATH": str(src), "NO_COLOR": "1"}


# ---- measured processes ----------------------------------------------------------------------


@dataclass
class Measured:
    argv: list[str]
    returncode: int
    wall_s: float
    user_s: float
    sys_s: float
    max_rss_mb: float
    stdout: str
    stderr: str

    loadavg: float = 0.0

    def brief(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), "cpu_s": round(self.user_s + self.sys_s, 3),
                "max_rss_mb": round(self.max_rss_mb, 1), "exit": self.returncode,
                "loadavg_1m": round(self.loadavg, 1)}


def run_measured(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 1800,
                 cwd: Path = REPO) -> Measured:
    """Run a child under /usr/bin/time: wall time, CPU time, peak RSS of the child itself.

    Not wait4() from this process: a child forked from a big parent starts with the parent's
    RSS high-water mark, and Linux carries it over exec into ru_maxrss. /usr/bin/time is small,
    so the peak it reports is the command's own.
    """
    out_dir = OUT / "proc"
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    out, err, usage = out_dir / f"{tag}.out", out_dir / f"{tag}.err", out_dir / f"{tag}.time"
    load = os.getloadavg()[0]
    with out.open("w") as o, err.open("w") as e:
        t0 = time.monotonic()
        proc = subprocess.Popen(["/usr/bin/time", "-o", str(usage), "-f", "%M %U %S", *argv],
                                stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        wall = time.monotonic() - t0
    fields = usage.read_text().split()[-3:] if usage.exists() else ["0", "0", "0"]
    rss_kb, user, system = int(fields[0]), float(fields[1]), float(fields[2])
    result = Measured(argv, proc.returncode, wall, user, system, rss_kb / 1024,
                      out.read_text(), err.read_text(), load)
    for f in (out, err, usage):
        f.unlink(missing_ok=True)
    return result


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def self_children_rusage() -> resource.struct_rusage:
    return resource.getrusage(resource.RUSAGE_CHILDREN)


# ---- a gitray sync process -------------------------------------------------------------------


@dataclass
class SyncProc:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    counts: Path | None = None
    name: str = ""

    def get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, OSError):
            return 0, ""

    def push_hook(self, secret: bytes, sha: str, timeout: float = 5) -> int:
        """Deliver a push webhook as GitHub does (the body signed with ``secret``:
        ``X-Hub-Signature-256``); the HTTP status (0: not delivered)."""
        body = json.dumps({"ref": "refs/heads/main", "after": sha}).encode()
        signature = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/hooks/git", data=body, method="POST",
            headers={"Content-Type": "application/json", "X-GitHub-Event": "push",
                     "X-Hub-Signature-256": signature})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except (urllib.error.URLError, OSError):
            return 0

    def metrics(self) -> dict[str, float]:
        code, text = self.get("/metrics")
        out: dict[str, float] = {}
        if code != 200:
            return out
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def synced(self) -> str:
        for name, v in self.metrics().items():
            if name.startswith("gitray_last_synced_revision_info{") and v == 1:
                return name.split('revision="', 1)[1].split('"', 1)[0]
        return ""

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def stop(self, timeout: float = 60) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_sync(env: Env, remote: Path, work: Path, *, lease_ns: str, interval: str = "1s",
               extra: Iterable[str] = (), counts: bool = False, name: str = "sync",
               identity: str | None = None, src: Path = REPO) -> SyncProc:
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"{name}-{port}.log"
    count_file = work / f"{name}-{port}.counts.json" if counts else None
    argv = gitray_argv(
        "sync", "--repo", f"file://{remote}", "--branch", "main", "--interval", interval,
        "--http-address", f"127.0.0.1:{port}", "--kubeconfig", env.kubeconfig,
        "--lease-namespace", lease_ns, "--dashboard", "pod-ip",
        "--cache-dir", str(work / f"cache-{name}"), "--log-format", "json", *extra,
        counts=count_file)
    penv = gitray_env(src)
    if identity:
        penv["POD_NAME"] = identity
        penv["HOSTNAME"] = identity
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=fh,
                                stdin=subprocess.DEVNULL, cwd=REPO, env=penv)
    sp = SyncProc(proc, port, log, count_file, name)
    try:
        wait_for(lambda: sp.get("/healthz")[0] == 200 or proc.poll() is not None, 60,
                 what=f"{name} /healthz")
    except WaitTimeout:
        sp.stop()
        raise
    if proc.poll() is not None:
        raise RuntimeError(f"gitray sync exited at start:\n{log.read_text()[-3000:]}")
    return sp


# ---- Git ---------------------------------------------------------------------------------------


def git(cwd: Path, *args: str, stdin: str | bytes | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, check=True,
                       text=not isinstance(stdin, bytes))
    out = r.stdout
    return (out.decode() if isinstance(out, bytes) else out).strip()


GIT_ENV = {"GIT_AUTHOR_NAME": "gitray bench", "GIT_AUTHOR_EMAIL": "bench@gitray.io",
           "GIT_COMMITTER_NAME": "gitray bench", "GIT_COMMITTER_EMAIL": "bench@gitray.io"}


@dataclass
class Remote:
    """A bare remote and a working clone pushing to it."""

    bare: Path
    work: Path

    @classmethod
    def create(cls, root: Path) -> Remote:
        if root.exists():
            shutil.rmtree(root)
        bare, work = root / "remote.git", root / "work"
        root.mkdir(parents=True)
        git(root, "init", "-q", "--bare", "-b", "main", str(bare))
        git(root, "init", "-q", "-b", "main", str(work))
        for k, v in (("user.email", "bench@gitray.io"), ("user.name", "gitray bench")):
            git(work, "config", k, v)
        git(work, "remote", "add", "origin", str(bare))
        return cls(bare, work)

    def commit(self, message: str, files: dict[str, str | None], push: bool = True) -> str:
        write_files(self.work, files)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "--allow-empty", "-m", message)
        if push:
            git(self.work, "push", "-q", "origin", "main")
        return git(self.work, "rev-parse", "HEAD")


# ---- generated workloads -----------------------------------------------------------------------


def hello_serve_config(replicas: int = 1, greeting: str = "hello") -> str:
    """The hello app (tests/integration/apps/hello.py) with its deployment's replicas."""
    return serve_config(("hello", "/hello", "hello:build"), args={"greeting": greeting},
                        deployments=[{"name": "Hello", "num_replicas": replicas,
                                      "ray_actor_options": {"num_cpus": 0}}])


def bench_cluster_spec(image: str = RAY_IMAGE, suspend: bool = True,
                       max_replicas: int = 2) -> dict[str, Any]:
    """A cluster with realistic requests, no workers until scaled (suspended by default)."""
    return cluster_spec(image, replicas=0, min_replicas=0, max_replicas=max_replicas,
                        realistic=True, suspend=suspend)


def bench_config(**extra: Any) -> str:
    """gitray.yaml for the benchmark namespaces."""
    return gitray_config(allowed=[f"{BENCH_NS_PREFIX}*"], ready_timeout="5m", **extra)


def rayservice(name: str, ns: str, *, image: str = "rayproject/ray:2.60.0", replicas: int = 1,
               greeting: str = "hello", suspend: bool = True) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"serveConfigV2": hello_serve_config(replicas, greeting),
                     "rayClusterConfig": bench_cluster_spec(image, suspend)}}


def raycluster(name: str, ns: str, *, max_replicas: int = 2) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns, "labels": {"team": "bench"}},
            "spec": bench_cluster_spec(max_replicas=max_replicas)}


@dataclass
class Fleet:
    """N RayServices + N RayClusters over 10 namespaces; ``changed`` indexes differ in Git."""

    n: int
    changed: frozenset[int] = field(default_factory=frozenset)

    def docs(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for i in range(self.n):
            ns = NAMESPACES[i % len(NAMESPACES)]
            if i in self.changed and i % 2 == 0:  # cluster change: blue-green upgrade
                rs = rayservice(f"svc-{i:05d}", ns, image="rayproject/ray:2.60.1")
            elif i in self.changed:  # Serve-only change
                rs = rayservice(f"svc-{i:05d}", ns, replicas=2)
            else:
                rs = rayservice(f"svc-{i:05d}", ns)
            yield f"{ns}/rayservices/svc-{i:05d}.yaml", rs
            rc = raycluster(f"rc-{i:05d}", ns, max_replicas=4 if i in self.changed else 2)
            yield f"{ns}/rayclusters/rc-{i:05d}.yaml", rc

    def files(self, max_files: int = 4000) -> dict[str, str]:
        """One file per workload, or several documents per file above ``max_files``."""
        docs = list(self.docs())
        per = max(1, -(-len(docs) // max_files))
        files: dict[str, str] = {"gitray.yaml": bench_config()}
        for start in range(0, len(docs), per):
            chunk = docs[start:start + per]
            path = chunk[0][0] if per == 1 else f"{chunk[0][0].rsplit('.', 1)[0]}-x{per}.yaml"
            files[path] = dump(*(d for _, d in chunk))
        return files


def changed_indexes(n: int, fraction: float = 0.05) -> frozenset[int]:
    step = max(1, round(1 / fraction))
    return frozenset(range(0, n, step))


def write_tree(root: Path, files: dict[str, str]) -> None:
    if root.exists():
        shutil.rmtree(root)
    write_files(root, files)


def desired_objects(repo_dir: Path) -> list[dict[str, Any]]:
    """The objects gitray would create for the working tree in ``repo_dir``: materialize()."""
    from gitray.git.source import read_snapshot
    from gitray.plans.load import load_snapshot

    result = load_snapshot(read_snapshot(str(repo_dir)), {})
    if result.diagnostics:
        raise RuntimeError("generated repo is invalid: "
                           + "; ".join(str(d) for d in result.diagnostics[:5]))
    from gitray.plans.materialize import materialize

    live = materialize(result.workloads, result.config)
    out = []
    for obj in live.objects:
        body = dict(obj.body)
        body.pop("status", None)
        out.append(body)
    return out


def ensure_namespaces(env: Env, names: Iterable[str]) -> None:
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
    env.kubectl("apply", "--server-side", "-f", "-",
                stdin="\n".join(json.dumps(d) for d in docs))


def apply_objects(env: Env, objects: list[dict[str, Any]], threads: int = 6) -> float:
    """Server-side apply (field manager gitray) of objects not yet live; returns seconds."""
    kube = env.kube()
    existing: set[tuple[str, str, str]] = set()
    for api, kind in {(o["apiVersion"], o["kind"]) for o in objects}:
        items, _ = kube.list(api, kind, label_selector="app.kubernetes.io/managed-by=gitray")
        existing |= {(kind, i["metadata"]["namespace"], i["metadata"]["name"]) for i in items}
    todo = [o for o in objects
            if (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) not in existing]
    if not todo:
        return 0.0
    t0 = time.monotonic()
    clients = [env.new_kube() for _ in range(threads)]

    def work(k: int) -> None:
        for body in todo[k::threads]:
            for attempt in range(5):
                try:
                    clients[k].apply(body)
                    break
                except Exception:
                    if attempt == 4:
                        raise
                    time.sleep(1 + attempt)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    for c in clients:
        c.close()
    return time.monotonic() - t0


def quiet_background(env: Env, seconds: float = 5.0) -> dict[str, float]:
    """Requests per second the API server sees with no benchmark running (controllers, kwok)."""
    before = env.metrics()
    time.sleep(seconds)
    d = delta(env.metrics(), before)
    return {k: round(v / seconds, 2) for k, v in summarize(d).items()}


def machine() -> dict[str, Any]:
    import platform

    mem = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) // 1024
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "mem_mb": mem,
            "kernel": platform.release(), "python": platform.python_version(),
            "git": git(REPO, "--version"), "gitray_commit": git(REPO, "rev-parse", "--short",
                                                                 "HEAD"),
            "gitray_dirty_files": git(REPO, "status", "--porcelain", "--", "gitray").splitlines(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "loadavg_at_start": [round(x, 1) for x in os.getloadavg()]}
