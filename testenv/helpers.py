"""Helpers for code that uses a running test environment (pytest fixtures, bench/, demos).

Needs the `kubernetes` package (the rest of testenv is stdlib only)::

    from testenv.helpers import TestEnv
    env = TestEnv.from_state_dir(Path(os.environ["GITRAY_TESTENV_STATE"]))
    env.core.list_node()
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from testenv import control, kuberay, procs
from testenv.raypods import HEAD_WAIT

T = TypeVar("T")

# Never pulled. On kwok's nodes the pod is not run (the Ray pod runner runs Ray on the host);
# on the real node it is the locally built image of the same Ray version (testenv/images.py)
RAY_IMAGE = "rayproject/ray:2.60.0"


class WaitTimeout(AssertionError):
    """A condition did not become true in time (an AssertionError so pytest reports it plainly)."""


def wait_for(check: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.5,
             what: str = "condition") -> T:
    """Call `check` until it returns something truthy (returned).

    Exceptions count as "not yet", except AssertionError which fails at once.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except AssertionError:
            raise  # a definite failure, not "not yet"
        except Exception as exc:
            last = exc
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}"
                              + (f" (last error: {last!r})" if last else ""))
        time.sleep(interval)


# A request to a Ray head or a pod of the environment waits this long for its answer by
# default: a bound on a hang, not a speed (bench/ measures those). On a fully busy 2-core
# machine a head's dashboard took over 10 s to answer a Serve PUT (clean-clone run of 8067722).
ANSWER_TIMEOUT_S = 30.0


def http_json(method: str, url: str, body: object | None = None,
              timeout: float = ANSWER_TIMEOUT_S) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, text


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_text(url: str, timeout: float = ANSWER_TIMEOUT_S) -> str:
    """GET `url` (the environment's own addresses: never through a proxy); the body as text.
    Raises on a non-2xx answer."""
    with _NO_PROXY.open(url, timeout=timeout) as resp:
        return str(resp.read().decode(errors="replace"))


def raycluster_manifest(name: str, workers: int = 1, labels: dict[str, str] | None = None,
                        ray_version: str = "2.60.0", real: bool = False) -> dict[str, Any]:
    """A small RayCluster: one head (named ports as KubeRay's samples) and one worker group.

    `real`: for the real node (real pods, real memory): one CPU per Ray node, a 100 MB object
    store, short grace periods, no service links."""
    if real:
        return real_raycluster_manifest(name, workers, labels, ray_version)
    resources = {"limits": {"cpu": "1", "memory": "1Gi"},
                 "requests": {"cpu": "100m", "memory": "256Mi"}}
    head_ports = [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
        {"containerPort": 8000, "name": "serve"},
    ]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "rayVersion": ray_version,
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": {"spec": {"containers": [{
                    "name": "ray-head", "image": RAY_IMAGE, "ports": head_ports,
                    "resources": resources}]}},
            },
            "workerGroupSpecs": [{
                "groupName": "workers", "replicas": workers, "minReplicas": 0,
                "maxReplicas": max(workers, 1), "rayStartParams": {},
                "template": {"spec": {"containers": [{
                    "name": "ray-worker", "image": RAY_IMAGE, "resources": resources}]}},
            }],
        },
    }


def real_raycluster_spec(workers: int = 1, ray_version: str = "2.60.0",
                         grace: int = 2) -> dict[str, Any]:
    """`spec` of a small RayCluster for real pods (head ~660 MB, worker ~250 MB)."""
    def pod(container: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {"terminationGracePeriodSeconds": grace, "enableServiceLinks": False,
                         "automountServiceAccountToken": False, "containers": [container]}}
    env = [{"name": "RAY_USAGE_STATS_ENABLED", "value": "0"}]
    small = {"num-cpus": "1", "object-store-memory": "100000000"}
    head_ports = [{"containerPort": 6379, "name": "gcs-server"},
                  {"containerPort": 8265, "name": "dashboard"},
                  {"containerPort": 10001, "name": "client"},
                  {"containerPort": 8000, "name": "serve"}]
    return {
        "rayVersion": ray_version,
        "headGroupSpec": {
            "rayStartParams": {**small, "dashboard-host": "0.0.0.0"},
            "template": pod({"name": "ray-head", "image": RAY_IMAGE, "ports": head_ports,
                             "env": env, "resources": {"requests": {"cpu": "100m",
                                                                    "memory": "1Gi"},
                                                       "limits": {"memory": "3Gi"}}}),
        },
        "workerGroupSpecs": [{
            "groupName": "workers", "replicas": workers, "minReplicas": 0,
            "maxReplicas": max(workers, 1), "rayStartParams": dict(small),
            "template": pod({"name": "ray-worker", "image": RAY_IMAGE, "env": env,
                             "resources": {"requests": {"cpu": "100m", "memory": "512Mi"},
                                           "limits": {"memory": "3Gi"}}}),
        }],
    }


def real_raycluster_manifest(name: str, workers: int = 1, labels: dict[str, str] | None = None,
                             ray_version: str = "2.60.0") -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": real_raycluster_spec(workers, ray_version)}


class TestEnv:
    """A running environment: kubeconfig, API clients and waiting helpers."""

    __test__ = False  # not a pytest test class

    def __init__(self, state: control.State) -> None:
        from kubernetes import client, config

        self.state = state
        self.kubeconfig = state.kubeconfig
        self.api_client: Any = config.new_client_from_config(config_file=state.kubeconfig)
        self.core: Any = client.CoreV1Api(self.api_client)
        self.custom: Any = client.CustomObjectsApi(self.api_client)

    @classmethod
    def from_state_dir(cls, state_dir: Path) -> TestEnv:
        state = control.State.load(state_dir)
        if state is None:
            raise control.EnvError(f"no running test environment in {state_dir}")
        return cls(state)

    @property
    def real_node(self) -> dict[str, str]:
        """The real node's facts ({"name", "ip", "pod_subnet", "service_cidr", "dns_ip", ...}),
        empty when this environment has none."""
        return dict(self.state.node)

    @property
    def kuberay_version(self) -> str:
        """The KubeRay release the environment's operator is, e.g. ``v1.7.0``."""
        return kuberay.recorded_version(self.state)

    def wait_raycluster_ready(self, namespace: str, name: str,
                              timeout: float = 300) -> dict[str, Any]:
        """The RayCluster once KubeRay reports `status.state: ready` (all its pods Ready)."""
        def ready() -> dict[str, Any] | None:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayclusters", name)
            return obj if (obj.get("status") or {}).get("state") == "ready" else None
        return wait_for(ready, timeout, interval=1, what=f"RayCluster {namespace}/{name} ready")

    def endpoint_addresses(self, namespace: str, service: str) -> list[str]:
        """Ready endpoint addresses of a Service, from its EndpointSlices."""
        from kubernetes import client

        slices = client.DiscoveryV1Api(self.api_client).list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={service}").items
        out = []
        for sl in slices:
            for ep in sl.endpoints or []:
                if ep.conditions is None or ep.conditions.ready is not False:
                    out += list(ep.addresses)
        return sorted(out)

    @property
    def pod_network(self) -> str:
        """The /16 (inside 127.0.0.0/8) this environment's pod IPs come from."""
        return self.state.pod_network

    def close(self) -> None:
        self.api_client.close()

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        return control.kubectl(self.state, *args, stdin=stdin, timeout=timeout).stdout

    # -- RayClusters ----------------------------------------------------------------------
    def create_raycluster(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.create_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayclusters", body)
        return result

    def delete_raycluster(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", name)

    def cluster_pods(self, namespace: str, cluster: str, node_type: str | None = None) -> list[Any]:
        selector = f"ray.io/cluster={cluster}"
        if node_type:
            selector += f",ray.io/node-type={node_type}"
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    # The waits below bound a hang, they time nothing (speed is measured in bench/): sized for
    # two test lanes on 2 cores, where a Ray head once took more than 120 s to start.
    def wait_head_pod(self, namespace: str, cluster: str, timeout: float = 240) -> Any:
        """The cluster's head pod once kwok reports it Running with a pod IP."""
        def ready() -> Any:
            for pod in self.cluster_pods(namespace, cluster, "head"):
                if pod.status.phase == "Running" and pod.status.pod_ip:
                    return pod
            return None
        return wait_for(ready, timeout, what=f"head pod of {namespace}/{cluster} Running")

    # -- Ray heads (started by the runner) ------------------------------------------------
    def ray_heads(self) -> list[dict[str, Any]]:
        """Records of the Ray heads the runner currently runs (pod, ip, pid, ports, ...)."""
        out = []
        folder = self.state.dir / "ray-heads"
        for record in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                out.append(json.loads(record.read_text()))
            except (OSError, json.JSONDecodeError):
                continue
        return out

    def ray_head_for(self, pod: Any) -> dict[str, Any] | None:
        """The runner's record of the Ray head for this pod (matched by pod UID), if any."""
        return next((h for h in self.ray_heads() if h["uid"] == pod.metadata.uid), None)

    def wait_ray_head(self, pod: Any, timeout: float = HEAD_WAIT) -> dict[str, Any]:
        """Wait until the runner reports the pod's Ray head (and Serve) started; its record.
        By default as long as a failed start and the runner's retry may take."""
        def ready() -> dict[str, Any] | None:
            head = self.ray_head_for(pod)
            return head if head and head.get("ready") else None
        return wait_for(ready, timeout, what=f"Ray head for pod {pod.metadata.name}")

    @staticmethod
    def ray_head_alive(record: dict[str, Any]) -> bool:
        """Whether any process of that Ray head (its session) is still running."""
        pid = int(record["pid"])
        return procs.alive(pid, record.get("started")) or bool(procs.session_members(pid))

    @staticmethod
    def dashboard_url(pod: Any, port: int = 8265) -> str:
        return f"http://{pod.status.pod_ip}:{port}"

    def wait_dashboard(self, pod: Any, timeout: float = HEAD_WAIT) -> str:
        """Wait until the pod's own Ray head answers the Serve REST API on the pod IP; its URL."""
        self.wait_ray_head(pod, timeout)
        url = self.dashboard_url(pod)

        def answers() -> bool:
            status, _ = http_json("GET", f"{url}/api/serve/applications/", timeout=5)
            return status == 200
        wait_for(answers, timeout, interval=1, what=f"Ray dashboard at {url}")
        return url

    def wait_serve_running(self, dashboard: str, app: str, timeout: float = 300) -> dict[str, Any]:
        """Wait for Serve application `app` to be RUNNING; fails fast on DEPLOY_FAILED."""
        def running() -> dict[str, Any] | None:
            status, body = http_json("GET", f"{dashboard}/api/serve/applications/", timeout=5)
            if status != 200:
                return None
            info = (body.get("applications") or {}).get(app)
            if info and info.get("status") == "DEPLOY_FAILED":
                raise AssertionError(f"{app} DEPLOY_FAILED: {info.get('message')}")
            return info if info and info.get("status") == "RUNNING" else None
        return wait_for(running, timeout, interval=1, what=f"Serve app {app} RUNNING")


def make_namespace(env: TestEnv, prefix: str = "t", name: str = "") -> str:
    """Create namespace ``name`` (by default ``<prefix>-<8 random hex digits>``); its name."""
    from kubernetes import client

    name = name or f"{prefix}-{uuid.uuid4().hex[:8]}"
    env.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def drop_namespace(env: TestEnv, name: str) -> None:
    """Delete the namespace and wait until its pods are gone: real pods take real memory (a
    Ray head about 700 MB). The test is over, so its pods are not given their grace period (a
    Ray container takes all of its 30 s on SIGTERM): the namespace's deletion has stopped
    their owners, and a second delete with grace 0 shortens the first one."""
    env.core.delete_namespace(name)
    with contextlib.suppress(Exception):
        env.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    wait_for(lambda: not env.core.list_namespaced_pod(name).items, timeout=180,
             what=f"pods of namespace {name} gone")


class EnvUnavailable(Exception):
    """The test environment is not built or could not be started (the message says why)."""


@contextlib.contextmanager
def environment(reuse: str | None = None, prefix: str = "gitray-testenv-",
                keep_logs: bool = True, real_node: bool = False,
                node_wait: float = 0.0, gateway: bool = False) -> Iterator[tuple[TestEnv, Path]]:
    """A running environment and its state dir: the one in ``reuse`` (never stopped here), or
    one started in a fresh temp dir and stopped on exit. Its dir (with every component's log,
    for a failed run's post-mortem) stays unless ``keep_logs`` is False. With ``gateway``,
    one with Traefik and the Gateway API CRDs (``up --gateway``).

    Raises EnvUnavailable with an actionable message; fixtures turn it into a failure, never
    a skip."""
    if reuse:
        state = control.State.load(Path(reuse))
        if state is None or not state.components or not all(state.alive().values()):
            raise EnvUnavailable(f"GITRAY_TESTENV_STATE={reuse} is not a running test "
                                 f"environment (start one with: scripts/testenv up "
                                 f"--state-dir {reuse})")
        if gateway and "traefik" not in state.components:
            raise EnvUnavailable(f"GITRAY_TESTENV_STATE={reuse} was started without the "
                                 f"Gateway (run: scripts/testenv build, then "
                                 f"scripts/testenv up --gateway --state-dir {reuse})")
        env = TestEnv(state)
        try:
            yield env, Path(reuse)
        finally:
            env.close()
        return
    from testenv import build

    try:
        lay = build.layout(probe_if_needed=False)
    except build.BuildError as exc:
        raise EnvUnavailable(str(exc)) from None
    if not lay.complete():
        raise EnvUnavailable(f"test environment not built (missing in {lay.root}: "
                             f"{', '.join(lay.missing()[:5])}); run: scripts/testenv build")
    if gateway:
        from testenv import gatewayenv, traefik

        try:
            gatewayenv.require_built(traefik.GatewayLayout(lay.root))
        except control.EnvError as exc:
            raise EnvUnavailable(str(exc)) from None
    started = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        try:
            state = control.up(started, say=lambda _m: None, real_node=real_node,
                               node_wait=node_wait, gateway=gateway)
        except control.EnvError as exc:
            raise EnvUnavailable(f"could not start the test environment: {exc}") from None
        env = TestEnv(state)
        try:
            yield env, started
        finally:
            env.close()
    finally:
        control.down(started, say=lambda _m: None)
        if not keep_logs:
            shutil.rmtree(started, ignore_errors=True)
