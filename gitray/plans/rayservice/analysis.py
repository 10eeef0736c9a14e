"""Progressive-delivery analysis of a RayService: the ``gitray.io/analysis`` annotation. Pure.

A RayService upgraded with ``upgradeStrategy.type: NewClusterWithIncrementalUpgrade`` may carry
an annotation ``gitray.io/analysis`` whose value is YAML (``schemas/analysis.schema.json``)::

    metadata:
      annotations:
        gitray.io/analysis: |
          metrics: {url: "http://traefik-metrics.traefik.svc:9100/metrics"}
          checks:
            - {type: serve-health}
            - {type: success-rate, min: 99, minRequests: 20}
            - {type: latency, percentile: 95, maxMs: 300}
            - {type: webhook, url: "https://ci.example.com/gate", timeout: 10s}
          failureLimit: 2
          keepFailedClusters: true
          pauses:
            - {atPercent: 50, duration: 5m}
            - {atPercent: 100}              # until `gitray promote <namespace>/<name>`

Why an annotation (and not gitray.yaml): the analysis travels with the manifest it guards, is
reviewed in the same pull request as the upgrade it applies to, and needs no name matching
between two files. KubeRay ignores it, so the manifest stays a valid KubeRay RayService.

Checks run at every traffic weight step, over that step's ``intervalSeconds``; the planner puts
them into the plan as ``run-analysis`` steps and the pauses as ``pause`` steps.

A blue-green RayService (``upgradeStrategy.type: NewCluster``, the default) takes the same
checks as gates (``gitray.plans.rayservice.bluegreen``): they run over ``window`` against the
new cluster through its own serve Service before the switch, and again after it while the old
cluster still exists; success-rate and latency there measure requests gitray sends itself
(``probe: {path: /hello, requests: 20}``); ``approve: true`` holds the switch until
``gitray approve <namespace>/RayService/<name>``. Pauses are the incremental upgrade's only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitray.core.config import parse_duration
from gitray.core.model import ANN_ANALYSIS, JSON, Diagnostic, SourceLocation
from gitray.parsing.jsonschemas import schema_errors
from gitray.parsing.text import JsonPath, format_path
from gitray.parsing.yamlsafe import YamlDocument, parse_documents

__all__ = [
    "ANALYSIS_PATH",
    "STRATEGY_BLUE_GREEN",
    "STRATEGY_INCREMENTAL",
    "Analysis",
    "Check",
    "CheckType",
    "Pause",
    "Probe",
    "analysis_diagnostics",
    "land_pauses",
    "parse_analysis",
    "read_analysis",
]

STRATEGY_INCREMENTAL, STRATEGY_BLUE_GREEN = "incremental", "blue-green"

ANALYSIS_PATH: JsonPath = ("metadata", "annotations", ANN_ANALYSIS)
DEFAULT_MIN_REQUESTS = 10
DEFAULT_PERCENTILE = 95
DEFAULT_WEBHOOK_TIMEOUT_S = 10
DEFAULT_WINDOW_S = 30  # blue-green: each gate's analysis window
DEFAULT_PROBE_REQUESTS = 20


class CheckType(StrEnum):
    SERVE_HEALTH = "serve-health"  # every Serve application and deployment on the new cluster
    SUCCESS_RATE = "success-rate"  # non-5xx share of the new cluster's requests at the gateway
    LATENCY = "latency"  # a percentile of the new cluster's request durations at the gateway
    WEBHOOK = "webhook"  # an external gate: any 2xx answer passes

    @property
    def reads_metrics(self) -> bool:
        return self in {CheckType.SUCCESS_RATE, CheckType.LATENCY}


_APPLIES: Mapping[CheckType, frozenset[str]] = {
    CheckType.SERVE_HEALTH: frozenset(),
    CheckType.SUCCESS_RATE: frozenset({"min", "minRequests"}),
    CheckType.LATENCY: frozenset({"percentile", "maxMs", "minRequests"}),
    CheckType.WEBHOOK: frozenset({"url", "timeout"}),
}


@dataclass(frozen=True)
class Check:
    """One check; ``settings`` are its JSON-safe parameters with defaults filled in."""

    name: str
    type: CheckType
    settings: Mapping[str, JSON] = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "type": self.type.value, **self.settings}


@dataclass(frozen=True)
class Pause:
    at_percent: int
    seconds: int | None  # None: until `gitray promote`


@dataclass(frozen=True)
class Probe:
    """Blue-green: requests gitray sends to the new cluster's serve Service per analysis."""

    path: str
    requests: int = DEFAULT_PROBE_REQUESTS


@dataclass(frozen=True)
class Analysis:
    checks: tuple[Check, ...] = ()
    failure_limit: int = 1
    keep_failed_clusters: bool | None = None  # None: gitray.yaml's rayService setting
    pauses: tuple[Pause, ...] = ()
    metrics_url: str = ""
    metrics_provider: str = "traefik"
    approve: bool = False  # blue-green: hold the switch until `gitray approve`
    window_s: int = DEFAULT_WINDOW_S  # blue-green: each gate's analysis window
    probe: Probe | None = None  # blue-green: what success-rate and latency measure


# where inside the annotation's YAML (a path, or a line:col for a YAML syntax error; None:
# the annotation itself), and what is wrong
Problem = tuple[JsonPath | SourceLocation | None, str]


def parse_analysis(text: str) -> tuple[Analysis | None, list[Problem], YamlDocument | None]:
    """The analysis in an annotation value, or the problems with it (paths into its YAML)."""
    documents, problems = parse_documents(text, ANN_ANALYSIS)
    if problems:
        return None, [(p.location, p.message) for p in problems], None
    if len(documents) != 1 or not isinstance(documents[0].value, dict):
        return None, [(None, "must be a YAML mapping (checks, failureLimit, pauses, ...)")], None
    document = documents[0]
    data: dict[str, Any] = document.value
    found: list[Problem] = [(path, f"{format_path(path)}: {message}" if path else message)
                            for path, message in schema_errors("analysis.schema.json", data)]
    if found:
        return None, found, document
    found = _semantic_problems(data)
    if found:
        return None, found, document
    return _build(data), [], document


def _semantic_problems(data: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    names: dict[str, int] = {}
    for index, check in enumerate(data.get("checks") or []):
        here: JsonPath = ("checks", index)
        kind = CheckType(check["type"])
        for key in sorted(set(check) - _APPLIES[kind] - {"name", "type"}):
            problems.append(((*here, key), f"{format_path((*here, key))} does not apply to a "
                             f"{kind.value} check; remove it"))
        name = check.get("name", kind.value)
        if name in names:
            problems.append(((*here, "name") if "name" in check else here,
                             f"{format_path(here)}: check name {name!r} is used twice "
                             f"(checks[{names[name]}] has it too); name each check"))
        names.setdefault(name, index)
        if "timeout" in check and parse_duration(check["timeout"]) < 1:
            problems.append(((*here, "timeout"), f"{format_path((*here, 'timeout'))} must be "
                             "at least 1s"))
    seen: dict[int, int] = {}
    for index, pause in enumerate(data.get("pauses") or []):
        here = ("pauses", index)
        percent = pause["atPercent"]
        if percent in seen:
            problems.append(((*here, "atPercent"), f"{format_path(here)}: atPercent "
                             f"{percent} is used twice (pauses[{seen[percent]}] has it too)"))
        seen.setdefault(percent, index)
        if "duration" in pause and parse_duration(pause["duration"]) < 1:
            problems.append(((*here, "duration"), f"{format_path(here)}.duration must be at "
                             "least 1s; leave it out to pause until `gitray promote`"))
    return problems


def _build(data: Mapping[str, Any]) -> Analysis:
    checks = []
    for check in data.get("checks") or []:
        kind = CheckType(check["type"])
        settings: dict[str, JSON] = {}
        if kind is CheckType.SUCCESS_RATE:
            settings = {"min": check["min"],
                        "minRequests": check.get("minRequests", DEFAULT_MIN_REQUESTS)}
        elif kind is CheckType.LATENCY:
            settings = {"percentile": check.get("percentile", DEFAULT_PERCENTILE),
                        "maxMs": check["maxMs"],
                        "minRequests": check.get("minRequests", DEFAULT_MIN_REQUESTS)}
        elif kind is CheckType.WEBHOOK:
            timeout = check.get("timeout")
            settings = {"url": check["url"],
                        "timeoutSeconds": parse_duration(timeout) if timeout is not None
                        else DEFAULT_WEBHOOK_TIMEOUT_S}
        checks.append(Check(check.get("name", kind.value), kind, settings))
    pauses = sorted(
        (Pause(p["atPercent"], parse_duration(p["duration"]) if "duration" in p else None)
         for p in data.get("pauses") or []), key=lambda p: p.at_percent)
    metrics = data.get("metrics") or {}
    probe = data.get("probe")
    return Analysis(checks=tuple(checks), failure_limit=data.get("failureLimit", 1),
                    keep_failed_clusters=data.get("keepFailedClusters"),
                    pauses=tuple(pauses), metrics_url=metrics.get("url", ""),
                    metrics_provider=metrics.get("provider", "traefik"),
                    approve=bool(data.get("approve", False)),
                    window_s=parse_duration(data["window"]) if "window" in data
                    else DEFAULT_WINDOW_S,
                    probe=Probe(probe["path"], probe.get("requests", DEFAULT_PROBE_REQUESTS))
                    if isinstance(probe, Mapping) else None)


def read_analysis(manifest: Mapping[str, JSON]) -> Analysis | None:
    """The analysis of a validated RayService manifest (None: it has none)."""
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(ANN_ANALYSIS)
    if text is None:
        return None
    analysis, problems, _ = parse_analysis(str(text))
    if analysis is None:
        raise ValueError(f"{ANN_ANALYSIS} was not validated: {problems}")
    return analysis


def land_pauses(pauses: Sequence[Pause], weights: Sequence[int]
                ) -> tuple[dict[int, Pause], list[tuple[int, str]]]:
    """Which weight step (index into ``weights``) each pause follows: the first step whose
    weight reaches its ``atPercent``. Two pauses on one step are a problem (pause index)."""
    landed: dict[int, Pause] = {}
    problems: list[tuple[int, str]] = []
    for index, pause in enumerate(pauses):
        step = next(i for i, w in enumerate(weights) if w >= pause.at_percent)
        if step in landed:
            problems.append((index, f"pauses: atPercent {pause.at_percent} and "
                             f"{landed[step].at_percent} both pause after the step to "
                             f"{weights[step]} % (weights: {_weights(weights)}); merge them"))
        else:
            landed[step] = pause
    return landed, problems


def _weights(weights: Sequence[int]) -> str:
    return ", ".join(str(w) for w in weights)


def analysis_diagnostics(document: YamlDocument, strategy: str | None,
                         weights: Sequence[int] | None) -> list[Diagnostic]:
    """Problems with a RayService's ``gitray.io/analysis`` annotation, located in its file.

    ``strategy``: ``STRATEGY_INCREMENTAL``, ``STRATEGY_BLUE_GREEN`` or None (an upgrade that
    builds no new cluster). ``weights``: the traffic weights of an incremental upgrade when its
    options are valid (to place the pauses), else None.
    """
    meta = document.value.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or ANN_ANALYSIS not in annotations:
        return []
    label = f"metadata.annotations.{ANN_ANALYSIS}"
    text = annotations[ANN_ANALYSIS]
    if strategy is None:
        return [Diagnostic(document.locate(ANALYSIS_PATH),
                           f"{label} only applies to an upgrade that builds a new cluster "
                           "(upgradeStrategy.type NewCluster or "
                           "NewClusterWithIncrementalUpgrade): it checks the new cluster before "
                           "it takes the traffic; remove it or set one of those types")]
    if not isinstance(text, str):
        return [Diagnostic(document.locate(ANALYSIS_PATH),
                           f"{label} must be a string holding YAML; write it as a block: "
                           f"'{ANN_ANALYSIS}: |'")]
    analysis, problems, inner = parse_analysis(text)

    def at(path: JsonPath | SourceLocation | None) -> SourceLocation:
        # located only when reported: positions cost a second reading of the file
        key = document.locate(ANALYSIS_PATH)
        literal = document.literals.get(ANALYSIS_PATH)
        if path is None or literal is None:
            return key
        if isinstance(path, SourceLocation):
            where = path
        elif inner is None:
            return key
        else:
            where = inner.locate(path)
        return SourceLocation(key.path, literal[0] + where.line - 1, literal[1] + where.col)

    found = [Diagnostic(at(path), f"{label}: {message}") for path, message in problems]
    if analysis is not None and inner is not None:
        found += [Diagnostic(at(path), f"{label}: {message}")
                  for path, message in _strategy_problems(inner.value, strategy)]
    if analysis is not None and weights:
        _, collisions = land_pauses(analysis.pauses, weights)
        found += [Diagnostic(at(("pauses",)), f"{label}: {message}")
                  for _, message in collisions]
    return found


_BLUE_GREEN_ONLY = ("approve", "window", "probe")


def _strategy_problems(data: Mapping[str, Any], strategy: str) -> list[Problem]:
    """Settings of one strategy written for the other."""
    found: list[Problem] = []
    if strategy == STRATEGY_INCREMENTAL:
        found += [((key,), f"{key} applies to blue-green upgrades (upgradeStrategy.type "
                  "NewCluster) only; an incremental upgrade is held with pauses and analysed "
                  "over intervalSeconds through the gateway's metrics") for key in
                 _BLUE_GREEN_ONLY if key in data]
        for index, check in enumerate(data.get("checks") or []):
            kind = CheckType(check["type"])
            if kind.reads_metrics and "metrics" not in data:
                found.append((("checks", index), f"checks[{index}]: a {kind.value} check "
                              "reads the gateway's Prometheus metrics: set metrics.url"))
        return found
    if "pauses" in data:
        found.append((("pauses",), "pauses apply to incremental upgrades only; hold a "
                      "blue-green upgrade before its switch with approve: true"))
    if "metrics" in data:
        found.append((("metrics",), "metrics apply to incremental upgrades only (a blue-green "
                      "upgrade sends no client traffic to the new cluster before its switch); "
                      "set probe: {path: ...} instead"))
    for index, check in enumerate(data.get("checks") or []):
        if CheckType(check["type"]).reads_metrics and "probe" not in data:
            found.append((("checks", index), f"checks[{index}]: a {check['type']} check of a "
                          "blue-green upgrade measures requests gitray sends: set probe: "
                          "{path: /...}"))
    return found
