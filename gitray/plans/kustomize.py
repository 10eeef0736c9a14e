"""Kustomize overlays: which kustomizations are rendered, what a render reads, and where a
finding about a rendered object belongs (issue 32). Pure: the ``kustomize build`` process is run
by a runner the caller passes in (``gitray.render.kustomize.run``).

Which kustomizations are rendered: every ``kustomization.yaml`` (or ``.yml``) of the revision
that no other kustomization references through ``resources``, ``bases`` or ``components`` (a
*root*; e.g. ``overlays/staging`` and ``overlays/prod``, never the ``base`` they share). A
directory holding a kustomization belongs to Kustomize: its YAML files (and its
subdirectories') are read only through ``kustomize build``, never as plain manifests.

What a render reads: the files under the directories of the root's tree (the kustomization
directories it reaches), each kustomization given ``buildMetadata: [originAnnotations,
transformerAnnotations]`` so every object says which file it came from and which
kustomizations patched it (those annotations are removed again before gitray reads the
objects). Refused before anything runs: remote bases (URLs), references leaving the revision,
plugins (``generators``/``transformers``/``validators``) and ``helmCharts``.

Findings about a rendered object are placed at the line of the last patch that sets the field,
else at the origin file's line for it (its nearest written ancestor), else at the file only
("rendered from ..."); every message says which render it is about.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitray.core.model import Diagnostic, SourceLocation
from gitray.core.snapshot import RepoFile
from gitray.parsing.text import JsonPath, decode_text
from gitray.parsing.yamlsafe import YamlDocument, parse_documents

__all__ = [
    "KUSTOMIZATION_NAMES",
    "RENDERED_NAME",
    "Kustomization",
    "Rendered",
    "Runner",
    "find_kustomizations",
    "kustomize_dirs",
    "map_location",
    "owned_by_kustomize",
    "render_root",
    "roots",
    "tree",
    "unreached",
]

# (files by path under a fresh directory, the directory to build) -> (output, None) or
# (None, a one-line reason); gitray.render.kustomize.run is the real one
Runner = Callable[[Mapping[str, bytes], str], tuple[str | None, str | None]]

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml")
ORIGIN = "config.kubernetes.io/origin"
TRANSFORMATIONS = "alpha.config.kubernetes.io/transformations"
RENDERED_NAME = "(kustomize build)"
MAX_NESTING = 50  # levels of kustomizations one render may go through
_REFS = ("resources", "bases", "components")
_PATCH_FIELDS = ("patches", "patchesStrategicMerge", "patchesJson6902")
_REFUSED_FIELDS = {
    "generators": "generator plugins are off",
    "transformers": "transformer plugins are off",
    "validators": "validator plugins are off",
    "helmCharts": "Helm charts inside kustomizations are off",
    "helmChartInflationGenerator": "Helm charts inside kustomizations are off",
}
_REMOTE = re.compile(r"^([a-z][a-z0-9+.-]*://|git@|github\.com/|gitlab\.com/|bitbucket\.org/)",
                     re.I)



@dataclass(frozen=True)
class Kustomization:
    """One kustomization file, as far as gitray needs it."""

    path: str  # e.g. "overlays/prod/kustomization.yaml"
    refs: tuple[str, ...] = ()  # repository directories (or files) it references
    patches: tuple[str, ...] = ()  # repository paths of its patch files
    problems: tuple[Diagnostic, ...] = ()
    value: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def dir(self) -> str:
        return posixpath.dirname(self.path)


def is_kustomization(path: str) -> bool:
    return posixpath.basename(path) in KUSTOMIZATION_NAMES


def kustomize_dirs(files: Sequence[RepoFile]) -> list[str]:
    return sorted({posixpath.dirname(f.path) for f in files if is_kustomization(f.path)})


def _ancestors(path: str) -> Iterator[str]:
    """The directories a file is in, nearest first, "" (the top) last."""
    d = posixpath.dirname(path)
    while d:
        yield d
        d = posixpath.dirname(d)
    yield ""


def owned_by_kustomize(path: str, dirs: Collection[str]) -> bool:
    """Whether a file is a render input (under a kustomization's directory)."""
    wanted = dirs if isinstance(dirs, (set, frozenset)) else set(dirs)
    return any(d in wanted for d in _ancestors(path))


def find_kustomizations(files: Sequence[RepoFile]) -> dict[str, Kustomization]:
    """Every kustomization of the revision by directory, its references resolved and checked."""
    found: dict[str, Kustomization] = {}
    for repo_file in sorted(files, key=lambda f: f.path):
        if is_kustomization(repo_file.path):
            k = _read(repo_file)
            found.setdefault(k.dir, k)
    return found


def _read(repo_file: RepoFile) -> Kustomization:
    path = repo_file.path
    if repo_file.data is None:
        return Kustomization(path, problems=(Diagnostic(SourceLocation(path), "not read: "
                                                        f"{repo_file.problem or 'unreadable'}"),))
    text, undecodable = decode_text(repo_file.data, path)
    if text is None:
        return Kustomization(path, problems=(undecodable or Diagnostic(SourceLocation(path),
                                                                       "not text"),))
    documents, problems = parse_documents(text, path)
    if problems:
        return Kustomization(path, problems=tuple(problems))
    if len(documents) != 1 or not isinstance(documents[0].value, dict):
        return Kustomization(path, problems=(Diagnostic(
            SourceLocation(path), "a kustomization must be one YAML mapping"),))
    document = documents[0]
    value: dict[str, Any] = document.value
    here = posixpath.dirname(path)
    refs: list[str] = []
    patches: list[str] = []
    out: list[Diagnostic] = []
    for name, why in _REFUSED_FIELDS.items():
        if name in value:
            out.append(Diagnostic(document.locate((name,)), f"{name}: refused: {why} "
                                  "(gitray renders with plain kustomize build)"))
    for name in _REFS:
        entries = value.get(name) or []
        if not isinstance(entries, list):
            out.append(Diagnostic(document.locate((name,)), f"{name} must be a list of paths"))
            continue
        for index, entry in enumerate(entries):
            where = document.locate((name, index))
            resolved, why = _resolve(here, entry)
            if resolved is None:
                out.append(Diagnostic(where, f"{name}[{index}]: {why}"))
            else:
                refs.append(resolved)
    for name in _PATCH_FIELDS:
        entries = value.get(name) or []
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            target = entry.get("path") if isinstance(entry, dict) else entry
            if isinstance(target, str) and "\n" not in target:
                resolved, why = _resolve(here, target)
                if resolved is None:
                    out.append(Diagnostic(document.locate((name, index)),
                                          f"{name}[{index}]: {why}"))
                else:
                    patches.append(resolved)
    return Kustomization(path, tuple(refs), tuple(patches), tuple(out), value)


def _resolve(here: str, entry: object) -> tuple[str | None, str]:
    if not isinstance(entry, str) or not entry.strip():
        return None, "must be a path"
    if _REMOTE.match(entry) or "?ref=" in entry:
        return None, (f"remote base {entry!r} refused: a revision must be self-contained "
                      "(vendor it into the repository)")
    if entry.startswith("/") or "\\" in entry:
        return None, f"{entry!r} is absolute; write it relative to the kustomization"
    joined = posixpath.normpath(posixpath.join(here, entry))
    if joined == ".." or joined.startswith("../"):
        return None, f"{entry!r} leaves the repository; the revision must be self-contained"
    return ("" if joined == "." else joined), ""


def roots(found: Mapping[str, Kustomization]) -> list[str]:
    """Directories of the kustomizations no other one references, sorted."""
    referenced = {r for k in found.values() for r in k.refs}
    return sorted(d for d in found if d not in referenced)


def tree(root: str, found: Mapping[str, Kustomization]) -> list[str]:
    """The kustomization directories ``root`` reaches (itself first), each once."""
    seen: dict[str, None] = {}  # ordered
    todo = [root]
    while todo:
        d = todo.pop()
        if d in seen or d not in found:
            continue
        seen[d] = None
        todo += [r for r in found[d].refs if r in found]
    return list(seen)


def cycle(root: str, found: Mapping[str, Kustomization]) -> list[str]:
    """The first cycle of references reachable from ``root`` (directories), or [] (an
    iterative walk: a hostile chain of thousands of kustomizations costs no recursion)."""
    if root not in found:
        return []
    path, on_path, done = [root], {root}, set()
    stack = [iter(found[root].refs)]
    while stack:
        ref = next(stack[-1], None)
        if ref is None:
            stack.pop()
            done.add(path[-1])
            on_path.discard(path.pop())
            continue
        if ref in on_path:
            return [d or "." for d in [*path[path.index(ref):], ref]]
        if ref in done or ref not in found:
            continue
        path.append(ref)
        on_path.add(ref)
        stack.append(iter(found[ref].refs))
    return []


def depth(root: str, found: Mapping[str, Kustomization]) -> int:
    """How many kustomizations deep ``root``'s references go (after ``cycle`` found none)."""
    memo: dict[str, int] = {}
    order = tree(root, found)
    for d in reversed(order):  # a DAG walked from its leaves; unknown ones count as 0
        memo[d] = 1 + max((memo.get(r, 0) for r in found[d].refs), default=0)
    for _ in range(MAX_NESTING + 2):  # settle what tree()'s order left; each pass adds a level
        changed = False
        for d in order:
            value = 1 + max((memo.get(r, 0) for r in found[d].refs), default=0)
            if value != memo[d]:
                memo[d], changed = value, True
        if not changed:
            break
    return memo.get(root, 0)


def unreached(found: Mapping[str, Kustomization]) -> list[str]:
    """Kustomizations no root reaches (they only reference each other in a cycle)."""
    reached = {d for r in roots(found) for d in tree(r, found)}
    return sorted(d for d in found if d not in reached)


def inputs(root: str, found: Mapping[str, Kustomization],
           files: Sequence[RepoFile]) -> list[RepoFile]:
    """The files a root's render may read: those under the directories of its tree."""
    dirs = set(tree(root, found))
    return [f for f in files if owned_by_kustomize(f.path, dirs)]


@dataclass(frozen=True)
class RenderedObject:
    """One object of a render: where it came from (repository paths)."""

    origin: str | None  # the file Kustomize read it from
    patches: tuple[str, ...]  # patch files of the kustomizations that transformed it


@dataclass(frozen=True)
class Rendered:
    """The output of ``kustomize build`` of one root, or the problems that stopped it."""

    root: str  # directory
    kustomization: str  # its kustomization file
    text: str = ""  # the objects as YAML documents, gitray's annotations removed
    objects: tuple[RenderedObject, ...] = ()  # per document of ``text``
    problems: tuple[Diagnostic, ...] = ()

    @property
    def virtual_path(self) -> str:
        """The path the loader reads the output under (diagnostics are mapped back)."""
        return posixpath.join(self.root, RENDERED_NAME)


def render_root(root: str, found: Mapping[str, Kustomization], files: Sequence[RepoFile],
                run: Runner) -> Rendered:
    """The objects of ``kustomize build`` of one root, or the problems that stop it."""
    k = found[root]
    where = SourceLocation(k.path)
    problems = [p for d in tree(root, found) for p in found[d].problems]
    loop = cycle(root, found)
    if loop:
        problems.append(Diagnostic(where, "kustomization cycle: " + " -> ".join(loop)
                                   + "; a kustomization cannot include itself"))
    elif depth(root, found) > MAX_NESTING:
        problems.append(Diagnostic(where, f"kustomizations nest more than {MAX_NESTING} "
                                   "levels deep from here; gitray refuses to render it"))
    if problems:
        return Rendered(root, k.path, problems=tuple(problems))
    given: dict[str, bytes] = {}
    for f in inputs(root, found, files):
        if f.data is None:
            continue  # a refused file (e.g. a symlink out): kustomize says it is missing
        owner = found.get(posixpath.dirname(f.path))
        given[f.path] = (_with_build_metadata(owner.value)
                         if owner is not None and owner.path == f.path else f.data)
    output, why = run(given, root)
    if output is None:
        return Rendered(root, k.path, problems=(Diagnostic(where, why or "kustomize failed"),))
    return _annotated(root, found, output, where)


def _with_build_metadata(value: Mapping[str, Any]) -> bytes:
    out = dict(value)
    wanted = ["originAnnotations", "transformerAnnotations"]
    have = out.get("buildMetadata")
    out["buildMetadata"] = sorted(set(wanted) | set(have if isinstance(have, list) else []))
    return json.dumps(out).encode()


def _annotated(root: str, found: Mapping[str, Kustomization], text: str,
               where: SourceLocation) -> Rendered:
    """The rendered documents without the build metadata, with their sources noted."""
    documents, problems = parse_documents(text, f"{root or '.'} (kustomize build)")
    if problems:
        return Rendered(root, found[root].path, problems=(
            Diagnostic(where, f"kustomize output not read: {problems[0].message}"),))
    objects: list[RenderedObject] = []
    values: list[Any] = []
    for document in documents:
        value = document.value
        meta = value.get("metadata") if isinstance(value, dict) else None
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        origin: str | None = None
        patches: list[str] = []
        if isinstance(annotations, dict):
            origin = _origin(root, annotations.pop(ORIGIN, None))
            patches = _patches(root, found, annotations.pop(TRANSFORMATIONS, None))
            if not annotations:
                del meta["annotations"]  # type: ignore[union-attr]
        objects.append(RenderedObject(origin, tuple(patches)))
        values.append(value)
    body = "".join("---\n" + json.dumps(v, indent=1) + "\n" for v in values)
    return Rendered(root, found[root].path, body, tuple(objects))


def _small_yaml(text: object) -> dict[str, Any]:
    if not isinstance(text, str):
        return {}
    docs, problems = parse_documents(text, "annotation")
    if problems or not docs or not isinstance(docs[0].value, dict):
        return {}
    return dict(docs[0].value)


def _origin(root: str, text: object) -> str | None:
    path = _small_yaml(text).get("path")
    if not isinstance(path, str):
        return None
    return posixpath.normpath(posixpath.join(root, path))


def _patches(root: str, found: Mapping[str, Kustomization], text: object) -> list[str]:
    if not isinstance(text, str):
        return []
    docs, problems = parse_documents(text, "annotation")
    if problems or not docs or not isinstance(docs[0].value, list):
        return []
    out: list[str] = []
    for step in docs[0].value:
        if not isinstance(step, dict) or "Patch" not in str(
                (step.get("configuredBy") or {}).get("kind", "")):
            continue
        configured_in = step.get("configuredIn")
        if isinstance(configured_in, str):
            k = found.get(posixpath.dirname(posixpath.normpath(posixpath.join(root,
                                                                              configured_in))))
            if k is not None:
                out += [p for p in k.patches if p not in out]
    return out


# ---- diagnostics of rendered objects, back at their source -----------------------------------


def map_location(rendered: Rendered, document: YamlDocument | None, path: JsonPath | None,
                 files: Mapping[str, RepoFile]) -> tuple[SourceLocation, str]:
    """Where a finding about a rendered object belongs: (location, note for the message).

    The line of ``path`` in the last patch that sets it, else in the origin file (its nearest
    written ancestor); only the file when neither has the object (e.g. a generated one).
    """
    index = document.index if document is not None else -1
    obj = rendered.objects[index] if 0 <= index < len(rendered.objects) else None
    note = f"rendered by kustomize build {rendered.root or '.'}"
    if obj is None or obj.origin is None:
        return SourceLocation(rendered.kustomization), note
    value = document.value if document is not None else None
    for candidate in reversed(obj.patches):
        found = _same_object(files.get(candidate), value)
        if found is not None and path is not None and tuple(path) in found.locations:
            return found.locations[tuple(path)], f"{note}, patch {candidate}"
    found = _same_object(files.get(obj.origin), value)
    if found is not None:
        return (found.locate(path or ()), note)
    return SourceLocation(obj.origin), f"{note}; rendered from {obj.origin}"


def _same_object(repo_file: RepoFile | None, value: object) -> YamlDocument | None:
    if repo_file is None or repo_file.data is None or not isinstance(value, dict):
        return None
    text, _ = decode_text(repo_file.data, repo_file.path)
    if text is None:
        return None
    documents, problems = parse_documents(text, repo_file.path)
    if problems:
        return None
    kind = value.get("kind")
    same_kind = [d for d in documents if isinstance(d.value, dict) and d.value.get("kind") == kind]
    name = (value.get("metadata") or {}).get("name")
    named = [d for d in same_kind if ((d.value.get("metadata") or {}).get("name")) == name]
    if named:
        return named[0]
    return same_kind[0] if len(same_kind) == 1 else None


def map_diagnostic(rendered: Rendered, diagnostic: Diagnostic,
                   files: Mapping[str, RepoFile]) -> Diagnostic:
    """A finding at a line of the rendered output, moved to its source (``map_location``)."""
    documents, _ = parse_documents(rendered.text, rendered.virtual_path)
    at = diagnostic.location
    document = None
    for candidate in documents:
        if (candidate.start.line, candidate.start.col) <= (at.line, at.col):
            document = candidate
    path: JsonPath | None = None
    if document is not None:
        best: tuple[int, int] = (0, 0)
        for json_path, location in document.locations.items():
            here = (location.line, location.col)
            if here <= (at.line, at.col) and (here > best or (here == best and path is not None
                                                              and len(json_path) > len(path))):
                best, path = here, json_path
    location, note = map_location(rendered, document, path, files)
    return Diagnostic(location, f"{diagnostic.message} ({note})")
