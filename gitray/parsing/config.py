"""Reading gitray settings: ``gitray.yaml`` + flags + environment, validated. No I/O.

The file is parsed from bytes handed in by the caller; overrides (flags, env) arrive as a
mapping with the same camelCase keys as the file (nested, or dotted: ``rayService.deletionDelay``)
and win over it. Both are checked against ``schemas/config.schema.json`` and gitray's own rules;
problems are ``Diagnostic`` values pointing into gitray.yaml (or at ``(flags/env)``). The
settings themselves are values of ``gitray.core.config``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gitray.core.config import (
    CLUSTER_SCOPED_KINDS,
    CONFIG_API_VERSION,
    CONFIG_FILE,
    OVERRIDES_SOURCE,
    CapacityMode,
    CapacitySettings,
    Config,
    FreezeScope,
    FreezeWindow,
    HelmRelease,
    NotificationSettings,
    RayJobSettings,
    RayServiceSettings,
    Receiver,
    ReceiverType,
    StatusProvider,
    StatusSettings,
    parse_duration,
)
from gitray.core.errors import ConfigError
from gitray.core.model import Diagnostic, Kind, SourceLocation
from gitray.parsing.cron import parse_cron
from gitray.parsing.globs import glob_problem
from gitray.parsing.jsonschemas import load_schema, schema_errors
from gitray.parsing.text import JsonPath, decode_text, format_path
from gitray.parsing.yamlsafe import parse_documents

__all__ = ["config_diagnostics", "env_overrides", "parse_config"]

_SECTIONS = ("rayService", "rayJob", "status", "notifications")

Locate = Callable[[JsonPath], SourceLocation]


def parse_config(
    data: bytes | None,
    path: str = CONFIG_FILE,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """The settings from gitray.yaml ``data`` (None: no file) and ``overrides``.

    Raises ``ConfigError`` listing every problem, one ``path:line:col: message`` per line.
    """
    config, diagnostics = config_diagnostics(data, path, overrides)
    if diagnostics:
        raise ConfigError("\n".join(str(d) for d in diagnostics))
    return config


def config_diagnostics(
    data: bytes | None,
    path: str = CONFIG_FILE,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[Config, tuple[Diagnostic, ...]]:
    """Like ``parse_config`` but returns the problems (and default settings when there are any)."""
    diagnostics: list[Diagnostic] = []
    file_data: dict[str, Any] = {}
    if data is not None:
        file_data = _read_file(data, path, diagnostics)
    override_data: dict[str, Any] = {}
    if overrides:
        override_data = _expand_dotted(overrides)
        where = SourceLocation(OVERRIDES_SOURCE)
        wrapped = {"apiVersion": CONFIG_API_VERSION, "kind": "Config", **override_data}
        _check(wrapped, lambda _path: where, diagnostics, prefix="override ")
    if diagnostics:
        return Config(), tuple(sorted(set(diagnostics)))
    merged = dict(file_data)
    for key, value in override_data.items():
        if key in _SECTIONS and isinstance(value, Mapping):
            merged[key] = {**(merged.get(key) or {}), **value}
        else:
            merged[key] = value
    return _build(merged), ()


def _read_file(data: bytes, path: str, diagnostics: list[Diagnostic]) -> dict[str, Any]:
    text, problem = decode_text(data, path)
    if problem is not None or text is None:
        diagnostics.append(problem or Diagnostic(SourceLocation(path), "unreadable"))
        return {}
    documents, problems = parse_documents(text, path)
    diagnostics.extend(problems)
    if problems:
        return {}
    if not documents:
        return {}  # an empty gitray.yaml means defaults
    if len(documents) > 1:
        diagnostics.append(
            Diagnostic(documents[1].start, f"{path} must hold a single YAML document")
        )
        return {}
    document = documents[0]
    if not isinstance(document.value, dict):
        diagnostics.append(
            Diagnostic(document.start, f"{path} must be a mapping (apiVersion, kind, ...)")
        )
        return {}
    _check(document.value, document.locate, diagnostics)
    return document.value


def _expand_dotted(overrides: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue  # an unset flag
        head, _, rest = str(key).partition(".")
        if rest:
            section = out.setdefault(head, {})
            if isinstance(section, dict):
                section[rest] = value
        elif isinstance(value, Mapping) and isinstance(out.get(head), dict):
            out[head].update(value)
        else:
            out[head] = dict(value) if isinstance(value, Mapping) else value
    return out


def _check(
    data: dict[str, Any], locate: Locate, diagnostics: list[Diagnostic], prefix: str = ""
) -> None:
    for path, message in schema_errors("config.schema.json", data):
        field_name = format_path(path)
        diagnostics.append(Diagnostic(locate(path), f"{prefix}{field_name}: {message}"))
    for key in ("paths", "exclude"):
        patterns = data.get(key)
        for index, pattern in enumerate(patterns if isinstance(patterns, list) else []):
            problem = glob_problem(pattern) if isinstance(pattern, str) and pattern else None
            if problem:
                diagnostics.append(Diagnostic(locate((key, index)), f"{prefix}{key}: {problem}"))
    windows = data.get("freezeWindows")
    for index, window in enumerate(windows if isinstance(windows, list) else []):
        if isinstance(window, dict):
            diagnostics.extend(Diagnostic(locate(("freezeWindows", index, key)),
                                          f"{prefix}freezeWindows[{index}].{key}: {message}")
                               for key, message in _freeze_problems(window))
    ray_kinds = {k.value for k in Kind}
    kinds = data.get("supportingKinds")
    for index, kind in enumerate(kinds if isinstance(kinds, list) else []):
        where = locate(("supportingKinds", index))
        if kind in ray_kinds:
            message = f"{kind} is a Ray workload kind, always managed; remove it from this list"
        elif kind in CLUSTER_SCOPED_KINDS:
            message = (
                f"{kind} is cluster-scoped; gitray only applies namespaced objects "
                "(create it outside gitray)"
            )
        else:
            continue
        diagnostics.append(Diagnostic(where, f"{prefix}supportingKinds: {message}"))


MAX_FREEZE_S = 31 * 24 * 3600


def _freeze_problems(window: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for what the schema cannot say about one freeze window."""
    problems: list[tuple[str, str]] = []
    schedule = window.get("schedule")
    if isinstance(schedule, str):
        try:
            parse_cron(schedule)
        except ValueError as e:
            problems.append(("schedule", str(e)))
    zone = window.get("timeZone")
    if isinstance(zone, str):
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(("timeZone", f"{zone!r} is not a known IANA time zone "
                             "(e.g. UTC, Europe/Berlin, America/New_York)"))
    duration = window.get("duration")
    if isinstance(duration, (int, str)):
        try:
            seconds = parse_duration(duration)
        except ValueError:
            seconds = None  # the schema says it
        if seconds is not None and not 60 <= seconds <= MAX_FREEZE_S:
            problems.append(("duration", "must be between 1m and 31 days (744h)"))
    return problems


def _freeze_window(data: Mapping[str, Any]) -> FreezeWindow:
    return FreezeWindow(name=str(data["name"]), schedule=str(data["schedule"]),
                        duration_s=parse_duration(data["duration"]),
                        time_zone=str(data.get("timeZone", "UTC")),
                        scope=FreezeScope(data.get("scope", FreezeScope.ALL.value)))


def _build(data: Mapping[str, Any]) -> Config:
    default = Config()
    service = data.get("rayService") or {}
    job = data.get("rayJob") or {}
    status = data.get("status") or {}
    rs_default, rj_default, st_default = default.rayservice, default.rayjob, default.status

    def seconds(section: Mapping[str, Any], key: str, fallback: int) -> int:
        value = section.get(key)
        return fallback if value is None else parse_duration(value)

    return Config(
        paths=tuple(data.get("paths") or default.paths),
        exclude=tuple(data.get("exclude") or default.exclude),
        default_namespace=data.get("defaultNamespace", default.default_namespace),
        allowed_namespaces=tuple(data.get("allowedNamespaces") or default.allowed_namespaces),
        prune=data.get("prune", default.prune),
        allow_empty=data.get("allowEmpty", default.allow_empty),
        supporting_kinds=tuple(data.get("supportingKinds", default.supporting_kinds)),
        instance=data.get("instance", default.instance),
        max_parallel=data.get("maxParallel", default.max_parallel),
        sensitive_fields=tuple(data.get("sensitiveFields", default.sensitive_fields)),
        kuberay_version=data.get("kuberayVersion", default.kuberay_version),
        rayservice=RayServiceSettings(
            cluster_ready_timeout_s=seconds(
                service, "clusterReadyTimeout", rs_default.cluster_ready_timeout_s
            ),
            serve_ready_timeout_s=seconds(
                service, "serveReadyTimeout", rs_default.serve_ready_timeout_s
            ),
            deletion_delay_s=seconds(service, "deletionDelay", rs_default.deletion_delay_s),
            keep_failed_clusters=service.get(
                "keepFailedClusters", rs_default.keep_failed_clusters
            ),
        ),
        rayjob=RayJobSettings(
            retention=job.get("retention", rj_default.retention),
            timeout_s=seconds(job, "timeout", rj_default.timeout_s),
        ),
        status=StatusSettings(
            provider=StatusProvider(status.get("provider", st_default.provider.value)),
            context_prefix=status.get("contextPrefix", st_default.context_prefix),
            url=status.get("url", st_default.url),
            repository=status.get("repository", st_default.repository),
        ),
        notifications=NotificationSettings(receivers=tuple(
            _receiver(r) for r in (data.get("notifications") or {}).get("receivers") or ()
            if isinstance(r, Mapping))),
        capacity=CapacitySettings(
            quota=CapacityMode((data.get("capacity") or {}).get(
                "quota", default.capacity.quota.value)),
            nodes=CapacityMode((data.get("capacity") or {}).get(
                "nodes", default.capacity.nodes.value)),
        ),
        freeze_windows=tuple(_freeze_window(w) for w in data.get("freezeWindows") or ()
                             if isinstance(w, Mapping)),
        helm=tuple(HelmRelease(str(h["chart"]), str(h["release"]), str(h.get("namespace") or ""),
                               tuple(str(v) for v in h.get("values") or ()))
                   for h in data.get("helm") or () if isinstance(h, Mapping)),
    )


def _receiver(data: Mapping[str, Any]) -> Receiver:
    return Receiver(name=str(data["name"]), type=ReceiverType(data.get("type", "webhook")),
                    url=data.get("url", ""), url_env=data.get("urlEnv", ""),
                    url_file=data.get("urlFile", ""), token_env=data.get("tokenEnv", ""),
                    token_file=data.get("tokenFile", ""), events=tuple(data.get("events", ())))


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Overrides from ``GITRAY_<KEY>`` variables, for the in-cluster daemon.

    ``<KEY>`` is the gitray.yaml key in upper snake case, sections included:
    ``GITRAY_DEFAULT_NAMESPACE``, ``GITRAY_ALLOWED_NAMESPACES=ray-*,default``,
    ``GITRAY_RAY_SERVICE_DELETION_DELAY=5m``, ``GITRAY_STATUS_PROVIDER=github``. Lists are
    comma-separated, booleans true/false, numbers decimal; anything wrong is reported by
    ``parse_config`` like any other override.
    """
    out: dict[str, Any] = {}
    for dotted, schema in _leaf_settings().items():
        name = "GITRAY_" + _snake(dotted).upper()
        if name not in environ:
            continue
        out[dotted] = _env_value(environ[name].strip(), schema)
    return out


def _leaf_settings() -> dict[str, dict[str, Any]]:
    root = load_schema("config.schema.json")
    leaves: dict[str, dict[str, Any]] = {}
    for key, schema in root["properties"].items():
        if key in ("apiVersion", "kind"):
            continue
        if schema.get("type") == "object":
            for sub, sub_schema in schema["properties"].items():
                leaves[f"{key}.{sub}"] = sub_schema
        else:
            leaves[key] = schema
    return leaves


def _snake(dotted: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", dotted.replace(".", "_"))


def _env_value(text: str, schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if kind == "array":
        return [item.strip() for item in text.split(",") if item.strip()]
    if kind == "boolean":
        lowered = text.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        return text  # refused by the schema, with the variable's value in the message
    if kind == "integer" or schema.get("$ref") == "#/$defs/duration":  # seconds or "90s"
        return int(text) if re.fullmatch(r"[0-9]+", text) else text
    return text
