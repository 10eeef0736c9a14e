"""Helm charts of a revision: which are rendered, what a render reads, and where a finding about
a rendered object belongs (issue 32). Pure: the ``helm template`` process is run by a runner the
caller passes in (``gitray.render.helm.run``).

Which charts are rendered: those gitray.yaml's ``helm:`` entries name, one render per entry
(``chart``: the chart's directory, ``release``, ``namespace`` (default: ``defaultNamespace``),
``values``: values files in order), e.g. one entry per environment. A directory holding a
``Chart.yaml`` belongs to Helm: its files (and its subdirectories') are read only through
``helm template``, never as plain manifests; so are the values files the entries name. A chart
no entry names is not rendered (a warning says so).

What a render reads: the chart directory's files and the entry's values files. Refused before
anything runs: paths leaving the revision (``..``, absolute), a missing chart or values file,
and dependencies not vendored into the chart's ``charts/`` (no repository or OCI pulls).

A rendered object without ``metadata.namespace`` belongs to the release namespace, as with
``helm install``. Findings about a rendered object name the template it came from (helm's
``# Source:`` comments): "rendered from charts/x/templates/rayservice.yaml by helm template x";
one about a line a values file printed is placed at that values line (gitray.plans.helmvalues:
"rendered through <template> by helm template x"); a ``helm template`` error naming a template
line is placed at that line. A rendered workload's plan says what it was rendered from ("rendered
from charts/x with environments/prod.yaml") and which values line a changed field reads.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from gitray.core.config import CONFIG_FILE, Config, HelmRelease
from gitray.core.model import Diagnostic, Origin, SourceLocation, ValueLine, Workload
from gitray.core.snapshot import RepoFile
from gitray.parsing.globs import matches_any
from gitray.parsing.text import decode_text
from gitray.parsing.yamlsafe import parse_documents
from gitray.plans.helmvalues import load_values, match_line, template_lines

__all__ = [
    "CHART_FILE",
    "HelmRunner",
    "RenderedChart",
    "at_templates",
    "chart_dirs",
    "map_diagnostic",
    "owned_by_helm",
    "render_charts",
    "source_of",
    "sources",
]

# (files by path under a fresh directory, chart directory, release, namespace, values files)
# -> (output, None) or (None, a one-line reason); gitray.render.helm.run is the real one
HelmRunner = Callable[[Mapping[str, bytes], str, str, str, Sequence[str]],
                      tuple[str | None, str | None]]

CHART_FILE = "Chart.yaml"
_SOURCE = re.compile(r"^# Source: (\S.*?)\s*$", re.M)


def chart_dirs(files: Sequence[RepoFile]) -> list[str]:
    """Directories holding a Chart.yaml (vendored subcharts included), sorted."""
    return sorted({posixpath.dirname(f.path) for f in files
                   if posixpath.basename(f.path) == CHART_FILE})


def _under(path: str, directory: str) -> bool:
    return directory in ("", path) or path.startswith(directory + "/")


def owned_by_helm(path: str, dirs: Sequence[str] | set[str], values: set[str]) -> bool:
    """Whether a file is a render input (in a chart's directory, or a values file)."""
    return path in values or any(_under(path, d) for d in dirs)


def _inside(path: str) -> tuple[str | None, str]:
    """The normalized repository path, or (None, why) when it leaves the revision."""
    if path.startswith("/") or "\\" in path:
        return None, f"{path!r} is absolute; write it relative to the repository's top"
    joined = posixpath.normpath(path)
    if joined == ".." or joined.startswith("../"):
        return None, f"{path!r} leaves the repository; the revision must be self-contained"
    return ("" if joined == "." else joined), ""


@dataclass(frozen=True)
class RenderedChart:
    """The output of ``helm template`` for one gitray.yaml entry."""

    entry: HelmRelease
    chart: str  # normalized chart directory
    chart_name: str  # Chart.yaml's name (helm's ``# Source:`` paths start with it)
    namespace: str  # the release namespace
    text: str = ""
    values: tuple[str, ...] = ()  # the entry's values files, as repository paths

    @property
    def origin(self) -> str:
        """What plans say a workload of this render comes from."""
        chart = self.chart or "."
        if self.values:
            return f"rendered from {chart} with {', '.join(self.values)}"
        return f"rendered from {chart} with its default values"

    @property
    def virtual_path(self) -> str:
        """The path the loader reads the output under (diagnostics are mapped back)."""
        return posixpath.join(self.chart, f"({self.shown})")

    @property
    def shown(self) -> str:
        return f"helm template {self.entry.release} {self.chart or '.'} -n {self.namespace}"


def _yaml_mapping(repo_file: RepoFile | None) -> tuple[dict[str, object] | None,
                                                       list[Diagnostic]]:
    if repo_file is None or repo_file.data is None:
        return None, []
    text, undecodable = decode_text(repo_file.data, repo_file.path)
    if text is None:
        return None, [undecodable] if undecodable else []
    documents, problems = parse_documents(text, repo_file.path)
    if problems:
        return None, list(problems)
    if len(documents) != 1 or not isinstance(documents[0].value, dict):
        return {}, []
    return documents[0].value, []


def _dependency_problems(chart: str, meta: Mapping[str, object], files: Mapping[str, RepoFile],
                         where: SourceLocation) -> list[Diagnostic]:
    """Dependencies must be vendored (``charts/<dir>/Chart.yaml`` of that name): gitray pulls
    from no repository or OCI registry at plan time."""
    dependencies = meta.get("dependencies") or []
    if not isinstance(dependencies, list) or not dependencies:
        return []
    prefix = posixpath.join(chart, "charts") + "/"
    vendored: set[str] = set()
    for path, repo_file in files.items():
        rest = path[len(prefix):] if path.startswith(prefix) else ""
        if rest.count("/") == 1 and rest.endswith("/" + CHART_FILE):
            sub, _ = _yaml_mapping(repo_file)
            if sub and isinstance(sub.get("name"), str):
                vendored.add(str(sub["name"]))
    out = []
    for dependency in dependencies:
        if not isinstance(dependency, dict):
            continue
        name = str(dependency.get("name") or "?")
        if name in vendored:
            continue
        repository = str(dependency.get("repository") or "")
        origin = f" from {repository}" if repository else ""
        out.append(Diagnostic(where, (
            f"dependency {name}{origin} refused: it is not vendored into {prefix} (gitray pulls "
            "from no chart repository or OCI registry; run helm dependency build and commit "
            "the unpacked chart)")))
    return out


def _render(entry: HelmRelease, where: SourceLocation, config: Config,
            files: Mapping[str, RepoFile], helm: HelmRunner | None
            ) -> tuple[RenderedChart | None, list[Diagnostic]]:
    """The checks (also without a runner: a hostile entry is refused everywhere), then the
    render."""
    chart, why = _inside(entry.chart)
    if chart is None:
        return None, [Diagnostic(where, f"helm chart {why}")]
    chart_file = files.get(posixpath.join(chart, CHART_FILE))
    if chart_file is None:
        return None, [Diagnostic(where, f"helm chart {entry.chart!r}: no {CHART_FILE} in that "
                                 "directory of the revision")]
    meta, problems = _yaml_mapping(chart_file)
    if problems:
        return None, problems
    if meta is None or not isinstance(meta.get("name"), str):
        return None, [Diagnostic(SourceLocation(chart_file.path),
                                 "a Chart.yaml must be one YAML mapping with a name")]
    out = _dependency_problems(chart, meta, files, where)
    values: list[str] = []
    for path in entry.values:
        resolved, why_not = _inside(path)
        if resolved is None:
            out.append(Diagnostic(where, f"helm values file {why_not}"))
            continue
        found = files.get(resolved)
        if found is None:
            out.append(Diagnostic(where, f"helm values file {path!r} is not in the revision "
                                  "(values files are *.yaml or *.yml)"))
            continue
        _, problems = _yaml_mapping(found)
        out += problems  # at the values file's line
        values.append(resolved)
    if out:
        return None, out
    if helm is None:
        return None, [Diagnostic(where, "helm rendering is not available here")]
    inputs = {p: f.data for p, f in files.items() if f.data is not None
              and (_under(p, chart) or p in values)}
    namespace = entry.namespace or config.default_namespace
    text, failure = helm(inputs, chart, entry.release, namespace, values)
    rendered = RenderedChart(entry, chart, str(meta["name"]), namespace, text or "",
                             tuple(values))
    if text is None:
        return None, [_error_at(rendered, failure or "failed", where)]
    return rendered, []


_TEMPLATE_LINE = re.compile(
    r"(?<![\w./-])([\w.-]+/[^\s:()\"]+\.(?:ya?ml|tpl|txt)):(\d+)(?::(\d+))?")


def _error_at(rendered: RenderedChart, why: str, where: SourceLocation) -> Diagnostic:
    """A ``helm template`` error, at the template line it names (else at the entry)."""
    for match in _TEMPLATE_LINE.finditer(why):
        path = _repo_path(rendered, match.group(1))
        if path is not None:
            line, col = int(match.group(2)), int(match.group(3) or 1)
            return Diagnostic(SourceLocation(path, max(line, 1), max(col, 1)), why)
    return Diagnostic(where, why)


def _repo_path(rendered: RenderedChart, source: str) -> str | None:
    """A ``# Source:`` path (``<chart name>/templates/x.yaml``) as a repository path."""
    head, _, rest = source.partition("/")
    if head != rendered.chart_name or not rest:
        return None
    return posixpath.join(rendered.chart, rest) if rendered.chart else rest


def sources(rendered: RenderedChart) -> list[tuple[int, str]]:
    """(line, repository path of the template) of every ``# Source:`` comment, in order."""
    out = []
    for match in _SOURCE.finditer(rendered.text):
        path = _repo_path(rendered, match.group(1))
        if path is not None:
            out.append((rendered.text.count("\n", 0, match.start()) + 1, path))
    return out


def source_of(rendered: RenderedChart, line: int,
              known: list[tuple[int, str]] | None = None) -> str | None:
    """The template the rendered line came from (the last ``# Source:`` at or above it)."""
    found = None
    for at, path in known if known is not None else sources(rendered):
        if at > line:
            break
        found = path
    return found


def map_diagnostic(rendered: RenderedChart, diagnostic: Diagnostic,
                   known: list[tuple[int, str]] | None = None,
                   lines: Callable[[str], Sequence[ValueLine]] | None = None) -> Diagnostic:
    """A finding at a line of the rendered output, moved to the values-file line it comes
    from (``lines``: a template's lines that print values, gitray.plans.helmvalues), else to
    the template it came from."""
    template = source_of(rendered, diagnostic.location.line, known)
    if template is None:
        return Diagnostic(SourceLocation(posixpath.join(rendered.chart, CHART_FILE)),
                          f"{diagnostic.message} (rendered by {rendered.shown})")
    output = rendered.text.splitlines()
    line = diagnostic.location.line
    printed = match_line(output[line - 1], lines(template)) if lines and \
        0 < line <= len(output) else []
    if printed and f"unknown field {printed[0].key!r}" in diagnostic.message:
        # the template's key is wrong, not the value: at the template line when only one
        at = printed[0].template if len(printed) == 1 else SourceLocation(template)
        return Diagnostic(at, f"{diagnostic.message} (rendered from {template} by "
                          f"{rendered.shown})")
    if printed:  # at the values line; the template line when only one printed it
        values = printed[0].values
        also = f"also reads {', '.join(str(v) for v in values[1:])}; " if values[1:] else ""
        through = str(printed[0].template) if len(printed) == 1 else template
        return Diagnostic(values[0], (f"{diagnostic.message} ({also}rendered through "
                                      f"{through} by {rendered.shown})"))
    return Diagnostic(SourceLocation(template),
                      f"{diagnostic.message} (rendered from {template} by {rendered.shown})")


def _entry_locations(files: Mapping[str, RepoFile], count: int) -> list[SourceLocation]:
    config_file = files.get(CONFIG_FILE)
    text = None
    if config_file is not None and config_file.data is not None:
        text, _ = decode_text(config_file.data, CONFIG_FILE)
    documents, problems = parse_documents(text, CONFIG_FILE) if text else ([], [])
    if problems or not documents:
        return [SourceLocation(CONFIG_FILE)] * count
    return [documents[0].locate(("helm", i)) for i in range(count)]


def render_charts(files: Mapping[str, RepoFile], config: Config, helm: HelmRunner | None,
                 diagnostics: list[Diagnostic], warnings: list[Diagnostic]
                  ) -> dict[str, RenderedChart]:
    """The output of every ``helm:`` entry whose chart ``paths``/``exclude`` select, by the
    path the loader reads it under; charts no entry names are reported as warnings."""
    out: dict[str, RenderedChart] = {}
    said: set[str] = set()
    named: set[str] = set()
    for entry, where in zip(config.helm, _entry_locations(files, len(config.helm)), strict=True):
        chart, _ = _inside(entry.chart)
        if chart is not None:
            named.add(chart)
            chart_path = posixpath.join(chart, CHART_FILE)
            if not matches_any(chart_path, config.paths) or matches_any(chart_path,
                                                                        config.exclude):
                continue
        found, problems = _render(entry, where, config, files, helm)
        # the same message for every entry (helm missing) is said once, at the first
        diagnostics.extend(p for p in problems if p.message not in said)
        said.update(p.message for p in problems)
        if found is not None and found.virtual_path in out:
            diagnostics.append(Diagnostic(where, f"the same release as an earlier entry "
                                          f"({found.shown}); remove one"))
        elif found is not None:
            out[found.virtual_path] = found
    dirs = chart_dirs(list(files.values()))
    for d in dirs:
        inside_another = any(o != d and _under(d, o) for o in dirs)
        chart_path = posixpath.join(d, CHART_FILE)
        selected = matches_any(chart_path, config.paths) and not matches_any(chart_path,
                                                                             config.exclude)
        if d not in named and not inside_another and selected:
            warnings.append(Diagnostic(SourceLocation(posixpath.join(d, CHART_FILE)), (
                "a Helm chart no gitray.yaml helm entry names: not rendered (add one: "
                f"helm: [{{chart: {d or '.'}, release: NAME}}])")))
    return out


def at_templates(charts: Mapping[str, RenderedChart], files: Mapping[str, RepoFile],
                 workloads: list[Workload], diagnostics: list[Diagnostic],
                 warnings: list[Diagnostic]
                 ) -> tuple[list[Workload], list[Diagnostic], list[Diagnostic]]:
    """Findings about rendered objects moved to the values-file lines or templates they came
    from; a rendered workload's source is its template, its origin the chart and values files
    it was rendered with (plans say so, and which values line a changed field comes from)."""
    known = {path: sources(chart) for path, chart in charts.items()}
    values = {path: load_values(c.chart, c.values, files) for path, c in charts.items()}
    memo: dict[tuple[str, str], list[ValueLine]] = {}

    def lines_of(path: str) -> Callable[[str], list[ValueLine]]:
        own = posixpath.join(charts[path].chart, "templates") + "/"

        def lines(template: str) -> list[ValueLine]:
            if (path, template) not in memo:  # a subchart's templates read other values
                found = files.get(template)
                text = decode_text(found.data, template)[0] if found and found.data else None
                memo[path, template] = template_lines(template, text, values[path]) \
                    if text is not None and template.startswith(own) else []
            return memo[path, template]
        return lines

    def moved(found: list[Diagnostic]) -> list[Diagnostic]:
        return [map_diagnostic(charts[d.location.path], d, known[d.location.path],
                               lines_of(d.location.path))
                if d.location.path in charts else d for d in found]

    placed = []
    for w in workloads:
        chart = charts.get(w.source.path)
        if chart is None:
            placed.append(w)
            continue
        template = source_of(chart, w.source.line, known[w.source.path])
        lines = tuple(lines_of(w.source.path)(template)) if template else ()
        placed.append(replace(w, source=SourceLocation(template or w.source.path),
                              origin=Origin(chart.origin, lines)))
    return placed, moved(diagnostics), moved(warnings)
