"""The status page: rendered from what the daemon's signals recorded (pure), everything from
Git or the cluster escaped, the traffic share as an inline SVG chart; served on /status by the
daemon's real HTTP endpoint on 127.0.0.1."""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest

from gitray.core.model import ObjectKey
from gitray.daemon.http import HttpEndpoints, Probes
from gitray.daemon.metrics import Metrics
from gitray.daemon.signals import PLANS, Signals
from gitray.daemon.state import DaemonState
from gitray.daemon.statuspage import commit_url
from gitray.engine.executor import Outcome, StepEvent, WorkloadOutcome
from gitray.plans.plan import Action, Plan, Step, WorkloadPlan
from gitray.plans.steptypes import StepType
from tests.clock import ManualClock
from tests.unit.daemon.test_workload_metrics import Recording

SHA = "0123456789abcdef0123456789abcdef01234567"
STATE = DaemonState(fetched=SHA, synced=SHA)
HOSTILE = ObjectKey("RayService", "ml", "<img src=x onerror=alert(1)>")


def upgrade(signals: Signals, clock: ManualClock, key: ObjectKey) -> None:
    report = signals.reporter(SHA, lambda _e: None)
    create = Step("c", StepType.CREATE_CLUSTER, "new<b>", {"manifest": {"spec": {}}})
    report(StepEvent(key, 1, 6, create, "start"))
    report(StepEvent(key, 1, 6, create, "done", "created <script>x</script>"))
    for index, percent in ((2, 25), (4, 50)):
        clock.now += 10
        shift = Step("t", StepType.SHIFT_TRAFFIC, "route",
                     {"percent": percent, "cluster": "new", "from": "old"})
        report(StepEvent(key, index, 6, shift, "start"))
        report(StepEvent(key, index, 6, shift, "done"))
        clock.now += 10
        analysis = Step("a", StepType.RUN_ANALYSIS, "new", {"percent": percent})
        report(StepEvent(key, index + 1, 6, analysis, "start"))
        report(StepEvent(key, index + 1, 6, analysis, "done", "analysis passed"))


def test_the_page_shows_state_steps_and_the_traffic_chart_escaped() -> None:
    m, clock = Metrics(), ManualClock()
    signals = Signals(m, repo="https://git.example/team/repo.git", notifier=Recording(),
                      clock=clock)
    upgrade(signals, clock, HOSTILE)
    html = signals.page(STATE, True)
    assert "<img" not in html and "<script>x" not in html and "new<b>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "created &lt;script&gt;x&lt;/script&gt;" in html
    assert "progressing (step 5/6)" in html and "50 %" in html
    assert html.count("<circle") == 2 and "<polyline" in html  # two analyses on the chart
    assert 'href="https://git.example/team/repo/commit/' + SHA + '"' in html
    signals.outcomes(SHA, "commit", [WorkloadOutcome(HOSTILE, Outcome.FAILED,
                                                     "rolled back: <all> traffic", 5, 6)])
    signals.repo = "file:///srv/repo.git"
    html = signals.page(STATE, False)
    assert "run failed: rolled back: &lt;all&gt; traffic" in html
    assert "standby" in html and "/commit/" not in html


def test_commit_links_never_carry_credentials() -> None:
    assert commit_url("https://user:s3cr3t@git.example:8443/a/b.git", "abc") == \
        "https://git.example:8443/a/b/commit/abc"
    assert commit_url("git@github.com:a/b.git", "abc") is None
    assert commit_url("file:///x", "abc") is None


def a_plan(key: ObjectKey) -> Plan:
    step = Step("c", StepType.CREATE_CLUSTER, "fruit-1a2b3", {"manifest": {"spec": {}}})
    return Plan(SHA, "live", workloads=(WorkloadPlan(key, Action.CREATE, 0, (step,)),))


def test_the_plan_of_each_commit_is_kept_linked_and_bounded() -> None:
    m, clock = Metrics(), ManualClock()
    signals = Signals(m, notifier=Recording(), clock=clock)
    key = ObjectKey("RayService", "ml", "fruit")
    assert 'href="/status/plan/' not in signals.page(STATE, True)
    signals.planned(SHA, a_plan(key))
    signals.planned(SHA, Plan(SHA, "live"))  # a later pass of the same commit: the first stays
    text = signals.plan(SHA)
    assert text is not None and "+ RayService ml/fruit will be created" in text, text
    assert "create RayCluster fruit-1a2b3" in text
    html = signals.page(STATE, True)
    assert html.count(f'<a href="/status/plan/{SHA}"><small>plan</small></a>') == 2  # synced,
    # newest: both this commit
    for n in range(PLANS):  # the last PLANS commits' plans are kept
        signals.planned(f"{n:040x}", Plan(f"{n:040x}", "live"))
    assert signals.plan(SHA) is None and signals.plan(f"{PLANS - 1:040x}") is not None


def test_served_on_status_and_the_plans_it_links_to() -> None:
    m, clock = Metrics(), ManualClock()
    signals = Signals(m, notifier=Recording(), clock=clock)
    upgrade(signals, clock, ObjectKey("RayService", "ml", "fruit"))
    signals.planned(SHA, a_plan(ObjectKey("RayService", "ml", "fruit")))
    http = HttpEndpoints(("127.0.0.1", 0), Probes(lambda: True, lambda: True, lambda: True,
                                                  dict), m, lambda: None, None,
                         page=lambda: signals.page(STATE, True), plan=signals.plan)
    http.start()
    base = f"http://127.0.0.1:{http.port}"
    try:
        with urllib.request.urlopen(f"{base}/status", timeout=5) as r:
            assert r.headers["Content-Type"] == "text/html; charset=utf-8"
            body = r.read().decode()
        with urllib.request.urlopen(f"{base}/status/plan/{SHA}", timeout=5) as r:
            assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert r.headers["X-Content-Type-Options"] == "nosniff"
            plan = r.read().decode()
        missing = []
        for path in (f"/status/plan/{'f' * 40}", "/status/plan/../../etc/passwd",
                     "/status/plan/<b>"):
            try:
                urllib.request.urlopen(base + path, timeout=5)
            except urllib.error.HTTPError as e:
                missing.append(e.code)
    finally:
        http.stop()
    assert re.search(r"ml/RayService/fruit.*progressing", body, re.S)
    assert "will be created" in plan
    assert missing == [404, 404, 404]


def test_a_client_leaving_mid_answer_prints_no_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found at 10,000 workloads (bench 12): a /metrics reader whose timeout ran out left a
    BrokenPipeError traceback in the log. A client that goes away is not an error."""
    big = "x" * (32 * 1024 * 1024)  # (more than the socket buffers hold)
    served = threading.Event()

    def plan(sha: str) -> str:
        served.set()
        return big

    http = HttpEndpoints(("127.0.0.1", 0), Probes(lambda: True, lambda: True, lambda: True,
                                                  dict), Metrics(), lambda: None, None, plan=plan)
    http.start()
    threads = threading.active_count()  # (with the server's)
    try:
        with socket.create_connection(("127.0.0.1", http.port), timeout=5) as s:
            s.sendall(f"GET /status/plan/{SHA} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert s.recv(4096).startswith(b"HTTP/1.0 200")  # the answer has begun
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert served.wait(5)  # (closed with a reset: the rest of the write fails)
        deadline = time.monotonic() + 10
        while threading.active_count() > threads and time.monotonic() < deadline:
            time.sleep(0.05)  # (the answer's thread has ended: its error, if any, is out)
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/healthz", timeout=5) as r:
            assert r.status == 200  # still serving
    finally:
        http.stop()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Broken pipe" not in err, err
