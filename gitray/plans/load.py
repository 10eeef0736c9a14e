"""A repository snapshot (bytes) -> validated workloads, or every problem in it. Pure, no I/O.

The caller (``gitray.git.source``) reads the files into a ``gitray.core.snapshot.Snapshot``;
this module only parses. A revision is all-or-nothing: ``LoadResult.diagnostics`` non-empty
means the revision is invalid, and then ``workloads`` is empty so nothing from it can be
applied (or pruned against) by mistake.

Limits that keep hostile repositories cheap (the source layer applies the same ones while
reading): ``MAX_FILE_BYTES`` per file, ``MAX_TOTAL_BYTES`` and ``MAX_FILES`` per revision, plus
the YAML limits of ``gitray.parsing.yamlsafe`` (nesting depth, alias expansion).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gitray.core.config import CONFIG_FILE, Config
from gitray.core.model import Diagnostic, Kind, ObjectKey, SourceLocation, Workload
from gitray.core.snapshot import (
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_TOTAL_BYTES,
    RepoFile,
    Snapshot,
    is_manifest_name,
)
from gitray.parsing.cel import rule_findings
from gitray.parsing.config import config_diagnostics
from gitray.parsing.defaults import with_defaults
from gitray.parsing.globs import matches_any
from gitray.parsing.jsonschemas import document_errors
from gitray.parsing.kuberay import KubeRaySchemas, packaged
from gitray.parsing.text import decode_text, format_path
from gitray.parsing.yamlsafe import YamlDocument, parse_documents
from gitray.parsing.yamlwalk import NodeBudget
from gitray.plans.helm import HelmRunner, at_templates, chart_dirs, owned_by_helm, render_charts
from gitray.plans.identity import check_identity, check_kind
from gitray.plans.kustomize import Runner, kustomize_dirs, owned_by_kustomize
from gitray.plans.kustomized import at_sources, render_kustomizations
from gitray.plans.rayservice.fields import refused_path
from gitray.plans.rules import (
    check_rules,
)
from gitray.plans.servefile import with_serve_file

__all__ = [
    "MAX_DIAGNOSTICS_PER_FILE",
    "MAX_TOTAL_NODES",
    "LoadMemo",
    "LoadResult",
    "load_snapshot",
]

MAX_DIAGNOSTICS_PER_FILE = 20
MAX_TOTAL_NODES = 2_500_000  # YAML values per revision: ~20,000 modest workloads
_RAY_KINDS = frozenset(k.value for k in Kind)


@dataclass(frozen=True)
class LoadResult:
    config: Config
    workloads: tuple[Workload, ...]  # Ray workloads and supporting objects, sorted by key
    diagnostics: tuple[Diagnostic, ...]  # sorted; non-empty => the revision is invalid
    warnings: tuple[Diagnostic, ...] = ()  # sorted; worth saying, never stop a revision
    kuberay: KubeRaySchemas | None = None  # the schemas the manifests were judged by


_CEL_UNEVALUATED = "CEL rule not evaluated by gitray"  # the start of such warnings


def load_snapshot(snapshot: Snapshot, overrides: Mapping[str, Any] | None = None,
                  memo: LoadMemo | None = None,
                  kuberay: KubeRaySchemas | None = None,
                  kustomize: Runner | None = None,
                  helm: HelmRunner | None = None) -> LoadResult:
    """Validate every manifest of ``snapshot`` under its gitray.yaml and ``overrides``.

    Ray workloads are judged by ``kuberay`` (the CRDs a cluster serves), else by the packaged
    schemas of the config's ``kuberayVersion``. Transition rules (CEL rules reading
    ``oldSelf``) are not run here: they need the live object (``gitray.plans.transitions``).

    With a ``memo`` from earlier loads, files whose bytes (and settings) are unchanged are not
    parsed again: a new commit costs what it changed, not the size of the repository.

    Kustomizations (``gitray.plans.kustomize``) are rendered with ``kustomize``, the runner of
    ``kustomize build`` (``gitray.render.kustomize.run``); without one, each is a problem.
    Helm charts named in gitray.yaml's ``helm:`` (``gitray.plans.helm``) are rendered with
    ``helm``, the runner of ``helm template`` (``gitray.render.helm.run``), likewise.
    """
    by_path = {f.path: f for f in snapshot.files}
    config_file = by_path.get(CONFIG_FILE)
    if config_file is not None and config_file.data is None:
        problem = config_file.problem or "it could not be read"
        diagnostic = Diagnostic(SourceLocation(CONFIG_FILE), f"not read: {problem}")
        return LoadResult(Config(), (), (diagnostic,))
    config, config_problems = config_diagnostics(
        config_file.data if config_file else None, CONFIG_FILE, overrides
    )
    if config_problems:
        return LoadResult(config, (), config_problems)
    kuberay = kuberay or packaged(config.kuberay_version)

    diagnostics: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    workloads: list[Workload] = []
    budget = NodeBudget(MAX_TOTAL_NODES)
    if memo is not None:
        memo.start()
    results: list[tuple[str, _FileResult]] = []
    kdirs = set(kustomize_dirs(snapshot.files))
    rendered = render_kustomizations(snapshot, config, kustomize, diagnostics) if kdirs else {}
    hdirs = chart_dirs(snapshot.files)
    hvalues = {v for h in config.helm for v in h.values}
    charts = render_charts(by_path, config, helm, diagnostics, warnings) \
        if hdirs or config.helm else {}
    chosen = [f for f in _selected(snapshot, config, diagnostics)
              if not owned_by_kustomize(f.path, kdirs) and not owned_by_helm(f.path, hdirs,
                                                                              hvalues)]
    chosen += [RepoFile(r.virtual_path, r.text.encode()) for r in rendered.values()]
    for repo_file in chosen:
        if budget.left < 0:
            break  # reported once, at the file that went over
        results.append((repo_file.path, _file(repo_file, config, kuberay, budget, memo, by_path)))
    for chart in charts.values():  # namespace-less objects go to the release namespace
        if budget.left < 0:
            break
        results.append((chart.virtual_path, _file(
            RepoFile(chart.virtual_path, chart.text.encode()),
            replace(config, default_namespace=chart.namespace), kuberay, budget, memo, by_path)))
    serve_files = {path for _, found in results for path, _ in found.deps}
    for path, found in results:
        if path in serve_files:
            continue  # a Serve config of a RayService (gitray.plans.servefile), not manifests
        workloads += found.workloads
        diagnostics += found.diagnostics
        warnings += found.warnings
    if rendered:
        workloads, diagnostics, warnings = at_sources(rendered, by_path, workloads,
                                                       diagnostics, warnings)
    if charts:
        workloads, diagnostics, warnings = at_templates(charts, by_path, workloads,
                                                        diagnostics, warnings)
    _check_duplicates(workloads, diagnostics)
    warnings = _once(warnings)
    if diagnostics:
        return LoadResult(config, (), _capped(diagnostics), _capped(warnings), kuberay)
    return LoadResult(config, tuple(sorted(workloads, key=lambda w: w.key)), (),
                      _capped(warnings), kuberay)


def _once(warnings: list[Diagnostic]) -> list[Diagnostic]:
    """Each CEL rule gitray cannot evaluate is reported once per load, where first met."""
    seen: set[str] = set()
    out = []
    for warning in sorted(warnings):
        if warning.message.startswith(_CEL_UNEVALUATED):
            if warning.message in seen:
                continue
            seen.add(warning.message)
        out.append(warning)
    return out


def _selected(snapshot: Snapshot, config: Config, diagnostics: list[Diagnostic]) -> list[RepoFile]:
    chosen: list[RepoFile] = []
    total = 0
    for repo_file in sorted(snapshot.files, key=lambda f: f.path):
        path = repo_file.path
        if path == CONFIG_FILE or not is_manifest_name(path):
            continue
        if not matches_any(path, config.paths) or matches_any(path, config.exclude):
            continue
        where = SourceLocation(path)
        if any(ord(c) < 32 or ord(c) == 127 for c in path):
            escaped = path.encode("unicode_escape").decode("ascii")
            diagnostics.append(
                Diagnostic(
                    SourceLocation(escaped),
                    "the file name contains control characters; rename the file",
                )
            )
            continue
        if len(chosen) >= MAX_FILES:
            diagnostics.append(
                Diagnostic(
                    where,
                    f"more than {MAX_FILES} YAML files to scan; narrow 'paths' or add "
                    "'exclude' globs in gitray.yaml (this and later files were not read)",
                )
            )
            break
        total += len(repo_file.data or b"")
        if total > MAX_TOTAL_BYTES:
            diagnostics.append(
                Diagnostic(
                    where,
                    f"the YAML files to scan exceed {_mib(MAX_TOTAL_BYTES)} in total; narrow "
                    "'paths' or add 'exclude' globs in gitray.yaml (this and later files were "
                    "not read)",
                )
            )
            break
        chosen.append(repo_file)
    return chosen


@dataclass(frozen=True)
class _FileResult:
    workloads: tuple[Workload, ...]
    diagnostics: tuple[Diagnostic, ...]
    nodes: int  # YAML values read, charged to the revision's budget
    warnings: tuple[Diagnostic, ...] = ()
    # other files the result depends on (Serve config files): (path, digest when read)
    deps: tuple[tuple[str, str], ...] = ()


_MemoKey = tuple[Config, KubeRaySchemas, str, str]


class LoadMemo:
    """Per-file results of the previous load, keyed by settings, schemas, path and the bytes'
    identity
    (Git's blob id, or the SHA-256 of files not read from Git).

    Holds only the files of the last load (each load replaces it), so it never grows past one
    revision. Results are immutable values, safe to share between revisions.
    """

    def __init__(self) -> None:
        self._last: dict[_MemoKey, _FileResult] = {}
        self._now: dict[_MemoKey, _FileResult] = {}
        self.hits = 0  # files served from the memo in the current load (logs, benchmarks)

    def start(self) -> None:
        self._last, self._now, self.hits = self._now, {}, 0

    def get(self, key: _MemoKey) -> _FileResult | None:
        found = self._last.get(key)
        if found is not None:
            self._now[key] = found
            self.hits += 1
        return found

    def put(self, key: _MemoKey, result: _FileResult) -> None:
        self._now[key] = result

    def __len__(self) -> int:
        return len(self._now)


def _digest(repo_file: RepoFile) -> str:
    """What identifies a file's bytes: Git's blob id when it came from Git (no hashing),
    else their SHA-256."""
    if repo_file.blob:
        return f"git:{repo_file.blob}"
    return hashlib.sha256(repo_file.data or b"").hexdigest()


def _file(repo_file: RepoFile, config: Config, kuberay: KubeRaySchemas, budget: NodeBudget,
          memo: LoadMemo | None, files: Mapping[str, RepoFile] | None = None) -> _FileResult:
    """The workloads and problems of one file (from the memo when its bytes are known)."""
    key = (config, kuberay, repo_file.path, _digest(repo_file)) \
        if memo is not None and repo_file.data is not None else None
    if key is not None and memo is not None:
        known = memo.get(key)
        if known is not None and not _deps_changed(known, files or {}):
            budget.left -= known.nodes
            if budget.left >= 0:
                return known
            budget.left += known.nodes  # over the budget: parse it to say where
    before = budget.left
    diagnostics: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    workloads: list[Workload] = []
    deps: list[tuple[str, str]] = []
    for document in _documents(repo_file, budget, diagnostics):
        workload = _workload(document, config, kuberay, diagnostics, warnings, files or {}, deps)
        if workload is not None:
            workloads.append(workload)
    result = _FileResult(tuple(workloads), tuple(diagnostics), before - budget.left,
                         tuple(warnings), tuple(deps))
    if key is not None and memo is not None and budget.left >= 0:
        memo.put(key, result)
    return result


def _deps_changed(known: _FileResult, files: Mapping[str, RepoFile]) -> bool:
    for path, digest in known.deps:
        found = files.get(path)
        if (_digest(found) if found is not None and found.data is not None else "") != digest:
            return True
    return False


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB".replace(".0 MiB", " MiB")


def _documents(
    repo_file: RepoFile, budget: NodeBudget, diagnostics: list[Diagnostic]
) -> list[YamlDocument]:
    where = SourceLocation(repo_file.path)
    if repo_file.data is None:
        problem = repo_file.problem or "it could not be read"
        diagnostics.append(Diagnostic(where, f"not read: {problem}"))
        return []
    if len(repo_file.data) > MAX_FILE_BYTES:
        diagnostics.append(
            Diagnostic(
                where,
                f"file is {len(repo_file.data) / (1024 * 1024):.1f} MiB, over the "
                f"{_mib(MAX_FILE_BYTES)} limit",
            )
        )
        return []
    text, undecodable = decode_text(repo_file.data, repo_file.path)
    if text is None:
        diagnostics.append(undecodable or Diagnostic(where, "not readable as text"))
        return []
    documents, problems = parse_documents(text, repo_file.path, budget)
    diagnostics.extend(problems)
    return documents


def _workload(
    document: YamlDocument, config: Config, kuberay: KubeRaySchemas,
    diagnostics: list[Diagnostic], warnings: list[Diagnostic],
    files: Mapping[str, RepoFile] | None = None, deps: list[tuple[str, str]] | None = None,
) -> Workload | None:
    value = document.value
    if not isinstance(value, dict):
        got = "a list" if isinstance(value, list) else f"a {type(value).__name__}"
        diagnostics.append(
            Diagnostic(
                document.start,
                f"a manifest must be a mapping with apiVersion, kind and metadata, not {got}",
            )
        )
        return None
    kind = check_kind(document, config, diagnostics)
    if kind is None:
        return None
    identity = check_identity(document, kind, config, diagnostics)
    serve_file = None
    if kind == Kind.RAY_SERVICE:
        document, serve_file = with_serve_file(document, files or {})
        if serve_file is not None and serve_file.path is not None and deps is not None:
            found = (files or {}).get(serve_file.path)
            deps.append((serve_file.path, _digest(found)
                         if found is not None and found.data is not None else ""))
        if serve_file is not None and serve_file.problems:
            diagnostics.extend(serve_file.problems)
            return None
    value = document.value
    problems = check_rules(kind, document, warnings,
                           serve_file.path if serve_file is not None else None)
    if kind in _RAY_KINDS:
        problems += _schema_problems(document, kind, kuberay, warnings)
    diagnostics.extend(problems)
    if identity is None or problems:
        return None
    namespace, name, wave = identity
    manifest: dict[str, Any] = json.loads(json.dumps(value))  # an independent plain tree
    manifest["metadata"]["namespace"] = namespace
    return Workload(
        key=ObjectKey(kind, namespace, name),
        api_version=value["apiVersion"],
        manifest=manifest,
        source=document.start,
        wave=wave,
    )


def _schema_problems(document: YamlDocument, kind: str, kuberay: KubeRaySchemas,
                     warnings: list[Diagnostic]) -> list[Diagnostic]:
    problems = []
    name, schema = kuberay.schema_key(kind), kuberay.schemas[kind]
    errors = list(document_errors(name, schema, document.value))
    if errors:  # judge it as the API server does: after the CRD's defaults (rarely needed)
        errors = list(document_errors(name, schema, with_defaults(schema, document.value)))
    if not errors:  # the CEL rules judge values of the right types only
        return _rule_problems(document, kind, kuberay, warnings)
    for path, message in errors:
        if path[:1] in (("apiVersion",), ("kind",), ("metadata",)) or path == (
            "spec",
            "serveConfigV2",
        ):
            continue  # reported by the loader's own, clearer checks
        if not path and "'metadata'" in message:
            continue
        if path == ("spec",) and "'rayClusterConfig' is a required" in message:
            continue  # gitray's rule says it better
        if kind == Kind.RAY_SERVICE and refused_path(path):
            continue  # refused by name (gitray.plans.rayservice.fields)
        where = document.locate(path)
        problems.append(Diagnostic(where, f"{format_path(path)}: {message}"))
    return problems


def _rule_problems(document: YamlDocument, kind: str, kuberay: KubeRaySchemas,
                   warnings: list[Diagnostic]) -> list[Diagnostic]:
    problems = []
    for finding in rule_findings(kuberay.rules[kind], document.value):
        where = document.locate(finding.path)
        if finding.evaluated:
            problems.append(Diagnostic(where, f"{format_path(finding.path)}: {finding.message}"))
        else:
            rule_at = format_path(tuple(finding.rule.path))
            warnings.append(Diagnostic(where, f"{_CEL_UNEVALUATED}: {kind} {rule_at}: "
                                       f"{finding.rule.rule!r} ({finding.message}); the API "
                                       "server will judge it at apply time"))
    return problems


def _capped(diagnostics: list[Diagnostic]) -> tuple[Diagnostic, ...]:
    """Sorted, at most ``MAX_DIAGNOSTICS_PER_FILE`` per file plus a line saying how many more."""
    out: list[Diagnostic] = []
    by_path: dict[str, list[Diagnostic]] = {}
    for diagnostic in sorted(set(diagnostics)):
        by_path.setdefault(diagnostic.location.path, []).append(diagnostic)
    for found in by_path.values():
        out += found[:MAX_DIAGNOSTICS_PER_FILE]
        if len(found) > MAX_DIAGNOSTICS_PER_FILE:
            more = len(found) - MAX_DIAGNOSTICS_PER_FILE
            out.append(
                Diagnostic(
                    found[MAX_DIAGNOSTICS_PER_FILE].location,
                    f"... and {more} more problem{'s' if more > 1 else ''} in this file",
                )
            )
    return tuple(out)


def _check_duplicates(workloads: list[Workload], diagnostics: list[Diagnostic]) -> None:
    seen: dict[ObjectKey, SourceLocation] = {}
    for workload in sorted(workloads, key=lambda w: w.source):
        first = seen.setdefault(workload.key, workload.source)
        if first is not workload.source:
            key = workload.key
            diagnostics.append(
                Diagnostic(
                    workload.source,
                    f"{key.kind} {key.namespace}/{key.name} is defined twice: here and at "
                    f"{first}",
                )
            )
