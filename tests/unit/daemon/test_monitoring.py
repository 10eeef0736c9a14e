"""deploy/monitoring: the alert rules pass ``promtool check rules`` and fire as meant on series
shaped like gitray's (``promtool test rules``, Debian's prometheus package, installed by
``scripts/testenv build``); the PrometheusRule holds the same groups; every metric the rules
and the dashboard query is one the daemon serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from gitray.core.model import ObjectKey
from gitray.daemon.metrics import Metrics
from testenv.components import missing

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "rules.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
METRIC = re.compile(r"\bgitray_[a-z_]+\b")
SUFFIXES = ("_bucket", "_count", "_sum")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = ("promtool is missing: Debian's prometheus package (scripts/testenv build "
                   "installs it: apt-get install prometheus)")
        missing(message)
    return found


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p["targets"]]


def test_promtool_checks_the_rules() -> None:
    proc = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 6 rules found" in proc.stdout


def test_promtool_checks_the_dashboard_queries(tmp_path: Path) -> None:
    """Each dashboard query as a recording rule: promtool parses its PromQL."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"gitray_dashboard:q{i}", "expr": expr}
        for i, expr in enumerate(dashboard_exprs())]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    proc = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_alerts_fire_on_gitray_shaped_series(tmp_path: Path) -> None:
    tool = promtool()
    test = (Path(__file__).parent / "monitoring_rules_test.yaml").read_text()
    shutil.copyfile(RULES, tmp_path / "rules.yaml")
    (tmp_path / "test.yaml").write_text(test.replace("RULES", "rules.yaml", 1))
    proc = subprocess.run([tool, "test", "rules", "test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_prometheusrule_holds_the_same_groups() -> None:
    docs = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert docs["kind"] == "PrometheusRule"
    assert docs["spec"] == yaml.safe_load(RULES.read_text())
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    service = yaml.safe_load((ROOT / "deploy" / "base" / "service.yaml").read_text())
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in [p["name"] for p in
                                                       service["spec"]["ports"]]


def test_every_metric_queried_is_served() -> None:
    m = Metrics()
    key = ObjectKey("RayService", "ml", "fruit")
    m.table.update(key, state="progressing", step=1, steps=2, step_started=1.0,
                   traffic_percent=5, pending_since=1.0, healthy=True, last_converged=1.0)
    m.analyses.labels("ml", "RayService", "fruit", "passed").inc()
    m.drift_healed.labels("ml", "RayService", "fruit").inc()
    m.notifications.labels("r", "sent").inc()
    m.workloads.labels("succeeded").set(1)
    m.steps.labels("create-cluster", "ok").inc()
    m.sync_duration.labels("commit").observe(1)
    served = set(METRIC.findall(generate_latest(m.registry).decode()))
    queried = {name for expr in rule_exprs() + dashboard_exprs()
               for name in METRIC.findall(expr)}
    assert queried, "no query names a gitray metric"
    assert queried - served == set()
