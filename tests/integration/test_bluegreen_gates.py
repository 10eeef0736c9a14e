"""Gates of a blue-green RayService upgrade (issue 29 item 4) on the real environment: real
API server, KubeRay, real Ray Serve pods on the real node, the real gitray CLI with its default
flags (``--dashboard proxy``: the gates' requests go through the API server's service proxy to
the new cluster's own serve Service).

- a version answering HTTP 500 on every second request is stopped by the analysis before the
  switch: the serve Service never selects its cluster (watched the whole time), the cluster
  goes, the run fails naming the check and the value it measured;
- ``approve: true`` holds a good version before the switch until ``gitray approve``;
- a version that passes the gate before the switch and degrades after it (``fail_every``
  past the probe's requests) is switched back to the old cluster within the analysis window,
  judged on all the traffic its Serve answered — real requests sent through the serve Service
  by a bounded load generator, counted by Ray Serve's own metrics — the old cluster serving;
- through ``gitray sync``, an approval gate holds the upgrade until ``gitray approve``.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.engine.record import RunState
from testenv.helpers import TestEnv, wait_for
from testenv.load import LoadGenerator
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import real_node_rayservice
from tests.integration.chaos import Replica
from tests.integration.gitops import GitOpsRepo, Gitray, output
from tests.integration.test_apply_rayservice import Cluster
from tests.integration.test_daemon import notes, push

# Gates judge measured success rates: run alone, not beside a lane (scripts/test, phase 3).
pytestmark = pytest.mark.alone

SVC = "fruit"
SERVE_SVC, HEAD_SVC = f"{SVC}-serve-svc", f"{SVC}-head-svc"


def _rayservice(ns: str, version: int, analysis: dict[str, Any] | None,
                fail_every: int = 0) -> str:
    """The hello app answering ``v<version>`` (every ``fail_every``-th request an HTTP 500)
    on a cluster spec of its own, upgraded blue-green, gated by ``analysis``."""
    args: dict[str, Any] = {"greeting": f"v{version}"}
    if fail_every:
        args["fail_every"] = fail_every
    doc = real_node_rayservice(ns, serve=serve_config(("hello", "/hello", "hello:build"),
                                                      args=args),
                               workers=0, name=SVC, revision=version)
    if analysis is not None:
        doc["metadata"]["annotations"] = {"gitray.io/analysis": dump(analysis)}
    return dump(doc)


GATES = {"checks": [{"type": "serve-health"},
                    {"type": "success-rate", "min": 99, "minRequests": 10}],
         "probe": {"path": "/hello", "requests": 20}, "window": "10s"}


class SelectorLog:
    """Every cluster the serve and head Services selected while it ran (polled every 0.5 s);
    ``serve``: each change of the serve Service's cluster, with the wall-clock time it was
    first seen."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.seen = cluster, set[str]()
        self.serve: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for service in (SERVE_SVC, HEAD_SVC):
                with contextlib.suppress(Exception):  # a failed read is read again
                    selected = self.cluster.selector(service)["ray.io/cluster"]
                    self.seen.add(selected)
                    if service == SERVE_SVC and (not self.serve or self.serve[-1][1] != selected):
                        self.serve.append((time.time(), selected))
            self._stop.wait(0.5)

    def __enter__(self) -> SelectorLog:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


# After the switch: Serve health and a success rate >= 99 % of at least 10 requests, over a
# window of 30 s (the probe's 20 requests spread over it, plus whatever else the new cluster
# answered, counted by Ray Serve itself).
WINDOW_S = 30
AFTER = {**GATES, "window": f"{WINDOW_S}s"}
# What the feature promises is a switch-back at the end of the analysis window; the control
# loop around it is allowed this much more: the probe's requests and the Serve metrics reads
# through the API server on a loaded 2-CPU machine, the Serve health read, the two selector
# writes, and this test's 0.5 s polling.
CONTROL_LOOP_S = 60


@pytest.fixture
def setup(testenv: TestEnv, namespace: str, tmp_path: Path
          ) -> tuple[GitOpsRepo, Gitray, Cluster, str]:
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, namespace)
    cluster = Cluster(testenv, namespace)
    repo.commit("v1", {"gitray.yaml": gitray_config("10s", namespace),
                       "svc.yaml": _rayservice(namespace, 1, GATES)})
    first = gitray.run("apply", "--repo", str(repo.path), "--yes", timeout=900)
    assert first.returncode == 0, output(first)
    (blue,) = cluster.rayclusters()
    assert cluster.http(blue, "/hello") == "v1"
    return repo, gitray, cluster, blue


def test_a_version_failing_half_its_requests_is_stopped_before_the_switch(
        setup: tuple[GitOpsRepo, Gitray, Cluster, str], namespace: str) -> None:
    repo, gitray, cluster, blue = setup
    repo.commit("v2 fails every 2nd request",
                {"svc.yaml": _rayservice(namespace, 2, GATES, fail_every=2)})
    with SelectorLog(cluster) as log:
        result = gitray.run("apply", "--repo", str(repo.path), "--yes", timeout=900)
    assert result.returncode == 1, output(result)
    # the value measured: about half of the gate's 20 requests failed (HTTP 500)
    measured = re.search(r"run-analysis failed: success-rate (\d+\.\d) % < 99 % \((\d+) of "
                         r"(\d+) requests\) on \S+ before the switch over 10 s", result.stderr)
    assert measured is not None, output(result)
    assert 40.0 <= float(measured[1]) <= 60.0 and measured[3] == "20", output(result)
    # no request reached v2 through the stable Services: they never selected it
    assert log.seen == {blue}, log.seen
    assert " switch-service " not in result.stdout, output(result)
    wait_for(lambda: list(cluster.rayclusters()) == [blue] or None, timeout=120,
             what="v2's cluster deleted")
    wait_for(lambda: not [s for s in cluster.env.core.list_namespaced_service(namespace).items
                          if s.metadata.name.endswith("-serve-svc")
                          and s.metadata.name not in {SERVE_SVC, f"{blue}-serve-svc"}]
             or None, timeout=60, what="v2's own serve Service deleted")
    assert cluster.http(blue, "/hello") == "v1"
    record = cluster.record(ObjectKey("RayService", namespace, SVC))
    assert record is not None and record.state is RunState.FAILED
    assert f"success-rate {measured[1]} %" in record.reason, record.reason


def test_a_version_degrading_after_the_switch_is_switched_back_real_traffic_counted(
        setup: tuple[GitOpsRepo, Gitray, Cluster, str], namespace: str) -> None:
    repo, gitray, cluster, blue = setup
    # v2 answers its first 24 requests (the before-switch probe sends 20: it passes), then
    # every 25th is an HTTP 500 (about 4 %): it degrades once traffic comes after the switch
    repo.commit("v2 degrades after its first 24 requests",
                {"svc.yaml": _rayservice(namespace, 2, AFTER, fail_every=25)})
    serve_ip = cluster.cluster_ip(SERVE_SVC)
    # real traffic through the serve Service (kube-proxy), bounded: 3/s, at most 10 min
    load = LoadGenerator(f"http://{serve_ip}:8000/hello", rate=3, count=1800, timeout=10)
    with SelectorLog(cluster) as log, load:
        result = gitray.run("apply", "--repo", str(repo.path), "--yes", timeout=900)
        green = next((c for _, c in log.serve if c != blue), "")
        wait_for(lambda: list(cluster.rayclusters()) == [blue] or None, timeout=180,
                 what="v2's cluster deleted")
        time.sleep(5)  # a few more requests, all to the old cluster
        answered = load.stop()
    text = output(result)
    assert result.returncode == 1, text
    # the check and the value it measured, on all the traffic v2's Serve answered: more than
    # the probe's 20 requests, so real traffic was counted
    measured = re.search(r"run-analysis failed: success-rate (\d+\.\d) % < 99 % \((\d+) of "
                         r"(\d+) requests\) at Serve, all traffic on (\S+) after the switch "
                         rf"over {WINDOW_S} s", result.stderr)
    assert measured is not None, text
    assert measured[4] == green and int(measured[3]) > 20, text
    assert float(measured[1]) < 99.0 and int(measured[2]) < int(measured[3]), text
    # switched, then switched back within the analysis window (+ the control loop's margin)
    assert [c for _, c in log.serve] == [blue, green, blue], log.serve
    (_, _), (switched, _), (back, _) = log.serve
    assert back - switched <= WINDOW_S + CONTROL_LOOP_S, (back - switched, log.serve)
    # the real traffic reached v2 through the serve Service and saw its failures ...
    bodies = [body for _, body in answered.timeline]
    assert "v2" in bodies and "!http 500" in bodies, answered.summary()
    # ... and the old cluster kept serving: the last requests answered by v1
    assert bodies[-10:] == ["v1"] * 10, (answered.summary(), answered.timeline[-10:])
    assert cluster.selector(SERVE_SVC)["ray.io/cluster"] == blue
    assert cluster.selector(HEAD_SVC)["ray.io/cluster"] == blue
    assert cluster.http(blue, "/hello") == "v1"
    record = cluster.record(ObjectKey("RayService", namespace, SVC))
    assert record is not None and record.state is RunState.FAILED
    assert f"success-rate {measured[1]} %" in record.reason, record.reason


def test_approve_holds_the_switch_until_gitray_approve(
        setup: tuple[GitOpsRepo, Gitray, Cluster, str], namespace: str) -> None:
    repo, gitray, cluster, blue = setup
    key = f"{namespace}/RayService/{SVC}"
    early = gitray.run("approve", key)
    assert early.returncode != 0 and "no upgrade of" in early.stderr, output(early)
    assert "Traceback" not in early.stderr
    repo.commit("v2, approved by hand", {"svc.yaml": _rayservice(
        namespace, 2, {**GATES, "approve": True})})
    proc = gitray.popen("apply", "--repo", str(repo.path), "--yes")
    lines: list[str] = []
    held = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if " await-approval " in line and line.rstrip().endswith("..."):  # its start
                held.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert held.wait(900), "".join(lines)
        status = gitray.run("status", "--repo", str(repo.path))
        assert "await-approval" in status.stdout, output(status)
        assert "held before the switch to " in status.stdout, output(status)
        assert f"until `gitray approve {key}`" in status.stdout, output(status)
        time.sleep(10)  # held: nothing switches while nobody approves
        assert proc.poll() is None, "".join(lines)
        assert cluster.selector(SERVE_SVC)["ray.io/cluster"] == blue
        green = next(n for n in cluster.rayclusters() if n != blue)
        assert cluster.http(green, "/hello") == "v2"
        approved = gitray.run("approve", key)
        assert approved.returncode == 0, output(approved)
        assert f"approved {key}" in approved.stdout, output(approved)
        assert proc.wait(600) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        reader.join(10)
    text = "".join(lines)
    assert "approved: the switch to" in text, text
    assert cluster.selector(SERVE_SVC)["ray.io/cluster"] == green
    assert cluster.selector(HEAD_SVC)["ray.io/cluster"] == green


def test_gitray_sync_holds_an_approval_gate_until_gitray_approve(
        testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo],
        sync_proc: Replica) -> None:
    """The daemon runs the upgrade to the approval gate and holds it there (shown by `gitray
    status`, the commit pending) poll after poll; nothing switches until `gitray approve`;
    then the switch goes ahead and the commit ends in sync."""
    bare, work = remote
    cluster, gitray = Cluster(testenv, namespace), Gitray(testenv.kubeconfig, namespace)
    key = f"{namespace}/RayService/{SVC}"
    config = gitray_config("10s", namespace, status={"provider": "git-notes"})
    first = push(work, "v1", {"gitray.yaml": config, "svc.yaml": _rayservice(namespace, 1, GATES)})
    wait_for(lambda: notes(bare, first).get("gitray", {}).get("state") == "success" or None,
             timeout=900, what="v1 in sync")
    (blue,) = cluster.rayclusters()
    second = push(work, "v2, approved by hand", {"svc.yaml": _rayservice(
        namespace, 2, {**GATES, "approve": True})})
    held = f"until `gitray approve {key}`"

    def status_text() -> str:
        return gitray.run("status", "--repo", str(work.path)).stdout

    def held_text() -> str | None:
        text = status_text()
        return text if held in text else None

    with SelectorLog(cluster) as log:
        text = wait_for(held_text, timeout=900, interval=3,
                        what="the upgrade held at await-approval")
        assert "await-approval" in text and "held before the switch to " in text, text
        seen = sync_proc.metric("gitray_polls_total") or 0.0
        wait_for(lambda: (sync_proc.metric("gitray_polls_total") or 0.0) >= seen + 5 or None,
                 timeout=60, what="five more polls")
        # held, poll after poll: the commit pending, the Services on the old cluster
        assert held in status_text()
        assert notes(bare, second).get("gitray", {}).get("state") != "success"
        assert notes(bare, second).get(f"gitray/{key}", {}).get("state") == "pending"
        assert log.seen == {blue}, log.seen
        green = next(n for n in cluster.rayclusters() if n != blue)
        assert cluster.http(green, "/hello") == "v2"
        approved = gitray.run("approve", key)
        assert approved.returncode == 0, output(approved)
        assert f"approved {key}" in approved.stdout, output(approved)
        wait_for(lambda: notes(bare, second).get("gitray", {}).get("state") == "success"
                 or None, timeout=600, what="v2 in sync")
    assert cluster.selector(SERVE_SVC)["ray.io/cluster"] == green
    assert cluster.selector(HEAD_SVC)["ray.io/cluster"] == green
    assert log.seen == {blue, green}, log.seen
    assert cluster.http(green, "/hello") == "v2"
