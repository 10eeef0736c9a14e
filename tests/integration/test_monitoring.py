"""Shipped monitoring against the real thing (issue 30): a real Prometheus (Debian's
``prometheus`` binary, started here on 127.0.0.1 with a temporary config and data directory,
``deploy/monitoring/rules.yaml`` loaded) scrapes a real ``gitray sync`` during a real
incremental RayService upgrade through the real Gateway, under load. Afterwards every query of
the Grafana dashboard and every alert expression evaluates without error in that Prometheus,
every dashboard query returns series over the upgrade, and so does every metric an alert
expression reads. Meanwhile a notification receiver on 127.0.0.1 gets the upgrade's events, in
order, and the status page, in a real headless browser (Debian's ``chromium``) at 25 %, 50 %
and after convergence, shows the traffic share changing (screenshots: $GITRAY_TEST_ARTIFACTS/
status-page, else the test's tmp dir). (The health watch after convergence, with the
GitrayHealthDegraded alert, is tests/integration/test_health_notices.py: no Gateway.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from testenv.gatewayenv import GATEWAY_CLASS
from testenv.helpers import TestEnv, get_text, wait_for
from testenv.load import LoadGenerator
from testenv.manifests import dump, gitray_config
from testenv.procs import free_port
from testenv.rayservices import incremental_rayservice
from tests.integration.chaos import Replica, isolated, start_replica
from tests.integration.gitops import GitOpsRepo, Gitray, output

pytestmark = pytest.mark.gateway

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
SVC = "mon"
METRIC = re.compile(r"\bgitray_[a-z_]+\b")


class Prometheus:
    """A real Prometheus scraping ``target`` every ``scrape_s`` seconds (each scrape given as
    long), evaluating ``rules`` every second."""

    def __init__(self, workdir: Path, target: str, rules: Path, scrape_s: int = 1) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is missing: Debian's prometheus package (scripts/testenv "
                        "build installs it)")
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": f"{scrape_s}s", "scrape_timeout": f"{scrape_s}s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "gitray",
                                "static_configs": [{"targets": [target]}]}]}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        with self.log.open("w") as sink:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self._ready, timeout=60, what="Prometheus ready")

    def _ready(self) -> bool | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200 or None
        except (OSError, urllib.error.URLError):
            return None

    def api(self, path: str, **params: str) -> dict[str, Any]:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as e:  # a bad query is a 400 with the error in JSON
            return dict(json.loads(e.read()))

    def query_range(self, expr: str, start: float, end: float) -> dict[str, Any]:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step="2s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def chromium(workdir: Path, *args: str) -> str:
    """Headless Chromium (Debian's package) on a page of 127.0.0.1: its stdout. Nothing but
    the page is fetched (no background networking, no component updates)."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("chromium is missing: Debian's chromium package (scripts/testenv build "
                    "installs it)")
    proc = subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--hide-scrollbars", "--window-size=1000,1300",
         f"--user-data-dir={workdir / 'chromium-profile'}", *args],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def screenshots_dir(tmp_path: Path) -> Path:
    """Where the status page's screenshots go: $GITRAY_TEST_ARTIFACTS/status-page, else the
    test's tmp dir (printed)."""
    root = os.environ.get("GITRAY_TEST_ARTIFACTS")
    out = Path(root) / "status-page" if root else tmp_path / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    return out


class Receiver:
    """A notification receiver on 127.0.0.1: the JSON bodies it got, in order."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        return [str(b["event"]) for b in self.got]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def dashboard_exprs() -> list[str]:
    panels = json.loads((MONITORING / "grafana-dashboard.json").read_text())["panels"]
    return [t["expr"] for p in panels for t in p["targets"]]


def alert_exprs() -> dict[str, str]:
    groups = yaml.safe_load((MONITORING / "rules.yaml").read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"]}


def _push(repo: GitOpsRepo, message: str, files: dict[str, str | None]) -> str:
    sha = repo.commit(message, files)
    repo.git("push", "-q", "origin", "main")
    return sha


def _answer(url: str) -> str | None:
    try:
        return get_text(url)
    except Exception:
        return None


def test_prometheus_scrapes_an_upgrade_and_every_query_and_alert_evaluates(
        testenv: TestEnv, gateway: dict[str, str], namespace: str, tmp_path: Path,
        remote: tuple[Path, GitOpsRepo], receiver: Receiver) -> None:
    ns = namespace
    bare, repo = remote
    url = f"{gateway['web']}/hello"
    gitray = Gitray(testenv.kubeconfig, ns)
    config = isolated(gitray_config("10s", ns, notifications={"receivers": [
        {"name": "test", "url": receiver.url}]}), ns)

    def rs(version: int, fail_every: int = 0,
           pauses: list[dict[str, Any]] | None = None) -> str:
        return dump(incremental_rayservice(ns, version, name=SVC, gateway_class=GATEWAY_CLASS,
                                           interval=10, metrics=gateway["metrics"],
                                           fail_every=fail_every, pauses=pauses))

    first = _push(repo, "v1", {"gitray.yaml": config, "svc.yaml": rs(1)})
    sync: Replica = start_replica(testenv.kubeconfig, ns, bare, tmp_path, "daemon")
    prometheus = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{sync.port}",
                            MONITORING / "rules.yaml")
    try:
        wait_for(lambda: sync.metric("gitray_last_synced_revision_info",
                                     f'revision="{first}"') == 1 or None, timeout=600,
                 what="v1 synced")
        assert wait_for(lambda: _answer(url), 120, what="v1 through the Gateway") == "v1"
        started = time.time()
        page = f"http://127.0.0.1:{sync.port}/status"
        shots, doms = screenshots_dir(tmp_path), []
        share = f'kind="RayService",name="{SVC}",namespace="{ns}"'
        with LoadGenerator(url, rate=10, count=10 * 900, timeout=10) as load:
            # paused at 25 and 50 % until promoted: the browser's moments are held as long as
            # it takes (two Chromium runs outlasted the 50 % step, about 27 s, in a clean-clone
            # run of e828276, the machine fully busy, and the test waited for it in vain)
            second = _push(repo, "v2", {"svc.yaml": rs(2, pauses=[{"atPercent": 25},
                                                                 {"atPercent": 50}])})
            # the status page in a real browser at three moments of the upgrade
            for n, percent in enumerate((25, 50)):
                wait_for(lambda p=percent: sync.metric("gitray_workload_traffic_percent",
                                                       share) == p or None, timeout=600,
                         what=f"traffic at {percent} %")
                chromium(tmp_path, f"--screenshot={shots / f'{n + 1}-at-{percent}.png'}", page)
                doms.append(chromium(tmp_path, "--dump-dom", page))
                # (the pause running now, or the next one ahead while the step's analysis runs)
                promoted = gitray.run("promote", f"{ns}/{SVC}")
                assert promoted.returncode == 0, output(promoted)
            wait_for(lambda: sync.metric("gitray_last_synced_revision_info",
                                         f'revision="{second}"') == 1 or None, timeout=900,
                     what="v2 synced")
            chromium(tmp_path, f"--screenshot={shots / '3-converged.png'}", page)
            doms.append(chromium(tmp_path, "--dump-dom", page))
            load.stop()
        print(f"status page screenshots: {sorted(p.name for p in shots.iterdir())} in {shots}")
        row = re.compile(rf"{ns}/RayService/{SVC}</a></td><td>(.*?)</td><td>.*?</td>"
                         r"<td>(.*?)</td>")
        moments = [row.search(dom).groups() for dom in doms]  # type: ignore[union-attr]
        assert moments[0][1] == "25 %" and moments[1][1] == "50 %", moments
        assert "progressing" in moments[0][0] and "in-sync" in moments[2][0], moments
        assert doms[2].count("<circle") >= 3, "the analyses on the chart"  # at 25, 50, 75 %
        assert all((shots / name).stat().st_size > 10_000
                   for name in ("1-at-25.png", "2-at-50.png", "3-converged.png"))
        # the page links to the plan gitray made of v2, which this replica serves as text
        assert f'href="/status/plan/{second}"' in doms[2]
        plan_text = get_text(f"http://127.0.0.1:{sync.port}/status/plan/{second}")
        assert f"RayService {ns}/{SVC}" in plan_text and "shift" in plan_text, plan_text
        time.sleep(5)  # a few more scrapes and rule evaluations after convergence
        ended = time.time()
        print(load.result().summary())

        problems: list[str] = []
        for expr in dashboard_exprs():
            answer = prometheus.query_range(expr, started, ended)
            if answer.get("status") != "success":
                problems.append(f"dashboard {expr!r}: {answer.get('error')}")
            elif not answer["data"]["result"]:
                problems.append(f"dashboard {expr!r}: no series")
        for name, expr in alert_exprs().items():
            answer = prometheus.query_range(expr, started, ended)
            if answer.get("status") != "success":
                problems.append(f"alert {name} {expr!r}: {answer.get('error')}")
            for metric in sorted(set(METRIC.findall(expr))):
                series = prometheus.query_range(metric, started, ended)
                if series.get("status") != "success" or not series["data"]["result"]:
                    problems.append(f"alert {name}: {metric} has no series")
        rules = prometheus.api("rules")
        health = [(r["name"], r["health"], r.get("lastError", "")) for g in
                  rules["data"]["groups"] for r in g["rules"]]
        problems += [f"rule {n}: {h} {e}" for n, h, e in health if h != "ok"]
        assert len(health) == len(alert_exprs())
        assert not problems, "\n".join(problems)

        # the traffic share went up step by step on the new cluster, as Prometheus saw it
        traffic = prometheus.query_range("gitray_workload_traffic_percent", started, ended)
        seen = sorted({int(float(v)) for s in traffic["data"]["result"] for _, v in s["values"]})
        assert set(seen) >= {25, 50, 75}, seen

        # the receiver got the upgrade's events, in order
        wait_for(lambda: any(b["revision"] == second and b["event"] == "converged"
                             for b in receiver.got) or None, timeout=30,
                 what="the converged notification of v2")
        upgrade = [b for b in receiver.got if b["revision"] == second]
        events = [str(b["event"]) for b in upgrade]
        assert events[0] == "upgrade-started" and events[-1] == "converged", events
        shares = [b["fields"]["percent"] for b in upgrade if b["event"] == "traffic-step"]
        assert shares[:3] == ["25", "50", "75"] and shares[-1] == "100", shares
        assert "extra capacity" in upgrade[0]["fields"], upgrade[0]

        # v3 fails every request: its analysis fails twice, it is rolled back, the run fails;
        # GitrayRunFailed fires in Prometheus, and the receiver hears it all in order
        with LoadGenerator(url, rate=10, count=10 * 900, timeout=10) as load:
            third = _push(repo, "v3 fails", {"svc.yaml": rs(3, fail_every=1)})
            wait_for(lambda: sync.metric("gitray_workload_state",
                                         f'kind="RayService",name="{SVC}",namespace="{ns}",'
                                         'state="failed"') == 1 or None, timeout=900,
                     what="v3 failed")
            load.stop()

        def firing() -> list[dict[str, Any]] | None:
            alerts = prometheus.api("alerts")["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "GitrayRunFailed"
                    and a["state"] == "firing"] or None
        [alert] = wait_for(firing, timeout=60, what="GitrayRunFailed firing")
        assert (alert["labels"]["namespace"], alert["labels"]["name"]) == (ns, SVC)
        assert alert["annotations"]["summary"] == f"RayService {ns}/{SVC}: run failed"
        wait_for(lambda: any(b["revision"] == third and b["event"] == "rolled-back"
                             for b in receiver.got) or None, timeout=30,
                 what="the rolled-back notification of v3")
        failed = [str(b["event"]) for b in receiver.got if b["revision"] == third]
        assert failed[0] == "upgrade-started" and failed[-2:] == ["run-failed", "rolled-back"], \
            failed
        assert failed.count("analysis-failed") == 2, failed
        measured = next(b for b in receiver.got if b["revision"] == third
                        and b["event"] == "analysis-failed")
        assert "success-rate" in measured["fields"]["measured"], measured
        wait_for(lambda: _answer(url) == "v2" or None, 60, what="v2 answering again")
    finally:
        prometheus.stop()
        sync.terminate()
    print(f"upgrade scraped for {ended - started:.0f} s")
