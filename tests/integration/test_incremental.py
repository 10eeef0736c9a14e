"""The incremental upgrade (issue 16) with real requests through a real Gateway: Traefik
v3.6.12 with its Kubernetes Gateway provider (``scripts/testenv up --gateway``), real Ray pods
on the real node, the real gitray CLI with its default flags (``--dashboard proxy``).

A bounded load generator sends requests to the Gateway the whole time; an observer records the
HTTPRoute's weights as the API server holds them. Each version of the Serve app answers its
own greeting (``hello:build``), so every answer says which cluster served it, and the split
seen by the clients is compared with the weights gitray wrote, step by step.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testenv.gatewayenv import GATEWAY_CLASS
from testenv.helpers import TestEnv, get_text, wait_for
from testenv.load import LoadGenerator, LoadResult
from testenv.manifests import dump, gitray_config, serve_config
from testenv.rayservices import incremental_rayservice, real_node_rayservice
from testenv.routes import SETTLE_S, Period, RouteLog, RouteObserver, describe, periods
from tests.integration.chaos import isolated, start_replica
from tests.integration.gitops import GitOpsRepo, Gitray, output
from tests.integration.harness import ray_clusters, selected_cluster
from tests.integration.test_apply_rayservice import Cluster

pytestmark = pytest.mark.gateway

SVC = "fruit"
ROUTE = f"{SVC}-httproute"
INTERVAL_S = 15
TOLERANCE = 10.0  # percentage points


def _rayservice(ns: str, version: int, **kw: Any) -> dict[str, Any]:
    return incremental_rayservice(ns, version, name=SVC, gateway_class=GATEWAY_CLASS,
                                  interval=INTERVAL_S, **kw)


def _apply_under_load(testenv: TestEnv, ns: str, repo: GitOpsRepo, gitray: Gitray,
                      url: str) -> tuple[subprocess.CompletedProcess[str], RouteLog,
                                         LoadResult, list[Period]]:
    """``gitray apply --yes`` of the repository's HEAD with 20 requests/s through the
    Gateway and the route's weights recorded, until a few seconds after it ended."""
    with RouteObserver(testenv.custom, ns, ROUTE) as log, \
            LoadGenerator(url, rate=20, count=20 * 900, timeout=10) as load:
        result = gitray.run("apply", "--repo", str(repo.path), "--yes", timeout=900)
        time.sleep(SETTLE_S + 6)
        load.stop()
    r = load.result()
    ps = periods(log, r)
    print(result.stdout[-6000:], result.stderr[-3000:], r.summary(), describe(ps, "v2"),
          sep="\n")
    return result, log, r, ps


@pytest.fixture
def setup(testenv: TestEnv, gateway: dict[str, str], namespace: str,
          tmp_path: Path) -> Iterator[tuple[GitOpsRepo, Gitray, str]]:
    ns = namespace
    repo, gitray = GitOpsRepo(tmp_path / "repo"), Gitray(testenv.kubeconfig, ns)
    repo.commit("v1", {"gitray.yaml": isolated(gitray_config("10s", ns), ns),
                       "svc.yaml": dump(_rayservice(ns, 1, metrics=gateway["metrics"]))})
    first = gitray.run("apply", "--repo", str(repo.path), "--yes")
    assert first.returncode == 0, output(first)
    url = f"{gateway['web']}/hello"
    assert wait_for(lambda: _answer(url), 120, what="v1 through the Gateway") == "v1"
    yield repo, gitray, url


def _answer(url: str) -> str | None:
    try:
        return get_text(url)
    except Exception:
        return None


class _Gate(http.server.BaseHTTPRequestHandler):
    """A webhook gate: records each POSTed JSON body, answers 200."""

    calls: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        type(self).calls.append(json.loads(self.rfile.read(length) or b"{}"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def gate() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook gate on 127.0.0.1: its URL and the bodies it received."""
    calls: list[dict[str, Any]] = []
    handler = type("Gate", (_Gate,), {"calls": calls})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/gate", calls
    server.shutdown()


def test_a_good_version_takes_the_traffic_step_by_step_without_a_failed_request(
        testenv: TestEnv, gateway: dict[str, str], namespace: str,
        setup: tuple[GitOpsRepo, Gitray, str],
        gate: tuple[str, list[dict[str, Any]]]) -> None:
    """Every check kind runs: Serve health, success rate and p95 latency from Traefik's
    counters and histogram, and a webhook gate, at each of the four steps."""
    ns = namespace
    repo, gitray, url = setup
    (old,) = ray_clusters(testenv, ns)
    gate_url, calls = gate
    repo.commit("v2", {"svc.yaml": dump(_rayservice(ns, 2, metrics=gateway["metrics"], checks=[
        {"type": "latency", "percentile": 95, "maxMs": 1000, "minRequests": 20},
        {"name": "smoke", "type": "webhook", "url": gate_url}]))})
    result, log, r, ps = _apply_under_load(testenv, ns, repo, gitray, url)
    assert result.returncode == 0, output(result)
    analyses = [line for line in result.stdout.splitlines() if "run-analysis" in line
                and ": done (" in line]
    assert len(analyses) == 4, output(result)
    for line in analyses:
        assert "success-rate 100.0 % >= 99 %" in line and "latency p95 " in line \
            and "smoke" in line, line
    assert len(calls) == 4, calls
    new = next(c for c, w in log.changes[-1][1].items() if w == 100)
    assert new != old and ray_clusters(testenv, ns) in ([new], sorted([old, new]))
    assert r.failed == 0, r.summary() + "\n" + describe(ps, "v2")
    shares = [(p.weights.get(new, 0), p.share("v2")) for p in ps if p.sent >= 50]
    assert [w for w, _ in shares if 0 < w < 100] == [25, 50, 75], describe(ps, "v2")
    for weight, seen in shares:
        assert abs(seen - weight) <= TOLERANCE, describe(ps, "v2")
    assert _answer(url) == "v2"


def test_a_version_failing_requests_is_rolled_back_by_the_analysis(
        testenv: TestEnv, gateway: dict[str, str], namespace: str,
        setup: tuple[GitOpsRepo, Gitray, str]) -> None:
    """v2 answers every second request with HTTP 500. Its first analysis (at 25 %) fails and
    holds the weight, the second reaches failureLimit 2: all traffic back to v1, its Serve
    capacity restored, v2's cluster deleted, and gitray apply fails naming the check and
    the value it measured. Clients saw 500s only while v2 had its 25 %."""
    ns = namespace
    repo, gitray, url = setup
    (old,) = ray_clusters(testenv, ns)
    repo.commit("v2 fails every 2nd request", {"svc.yaml": dump(_rayservice(
        ns, 2, metrics=gateway["metrics"], fail_every=2))})
    result, log, r, ps = _apply_under_load(testenv, ns, repo, gitray, url)
    assert result.returncode == 1, output(result)
    said = result.stdout + result.stderr
    assert "run-analysis failed: success-rate" in said, output(result)
    assert "failed analyses 2/2 (failureLimit)" in said, output(result)
    assert f"rolled back: all traffic to {old}" in said, output(result)
    new = next(c for c in log.changes[1][1] if c != old)
    # the weights went 100 % v1 -> 25 % v2 (held for a second analysis) -> 100 % v1
    assert [w for _, w in log.changes] == [{old: 100}, {old: 75, new: 25}, {old: 100}], log
    wait_for(lambda: ray_clusters(testenv, ns) == [old] or None, 120, what=f"{new} deleted")
    # every failed request is a 500 from v2 while it had traffic; none after the rollback
    assert set(r.failures) == {"http 500"}, r.summary()
    during, after = ps[-2], ps[-1]
    assert during.weights == {old: 75, new: 25} and after.weights == {old: 100}
    assert during.answers.get("!http 500", 0) > 0, describe(ps, "v2")
    assert after.answers == {"v1": after.sent} and after.sent >= 50, describe(ps, "v2")
    assert abs(100.0 * r.failed / during.sent - 12.5) <= TOLERANCE / 2, describe(ps, "v2")
    assert _answer(url) == "v1"


def _push(repo: GitOpsRepo, message: str, files: dict[str, str | None]) -> str:
    sha = repo.commit(message, files)
    repo.git("push", "-q", "origin", "main")
    return sha


def test_pause_promote_and_abort_through_the_daemon(
        testenv: TestEnv, gateway: dict[str, str], namespace: str, tmp_path: Path) -> None:
    """gitray sync runs the upgrade. v2 pauses at 50 % until promoted: the weight holds, and
    meanwhile another RayService of the repository (``other``) is upgraded blue-green to its
    end (issue 26: a paused upgrade parks only its own workload); `gitray promote` lets v2
    finish. v3 pauses at 25 %: `gitray abort` rolls it back to v2. Requests through the
    Gateway and through ``other``'s serve Service never fail."""
    ns = namespace
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    repo = GitOpsRepo(tmp_path / "work")
    repo.git("remote", "add", "origin", str(bare))
    gitray = Gitray(testenv.kubeconfig, ns)
    cluster = Cluster(testenv, ns)
    url = f"{gateway['web']}/hello"

    def rs(version: int, at: int) -> str:
        return dump(_rayservice(ns, version, metrics=gateway["metrics"],
                                pauses=[{"atPercent": at}]))

    def clusters_of(service: str) -> list[str]:
        return [c for c in ray_clusters(testenv, ns) if c.startswith(f"{service}-")]

    def fruit() -> list[str]:
        return clusters_of(SVC)

    def others() -> list[str]:
        return clusters_of(OTHER)

    _push(repo, "v1", {"gitray.yaml": isolated(gitray_config("10s", ns), ns),
                       "svc.yaml": rs(1, 50), "other.yaml": _other(ns, 1)})
    sync = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "daemon")
    try:
        assert wait_for(lambda: _answer(url), 300, what="v1 through the Gateway") == "v1"
        (v1,) = fruit()
        (o1,) = wait_for(lambda: (others() if selected_cluster(testenv, ns, OTHER_SERVE)
                                  else None), 300, what=f"{OTHER}'s serve Service")
        other_url = f"http://{cluster.cluster_ip(OTHER_SERVE)}:8000/hello"
        assert wait_for(lambda: _answer(other_url), 120,
                        what=f"{OTHER} v1 through its serve Service") == f"{OTHER} v1"
        with RouteObserver(testenv.custom, ns, ROUTE) as log, \
                LoadGenerator(url, rate=10, count=10 * 1200, timeout=10) as load, \
                LoadGenerator(other_url, rate=5, count=5 * 1200, timeout=10) as other_load:
            _push(repo, "v2, paused at 50 %", {"svc.yaml": rs(2, 50)})
            wait_for(lambda: _paused_at(log, 50), 600, what="the pause at 50 %")
            paused_since = log.changes[-1][0]
            # another workload's blue-green upgrade, pushed while v2 is paused, goes to its
            # end: new cluster serving, the old one deleted after its deletionDelay
            _push(repo, f"{OTHER} v2 (blue-green)", {"other.yaml": _other(ns, 2)})
            wait_for(lambda: (len(others()) == 1 and others() != [o1]
                              and _answer(other_url) == f"{OTHER} v2") or None, 600,
                     what=f"{OTHER}'s blue-green upgrade to v2 done while v2 is paused")
            # ... and v2 stayed paused at 50 % all along
            assert log.changes[-1][0] == paused_since and log.changes[-1][1][v1] == 50, log
            promoted = gitray.run("promote", f"{ns}/{SVC}")
            assert promoted.returncode == 0, output(promoted)
            assert "the pause at 50 %" in promoted.stdout, output(promoted)
            wait_for(lambda: len(fruit()) == 1 != (v1 in fruit()) or None, 600,
                     what="v2 promoted and v1 deleted")
            (v2,) = fruit()
            assert _answer(url) == "v2"
            # with v1 deleted, the route no longer names it
            wait_for(lambda: log.last() == {v2: 100} or None, 60, what="the route on v2 alone")

            _push(repo, "v3, paused at 25 %", {"svc.yaml": rs(3, 25)})
            wait_for(lambda: _paused_at(log, 25), 600, what="the pause at 25 %")
            aborted = gitray.run("abort", f"{ns}/{SVC}")
            assert aborted.returncode == 0, output(aborted)
            wait_for(lambda: log.last() == {v2: 100} or None, 120,
                     what="all traffic back to v2")
            wait_for(lambda: fruit() == [v2] or None, 120, what="v3 deleted")
            time.sleep(SETTLE_S + 6)
            load.stop()
            other_load.stop()
        r, o = load.result(), other_load.result()
        ps = periods(log, r)
        print(promoted.stdout, aborted.stdout, r.summary(), describe(ps, "v2"),
              f"{OTHER}: {o.summary()}", sep="\n")
        assert r.failed == 0, r.summary() + "\n" + describe(ps, "v2")
        assert o.sent > 0 and o.failed == 0, o.summary()
        assert set(o.bodies) == {f"{OTHER} v1", f"{OTHER} v2"}, o.summary()
        assert _answer(url) == "v2"
        # the abort is a failed run at v3: not retried at that revision
        time.sleep(5)
        assert fruit() == [v2]
    finally:
        sync.terminate()
    print(sync.log.read_text()[-4000:])


OTHER = "other"
OTHER_SERVE = f"{OTHER}-serve-svc"


def _other(ns: str, version: int) -> str:
    """Another team's RayService beside ``fruit``: upgraded blue-green (KubeRay's default),
    the hello app answering ``other v<version>`` on a cluster spec of its own."""
    return dump(real_node_rayservice(
        ns, serve=serve_config(("hello", "/hello", "hello:build"),
                               args={"greeting": f"{OTHER} v{version}"}),
        workers=0, name=OTHER, revision=version))


def _paused_at(log: RouteLog, percent: int) -> bool | None:
    """Whether the new cluster's weight is ``percent`` and has held for 2 s longer than an
    analysis interval (the pause follows the step's analysis)."""
    if not log.changes:
        return None
    at, weights = log.changes[-1]
    new = sorted(weights.values())
    return (len(new) == 2 and percent in new and time.time() - at > INTERVAL_S + 2) or None
