"""Acceptance tests of the kwok-only test environment (issue 3): real kube-apiserver/etcd/
controller-manager/scheduler, kwok, the KubeRay operator, and the Ray pod runner that runs real
Ray heads on the host for kwok's pods (what bench/ uses). The real node has tests of its own
(test_realnode.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from testenv import control, procs
from testenv.helpers import TestEnv, http_json, raycluster_manifest, wait_for

REPO = Path(__file__).resolve().parents[2]
HELLO = {"name": "hello", "route_prefix": "/hello", "import_path": "hello:app"}


def _get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


def _deploy_hello(testenv: TestEnv, pod: object, greeting: str | None = None) -> str:
    url = testenv.wait_dashboard(pod)
    app = dict(HELLO)
    if greeting is not None:
        app |= {"import_path": "hello:build", "args": {"greeting": greeting}}
    # 60 s, as gitray gives the PUT (it returns once Serve's controller has the config)
    status, body = http_json("PUT", f"{url}/api/serve/applications/", {"applications": [app]},
                             timeout=60)
    assert status == 200, (status, body)
    testenv.wait_serve_running(url, "hello")
    ip = pod.status.pod_ip  # type: ignore[attr-defined]
    return wait_for(lambda: _get_text(f"http://{ip}:8000/hello"), 60, what="serve route")


def test_raycluster_gets_a_real_ray_head_and_serve(kwokenv: TestEnv,
                                                   kwok_namespace: str) -> None:
    kwokenv.create_raycluster(kwok_namespace, raycluster_manifest("demo"))
    pod = kwokenv.wait_head_pod(kwok_namespace, "demo")
    ip = ipaddress.ip_address(pod.status.pod_ip)
    assert ip in ipaddress.ip_network(kwokenv.pod_network), ip
    assert pod.metadata.labels["ray.io/node-type"] == "head"
    svc = wait_for(lambda: kwokenv.core.read_namespaced_service(
        "demo-head-svc", kwok_namespace),
                   60, what="head service")
    assert svc.spec.selector["ray.io/cluster"] == "demo"

    url = kwokenv.wait_dashboard(pod)
    status, body = http_json("GET", f"{url}/api/serve/applications/")
    assert status == 200
    assert body["http_options"]["host"] == pod.status.pod_ip
    assert body["http_options"]["port"] == 8000

    assert _deploy_hello(kwokenv, pod) == "hello from gitray testenv"


def test_deleting_raycluster_removes_pods_and_ray(kwokenv: TestEnv, kwok_namespace: str) -> None:
    kwokenv.create_raycluster(kwok_namespace, raycluster_manifest("gone"))
    pod = kwokenv.wait_head_pod(kwok_namespace, "gone")
    kwokenv.wait_dashboard(pod)
    wait_for(lambda: len(kwokenv.cluster_pods(kwok_namespace, "gone")) == 2, 60,
             what="head and worker pods")
    head = kwokenv.wait_ray_head(pod)
    assert kwokenv.ray_head_alive(head)

    kwokenv.delete_raycluster(kwok_namespace, "gone")
    # Deadlines sized for a loaded 2-core machine (a parallel suite or benchmark): garbage
    # collection, kwok's pod-delete stage and the runner's stop all slow down under load, and
    # a clean-clone run once saw the Ray head outlive a 60 s wait.
    wait_for(lambda: not kwokenv.cluster_pods(kwok_namespace, "gone"), 240,
             what="pods garbage-collected")
    wait_for(lambda: not kwokenv.ray_head_alive(head), 240, what="Ray head processes gone")
    # the runner removes its record after the processes ended and their temp dir is removed:
    # a clean-clone run (the machine 95 % busy) read it in between
    wait_for(lambda: kwokenv.ray_head_for(pod) is None or None, 60,
             what="the runner's record of the Ray head removed")
    listening = procs.listening_sockets()
    assert not [s for s in listening if s[0] == pod.status.pod_ip], listening


def test_two_rayclusters_each_get_their_own_ray_head(kwokenv: TestEnv,
                                                     kwok_namespace: str) -> None:
    for name in ("one", "two"):
        kwokenv.create_raycluster(kwok_namespace, raycluster_manifest(name, workers=0))
    pods = {name: kwokenv.wait_head_pod(kwok_namespace, name) for name in ("one", "two")}
    assert pods["one"].status.pod_ip != pods["two"].status.pod_ip
    for name, pod in pods.items():
        assert _deploy_hello(kwokenv, pod, greeting=f"hi from {name}") == f"hi from {name}"
    heads = {h["ip"]: h for h in kwokenv.ray_heads()}
    one, two = (heads[p.status.pod_ip] for p in pods.values())
    assert one["pid"] != two["pid"] and one["block"] != two["block"]
    assert kwokenv.ray_head_alive(one) and kwokenv.ray_head_alive(two)


def _testenv_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "testenv"), *args],
                          capture_output=True, text=True, timeout=600, check=False)


def _niceness(pid: int, tid: int | None = None) -> int:
    stat = Path(f"/proc/{pid}/task/{tid or pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])


def test_the_control_plane_is_served_first_when_the_cpu_is_short(kwokenv: TestEnv) -> None:
    """etcd and kube-apiserver run at a lower niceness than everything else the environment
    starts (as root, which the environment needs for its real node), every thread included."""
    components = kwokenv.state.components
    expected = control.CONTROL_PLANE_NICENESS if os.geteuid() == 0 else 0
    # and with the kernel's scheduling by session (autogroup), their sessions' groups too
    groups = Path("/proc/sys/kernel/sched_autogroup_enabled").exists()
    for name in ("etcd", "kube-apiserver"):
        pid = int(components[name]["pid"])
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        assert len(threads) > 1 and {_niceness(pid, t) for t in threads} == {expected}, name
        assert procs.group_niceness(pid) == (expected if groups else None), name
    for name in ("kube-controller-manager", "kuberay-operator", "kwok"):
        assert _niceness(int(components[name]["pid"])) == 0, name
        assert procs.group_niceness(int(components[name]["pid"])) == (0 if groups else None)


def test_down_leaves_no_process_and_no_port(kwokenv: TestEnv) -> None:
    """A dedicated environment (own state dir), with a Ray head, brought up and down by the CLI."""
    state_dir = Path(tempfile.mkdtemp(prefix="gitray-testenv-updown-"))
    up = _testenv_cli("up", "--no-node", "--state-dir", str(state_dir))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"KUBECONFIG={state_dir / 'kubeconfig'}" in up.stdout
        state = control.State.load(state_dir)
        assert state is not None and all(state.alive().values())
        other = TestEnv(state)
        try:
            assert other.pod_network != kwokenv.pod_network  # claimed machine-wide
            other.kubectl("apply", "-f", "-", stdin=json.dumps(
                raycluster_manifest("updown", workers=0) | {"metadata": {
                    "name": "updown", "namespace": "default"}}))
            pod = other.wait_head_pod("default", "updown")
            other.wait_dashboard(pod)
            heads = other.ray_heads()
        finally:
            other.close()
        assert len(heads) == 1
        status = _testenv_cli("status", "--state-dir", str(state_dir))
        assert status.returncode == 0, status.stdout
    finally:
        down = _testenv_cli("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    leaders = [int(c["pid"]) for c in state.components.values()]  # type: ignore[call-overload]
    leaders += [int(h["pid"]) for h in heads]
    still = {pid: procs.session_members(pid) for pid in leaders}
    assert not any(still.values()), f"processes left: {still}"
    assert not any(procs.alive(pid) for pid in leaders)
    ports = set(state.ports()) | {int(p) for h in heads for p in h["ports"].values()}
    left = procs.leftover_listeners(ports, networks=(state.pod_network,))
    assert not left, f"listening sockets left: {left}"
    assert not state_dir.exists()
    assert not Path(heads[0]["temp_dir"]).exists()
    assert os.environ.get("GITRAY_TESTENV_STATE") != str(state_dir)
