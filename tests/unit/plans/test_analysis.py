"""The ``gitray.io/analysis`` annotation: what it accepts, and one clear located error for
each thing it refuses (never a traceback)."""

from __future__ import annotations

import textwrap

import pytest

from gitray.core.snapshot import RepoFile, Snapshot
from gitray.plans.load import load_snapshot
from gitray.plans.rayservice.analysis import (
    Analysis,
    Check,
    CheckType,
    Pause,
    Probe,
    land_pauses,
    parse_analysis,
)

HEAD = """\
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: text
  namespace: ray
  annotations:
    gitray.io/analysis: |
{analysis}
spec:
{strategy}
  serveConfigV2: |
    applications:
      - name: greeter
        import_path: apps.greeter:app
  rayClusterConfig:
    enableInTreeAutoscaling: true
    headGroupSpec:
      rayStartParams: {{}}
      template:
        spec:
          containers:
            - name: ray-head
              image: rayproject/ray:2.60.0
"""
INCREMENTAL = """\
  upgradeStrategy:
    type: NewClusterWithIncrementalUpgrade
    clusterUpgradeOptions: {gatewayClassName: traefik, stepSizePercent: 20, intervalSeconds: 30}
"""
ANALYSIS_LINE = 8  # the annotation's first line in HEAD


def manifest(analysis: str, strategy: str = INCREMENTAL) -> str:
    body = textwrap.indent(textwrap.dedent(analysis).strip("\n"), "      ")
    return HEAD.format(analysis=body, strategy=strategy.rstrip("\n"))


def problems(analysis: str, strategy: str = INCREMENTAL) -> list[str]:
    text = manifest(analysis, strategy)
    result = load_snapshot(Snapshot("worktree", "test", (RepoFile("m.yaml", text.encode()),)))
    return [str(d) for d in result.diagnostics]


def test_a_full_analysis_is_read_with_defaults() -> None:
    analysis, found, _ = parse_analysis(textwrap.dedent("""\
        metrics: {url: "http://traefik.traefik.svc:9100/metrics"}
        checks:
          - {type: serve-health}
          - {name: ok, type: success-rate, min: 99.5}
          - {type: latency, maxMs: 250}
          - {type: webhook, url: "https://gate.example.com/x", timeout: 1m}
        failureLimit: 3
        keepFailedClusters: true
        pauses: [{atPercent: 60}, {atPercent: 20, duration: 90s}]
        """))
    assert not found
    assert analysis == Analysis(
        checks=(Check("serve-health", CheckType.SERVE_HEALTH), Check("ok", CheckType.SUCCESS_RATE),
                Check("latency", CheckType.LATENCY), Check("webhook", CheckType.WEBHOOK)),
        failure_limit=3, keep_failed_clusters=True,
        pauses=(Pause(20, 90), Pause(60, None)),
        metrics_url="http://traefik.traefik.svc:9100/metrics")
    assert analysis is not None
    assert [c.to_json() for c in analysis.checks][1:] == [
        {"name": "ok", "type": "success-rate", "min": 99.5, "minRequests": 10},
        {"name": "latency", "type": "latency", "percentile": 95, "maxMs": 250,
         "minRequests": 10},
        {"name": "webhook", "type": "webhook", "url": "https://gate.example.com/x",
         "timeoutSeconds": 60}]


def test_an_empty_mapping_is_an_analysis_without_checks() -> None:
    assert parse_analysis("{}")[0] == Analysis()


def test_a_valid_annotation_loads() -> None:
    assert problems("checks: [{type: serve-health}]\npauses: [{atPercent: 40}]") == []


CASES = {
    "an unknown field names the closest one": (
        "failurLimit: 2", f"m.yaml:{ANALYSIS_LINE}:7: metadata.annotations.gitray.io/analysis: "
        "failurLimit: unknown field 'failurLimit' (did you mean 'failureLimit'?)"),
    "an unknown check type": (
        "checks: [{type: error-rate}]", f"m.yaml:{ANALYSIS_LINE}:17: metadata.annotations."
        "gitray.io/analysis: checks[0].type: 'error-rate' is not one of"),
    "a success rate needs its minimum": (
        "metrics: {url: 'http://m:9100/metrics'}\nchecks: [{type: success-rate}]",
        f"m.yaml:{ANALYSIS_LINE + 1}:16: metadata.annotations.gitray.io/analysis: checks[0]: "
        "'min' is a required property"),
    "a metric check without metrics.url": (
        "checks:\n  - {type: latency, maxMs: 100}",
        f"m.yaml:{ANALYSIS_LINE + 1}:11: metadata.annotations.gitray.io/analysis: checks[0]: "
        "a latency check reads the gateway's Prometheus metrics: set metrics.url"),
    "a setting of another check type": (
        "checks:\n  - {type: serve-health, maxMs: 100}",
        f"m.yaml:{ANALYSIS_LINE + 1}:32: metadata.annotations.gitray.io/analysis: "
        "checks[0].maxMs does not apply to a serve-health check; remove it"),
    "two checks of one name": (
        "checks:\n  - {type: serve-health}\n  - {type: serve-health}",
        f"m.yaml:{ANALYSIS_LINE + 2}:11: metadata.annotations.gitray.io/analysis: checks[1]: "
        "check name 'serve-health' is used twice (checks[0] has it too); name each check"),
    "a failure limit of zero": (
        "failureLimit: 0", f"m.yaml:{ANALYSIS_LINE}:7: metadata.annotations.gitray.io/analysis:"
        " failureLimit: 0 is less than the minimum of 1"),
    "a webhook that is not http": (
        "checks: [{type: webhook, url: 'file:///etc/passwd'}]",
        f"m.yaml:{ANALYSIS_LINE}:32: metadata.annotations.gitray.io/analysis: checks[0].url: "
        "'file:///etc/passwd' is not valid: an http:// or https:// URL"),
    "a pause at 0 %": (
        "pauses: [{atPercent: 0}]", f"m.yaml:{ANALYSIS_LINE}:17: metadata.annotations.gitray.io/"
        "analysis: pauses[0].atPercent: 0 is less than the minimum of 1"),
    "a pause of no time": (
        "pauses: [{atPercent: 10, duration: 0s}]", f"m.yaml:{ANALYSIS_LINE}:32: metadata."
        "annotations.gitray.io/analysis: pauses[0].duration must be at least 1s; leave it out "
        "to pause until `gitray promote`"),
    "a duration that is not one": (
        "pauses: [{atPercent: 10, duration: soon}]", f"m.yaml:{ANALYSIS_LINE}:32: metadata."
        "annotations.gitray.io/analysis: pauses[0].duration: 'soon' is not valid"),
    "two pauses on one weight step": (
        "pauses: [{atPercent: 30}, {atPercent: 35}]", f"m.yaml:{ANALYSIS_LINE}:7: metadata."
        "annotations.gitray.io/analysis: pauses: atPercent 35 and 30 both pause after the step "
        "to 40 % (weights: 20, 40, 60, 80, 100); merge them"),
    "the same pause twice": (
        "pauses: [{atPercent: 30}, {atPercent: 30}]", f"m.yaml:{ANALYSIS_LINE}:34: metadata."
        "annotations.gitray.io/analysis: pauses[1]: atPercent 30 is used twice"),
    "not YAML": (
        "checks: [",
        f"m.yaml:{ANALYSIS_LINE + 1}:7: metadata.annotations.gitray.io/analysis: YAML"),
    "not a mapping": (
        "- serve-health", f"m.yaml:{ANALYSIS_LINE - 1}:5: metadata.annotations.gitray.io/"
        "analysis: must be a YAML mapping"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_analysis_gets_one_located_error(case: str) -> None:
    analysis, expected = CASES[case]
    found = problems(analysis)
    assert len(found) == 1 and found[0].startswith(expected), found


BLUE_GREEN = "  upgradeStrategy: {type: NewCluster}"
IN_PLACE = "  upgradeStrategy: {type: None}"


def test_analysis_on_a_service_upgraded_in_place_is_refused() -> None:
    found = problems("checks: [{type: serve-health}]", strategy=IN_PLACE)
    assert found == [f"m.yaml:{ANALYSIS_LINE - 1}:5: metadata.annotations.gitray.io/analysis "
                     "only applies to an upgrade that builds a new cluster (upgradeStrategy."
                     "type NewCluster or NewClusterWithIncrementalUpgrade): it checks the new "
                     "cluster before it takes the traffic; remove it or set one of those types"]


@pytest.mark.parametrize("analysis", [
    "checks: [{type: serve-health}]",
    "approve: true",
    "{checks: [{type: success-rate, min: 99}], probe: {path: /hello}, window: 1m}",
    "{checks: [{type: latency, maxMs: 300}, {type: webhook, url: 'http://g/x'}], "
    "probe: {path: /, requests: 5}, failureLimit: 2, keepFailedClusters: true, approve: true}",
], ids=["serve-health", "approve alone", "success rate by probe", "everything"])
def test_gates_of_a_blue_green_service_are_accepted(analysis: str) -> None:
    assert problems(analysis, strategy=BLUE_GREEN) == []


def test_blue_green_settings_are_read() -> None:
    analysis, found, _ = parse_analysis(
        "{checks: [{type: success-rate, min: 90}], probe: {path: /hello}, window: 2m, "
        "approve: true}")
    assert found == [] and analysis is not None
    assert (analysis.approve, analysis.window_s, analysis.probe) == (True, 120,
                                                                     Probe("/hello", 20))
    defaults = parse_analysis("{}")[0]
    assert defaults is not None
    assert (defaults.approve, defaults.window_s, defaults.probe) == (False, 30, None)


GATE_CASES = {
    "pauses on blue-green": (
        "pauses: [{atPercent: 50}]", BLUE_GREEN,
        "pauses apply to incremental upgrades only; hold a blue-green upgrade before its "
        "switch with approve: true"),
    "metrics on blue-green": (
        "{metrics: {url: 'http://m/metrics'}, checks: [{type: serve-health}]}", BLUE_GREEN,
        "metrics apply to incremental upgrades only"),
    "success rate without a probe": (
        "checks: [{type: success-rate, min: 99}]", BLUE_GREEN,
        "checks[0]: a success-rate check of a blue-green upgrade measures requests gitray "
        "sends: set probe: {path: /...}"),
    "approve on incremental": (
        "approve: true", INCREMENTAL, "approve applies to blue-green upgrades"),
    "probe on incremental": (
        "{probe: {path: /}, checks: [{type: serve-health}]}", INCREMENTAL,
        "probe applies to blue-green upgrades"),
    "window on incremental": ("window: 10s", INCREMENTAL, "window applies to blue-green"),
    "a probe path without a slash": (
        "probe: {path: hello}", BLUE_GREEN, "probe.path: 'hello' is not valid: the request path"),
    "no requests": ("probe: {path: /, requests: 0}", BLUE_GREEN,
                    "probe.requests: 0 is less than the minimum of 1"),
}


@pytest.mark.parametrize("case", GATE_CASES)
def test_a_gate_setting_of_the_wrong_strategy_gets_one_located_error(case: str) -> None:
    analysis, strategy, expected = GATE_CASES[case]
    found = problems(analysis, strategy)
    assert len(found) == 1, found
    assert found[0].startswith(f"m.yaml:{ANALYSIS_LINE}:"), found
    assert "metadata.annotations.gitray.io/analysis: " in found[0], found
    assert expected in found[0], found


@pytest.mark.parametrize(("pauses", "weights", "landed"), [
    ([Pause(50, 60)], [25, 50, 75, 100], {1: Pause(50, 60)}),
    ([Pause(1, None)], [25, 50, 75, 100], {0: Pause(1, None)}),
    ([Pause(100, None)], [30, 60, 90, 100], {3: Pause(100, None)}),
    ([Pause(31, 5), Pause(61, None)], [30, 60, 90, 100], {1: Pause(31, 5), 2: Pause(61, None)}),
], ids=["on a step", "before the first step", "before promotion", "between steps"])
def test_pauses_land_after_the_first_step_reaching_them(
        pauses: list[Pause], weights: list[int], landed: dict[int, Pause]) -> None:
    assert land_pauses(pauses, weights) == (landed, [])
