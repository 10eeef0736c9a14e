"""The loader's side of Kustomize: a revision's root kustomizations rendered (those its
``paths``/``exclude`` select) and findings about rendered objects moved to their sources. Pure:
the program is the ``Runner`` the caller passes (``gitray.render.kustomize``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gitray.core.config import Config
from gitray.core.model import Diagnostic, SourceLocation, Workload
from gitray.core.snapshot import RepoFile, Snapshot
from gitray.parsing.globs import matches_any
from gitray.plans.kustomize import (
    Rendered,
    Runner,
    find_kustomizations,
    map_diagnostic,
    render_root,
    roots,
    unreached,
)

__all__ = ["at_sources", "render_kustomizations"]


def _no_kustomize(files: Mapping[str, bytes], root: str) -> tuple[str | None, str | None]:
    return None, "kustomize rendering is not available here"


def render_kustomizations(snapshot: Snapshot, config: Config, kustomize: Runner | None,
            diagnostics: list[Diagnostic]) -> dict[str, Rendered]:
    """The output of every root kustomization that ``paths``/``exclude`` select, by the
    path the loader reads it under."""
    found = find_kustomizations(snapshot.files)
    out: dict[str, Rendered] = {}
    said: set[str] = set()
    for lost in unreached(found):
        diagnostics.append(Diagnostic(SourceLocation(found[lost].path), (
            "never rendered: every kustomization that references it is referenced in turn "
            "(a cycle of kustomizations)")))
    for root in roots(found):
        path = found[root].path
        if not matches_any(path, config.paths) or matches_any(path, config.exclude):
            continue
        result = render_root(root, found, snapshot.files, kustomize or _no_kustomize)
        if result.problems:
            # the same message for every root (kustomize missing) is said once, at the first
            diagnostics.extend(p for p in result.problems if p.message not in said)
            said.update(p.message for p in result.problems)
        else:
            out[result.virtual_path] = result
    return out


def at_sources(rendered: Mapping[str, Rendered], files: Mapping[str, RepoFile],
                workloads: list[Workload], diagnostics: list[Diagnostic],
                warnings: list[Diagnostic]
                ) -> tuple[list[Workload], list[Diagnostic], list[Diagnostic]]:
    """Findings about rendered objects moved to their sources; a rendered workload's source is
    its root kustomization (plans say which overlay a change comes from)."""
    def moved(found: list[Diagnostic]) -> list[Diagnostic]:
        return [map_diagnostic(rendered[d.location.path], d, files)
                if d.location.path in rendered else d for d in found]

    placed = [replace(w, source=SourceLocation(rendered[w.source.path].kustomization))
              if w.source.path in rendered else w for w in workloads]
    return placed, moved(diagnostics), moved(warnings)
