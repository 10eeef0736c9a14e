"""gitray's own rules for manifests, beyond the KubeRay CRD schemas. Pure, no I/O.

- Ray workload names are DNS-1035 labels of at most ``MAX_RAY_NAME`` characters: gitray derives
  ``<name>-<5-char hash>`` (a RayService cluster, a RayJob run), and ``<cluster>-serve-svc`` and
  KubeRay's ``<cluster>-head-svc`` must still fit Kubernetes' 63-character limit.
- A RayService needs ``spec.rayClusterConfig`` and a ``spec.serveConfigV2`` string that parses as
  YAML into Serve's deploy shape: a non-empty ``applications`` list, each with an
  ``import_path``, names (default ``default``) and route prefixes (default ``/``; ``null`` for
  none) unique and well-formed, as ``ray.serve.schema.ServeDeploySchema`` requires.
- ConfigMap ``data``/``binaryData`` values are strings (the API server rejects anything else).
"""

from __future__ import annotations

import re
from typing import Any

from gitray.core.model import Diagnostic, Kind, SourceLocation
from gitray.parsing.text import JsonPath, format_path
from gitray.parsing.yamlsafe import YamlDocument, parse_documents
from gitray.plans.names import remember_serve_config
from gitray.plans.rayservice.analysis import (
    STRATEGY_BLUE_GREEN,
    STRATEGY_INCREMENTAL,
    analysis_diagnostics,
)
from gitray.plans.rayservice.fields import (
    UPGRADE_INCREMENTAL,
    UPGRADE_NEW_CLUSTER,
    refused_fields,
    upgrade_type,
)
from gitray.plans.rayservice.servecheck import import_path_problem, serve_problems
from gitray.plans.rayservice.serveservice import serve_service_problems, serve_service_warnings
from gitray.plans.rayservice.upgradeoptions import Weight, options_problems, read_options, schedule

__all__ = ["DNS1035_LABEL", "DNS1123_LABEL", "DNS1123_SUBDOMAIN", "MAX_RAY_NAME", "check_rules"]

MAX_RAY_NAME = 47  # 47 + len("-12345") = 53; 53 + len("-serve-svc") = 63
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)

_SERVE = ("spec", "serveConfigV2")


def check_rules(kind: str, document: YamlDocument,
                warnings: list[Diagnostic] | None = None,
                serve_file: str | None = None) -> list[Diagnostic]:
    """Problems with gitray's rules for one manifest (identity checks are the loader's).

    Findings that do not stop a revision (keys Ray Serve ignores) go to ``warnings``.
    ``serve_file``: the repository file ``spec.serveConfigV2`` was read from
    (``gitray.plans.servefile``); its problems are placed at that file's lines.
    """
    manifest = document.value
    spec = manifest.get("spec")
    if kind == Kind.RAY_SERVICE:
        spec = spec if isinstance(spec, dict) else {}
        meta = manifest.get("metadata") if isinstance(manifest.get("metadata"), dict) else {}
        name, namespace = str(meta.get("name") or ""), meta.get("namespace")
        if warnings is not None:
            warnings += serve_service_warnings(document, spec)
        return (_rayservice(document, spec, warnings, serve_file) + refused_fields(document, spec)
                + serve_service_problems(document, name, namespace if isinstance(namespace, str)
                                         else None, spec)
                + _analysis(document, spec))
    if kind == "ConfigMap":
        return _configmap(document, manifest)
    return []


def _rayservice(document: YamlDocument, spec: dict[str, Any],
                warnings: list[Diagnostic] | None,
                serve_file: str | None = None) -> list[Diagnostic]:
    problems: list[Diagnostic] = []
    if not isinstance(spec.get("rayClusterConfig"), dict):
        problems.append(
            Diagnostic(
                document.locate(("spec",)),
                "spec.rayClusterConfig is required: it describes the cluster serving this "
                "RayService",
            )
        )
    if "serveConfigV2" not in spec:
        problems.append(
            Diagnostic(
                document.locate(("spec",)),
                "spec.serveConfigV2 is required: gitray deploys it to the cluster's Serve",
            )
        )
        return problems
    text = spec["serveConfigV2"]
    if not isinstance(text, str):
        problems.append(
            Diagnostic(
                document.locate(_SERVE),
                "spec.serveConfigV2 must be a string holding YAML; write it as a block: "
                "'serveConfigV2: |'",
            )
        )
        return problems
    problems.extend(_serve_config(document, text, warnings, serve_file))
    return problems


def _analysis(document: YamlDocument, spec: dict[str, Any]) -> list[Diagnostic]:
    """The ``gitray.io/analysis`` annotation, its pauses placed on the upgrade's weights."""
    incremental = upgrade_type(spec) == UPGRADE_INCREMENTAL
    strategy = spec.get("upgradeStrategy")
    weights = None
    if incremental and isinstance(strategy, dict) and not any(options_problems(strategy)):
        try:
            moves = schedule(read_options(strategy))
            weights = [m.percent for m in moves if isinstance(m, Weight)]
        except ValueError:
            weights = None  # mistyped options: reported by the schema
    kind = upgrade_type(spec)
    strategy = (STRATEGY_INCREMENTAL if incremental else STRATEGY_BLUE_GREEN
                if kind == UPGRADE_NEW_CLUSTER else None)
    return analysis_diagnostics(document, strategy, weights)


def _serve_config(document: YamlDocument, text: str,
                  warnings: list[Diagnostic] | None,
                  serve_file: str | None = None) -> list[Diagnostic]:
    def at(inner: SourceLocation | None, message: str) -> Diagnostic:
        if serve_file is not None:  # read from its own file: the inner positions are its own
            return Diagnostic(inner or SourceLocation(serve_file), f"serveConfigV2: {message}")
        # located only when reported: positions cost a second reading of the file
        key = document.locate(_SERVE)
        literal = document.literals.get(_SERVE)
        if inner is None:
            return Diagnostic(key, f"spec.serveConfigV2: {message}")
        if literal is not None:
            first_line, indent = literal
            where = SourceLocation(key.path, first_line + inner.line - 1, indent + inner.col)
            return Diagnostic(where, f"spec.serveConfigV2: {message}")
        return Diagnostic(key, f"spec.serveConfigV2 (its line {inner.line}): {message}")

    inner_docs, problems = parse_documents(text, serve_file or document.start.path)
    if problems:
        return [at(p.location, p.message) for p in problems]
    if not inner_docs:
        return [at(None, "is empty; it needs an 'applications' list")]
    if len(inner_docs) > 1:
        return [at(inner_docs[1].start, "must be a single YAML document")]
    config = inner_docs[0]
    if not isinstance(config.value, dict):
        return [at(config.start, "must be a mapping with an 'applications' list")]
    remember_serve_config(text, config.value)  # the planner reads it again: not re-parsed
    apps = config.value.get("applications")
    if not isinstance(apps, list) or not apps:
        where = config.locate(("applications",)) if "applications" in config.value else None
        return [at(where, "needs a non-empty 'applications' list")]
    problems = [at(config.locate(path), message) for path, message in _applications(apps)]
    errors, ignored = serve_problems(config.value)  # Ray Serve's own schema and validators
    problems += [at(config.locate(path), message) for path, message in errors]
    if warnings is not None:
        warnings += [at(config.locate(path), message) for path, message in ignored]
    return problems


def _applications(apps: list[Any]) -> list[tuple[JsonPath, str]]:
    problems: list[tuple[JsonPath, str]] = []
    names: dict[str, int] = {}
    prefixes: dict[str, int] = {}
    for index, app in enumerate(apps):
        here: JsonPath = ("applications", index)
        label = format_path(here)
        if not isinstance(app, dict):
            problems.append((here, f"{label} must be a mapping with an import_path"))
            continue
        import_path = app.get("import_path")
        if not isinstance(import_path, str) or not import_path.strip():
            problems.append((here, f"{label} needs an import_path like 'package.module:app'"))
        elif problem := import_path_problem(import_path):
            problems.append(
                ((*here, "import_path"), f"{label}.import_path {import_path!r} is not "
                 f"'module:attribute' or 'module.attribute': it {problem}")
            )
        name = app.get("name", "default")
        if not isinstance(name, str) or not name:
            problems.append(((*here, "name"), f"{label}.name must be a non-empty string"))
        elif name in names:
            problems.append(
                ((*here, "name") if "name" in app else here,
                 f"application name {name!r} is used twice (applications[{names[name]}] "
                 "has it too); Serve needs unique names")
            )
        else:
            names[name] = index
        # Serve defaults route_prefix to "/"; an explicit null means "no HTTP route"
        prefix = app.get("route_prefix", "/")
        where = (*here, "route_prefix") if "route_prefix" in app else here
        if prefix is None:
            continue
        problem = _route_prefix_problem(prefix)
        if problem:
            problems.append((where, f"{label}.route_prefix {problem}"))
        elif prefix in prefixes:
            default = "" if "route_prefix" in app else " (the default)"
            problems.append(
                (where,
                 f"route_prefix {prefix!r}{default} is used twice "
                 f"(applications[{prefixes[prefix]}] has it too)")
            )
        else:
            prefixes[prefix] = index
    return problems


def _route_prefix_problem(prefix: object) -> str | None:
    """Serve's own rules for a route prefix (ray.serve.schema)."""
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        return "must start with '/'"
    if len(prefix) > 1 and prefix.endswith("/"):
        return "must not end with '/' (unless it is just '/')"
    if "{" in prefix or "}" in prefix:
        return "cannot contain '{' or '}' (no wildcards)"
    return None


def _configmap(document: YamlDocument, manifest: dict[str, Any]) -> list[Diagnostic]:
    problems: list[Diagnostic] = []
    for section in ("data", "binaryData"):
        values = manifest.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            problems.append(
                Diagnostic(document.locate((section,)), f"{section} must be a mapping")
            )
            continue
        for name, value in values.items():
            if not isinstance(value, str):
                problems.append(
                    Diagnostic(
                        document.locate((section, name)),
                        f"{section}.{name} must be a string; quote the value",
                    )
                )
    return problems
