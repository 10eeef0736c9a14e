"""``serveConfigV2`` kept in a file of the repository (issue 32). Pure, no I/O.

A RayService names the file with the annotation ``gitray.io/serve-config-file``: a path
relative to the manifest's own directory (``../`` allowed while it stays inside the revision),
of a ``.yaml`` or ``.yml`` file of the same revision. The loader puts the file's text in
``spec.serveConfigV2`` before any check, so the file is judged by exactly the checks an inline
``serveConfigV2`` gets (Ray Serve's schema and validators, ``gitray.plans.rules``), with each
problem at that file's own line; and a change of the file is a change of ``serveConfigV2``:
a Serve-only change in the plan. Such a file is a Serve config, not a manifest: the loader does
not read it as manifests. Refused: an absolute path, a path leaving the revision, a symlink to
outside it (the source layer refuses those), a file that is missing or not YAML by name, and a
manifest setting both the annotation and an inline ``spec.serveConfigV2``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gitray.core.model import Diagnostic, SourceLocation
from gitray.core.snapshot import RepoFile, is_manifest_name
from gitray.parsing.text import decode_text
from gitray.parsing.yamlsafe import YamlDocument

__all__ = ["ANN_SERVE_CONFIG_FILE", "ServeFile", "resolve_serve_file", "with_serve_file"]

ANN_SERVE_CONFIG_FILE = "gitray.io/serve-config-file"
_ANNOTATION_PATH = ("metadata", "annotations", ANN_SERVE_CONFIG_FILE)


@dataclass(frozen=True)
class ServeFile:
    """What a manifest's annotation resolved to (``path`` None when it could not be)."""

    path: str | None
    problems: tuple[Diagnostic, ...] = ()


def resolve_serve_file(manifest_path: str, value: object) -> tuple[str | None, str | None]:
    """``(repository path, None)`` or ``(None, why it is refused)`` for an annotation value."""
    if not isinstance(value, str) or not value.strip():
        return None, "must be a non-empty path relative to this manifest's directory"
    if value.startswith("/") or "\\" in value or posixpath.isabs(value):
        return None, f"{value!r} is absolute; name the file relative to this manifest's directory"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return None, "contains control characters"
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(manifest_path), value))
    if joined == ".." or joined.startswith("../") or joined in (".", ""):
        return None, f"{value!r} leaves the repository; the file must be part of the revision"
    if not is_manifest_name(joined):
        return None, f"{value!r} must be a .yaml or .yml file"
    return joined, None


def with_serve_file(document: YamlDocument, files: Mapping[str, RepoFile]
                    ) -> tuple[YamlDocument, ServeFile | None]:
    """``document`` with ``spec.serveConfigV2`` read from the file its annotation names.

    Returns the document unchanged and None when there is no annotation; with problems, the
    document unchanged (the problems stop the revision).
    """
    value = document.value
    meta = value.get("metadata") if isinstance(value, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or ANN_SERVE_CONFIG_FILE not in annotations:
        return document, None
    where = document.locate(_ANNOTATION_PATH)
    label = f"metadata.annotations[{ANN_SERVE_CONFIG_FILE}]"

    def refused(message: str, path: str | None = None) -> tuple[YamlDocument, ServeFile]:
        return document, ServeFile(path, (Diagnostic(where, f"{label}: {message}"),))

    path, why = resolve_serve_file(document.start.path, annotations[ANN_SERVE_CONFIG_FILE])
    if path is None:
        return refused(why or "refused")
    spec = value.get("spec")
    if isinstance(spec, dict) and "serveConfigV2" in spec:
        return refused("this manifest also sets spec.serveConfigV2; keep the Serve config in "
                       "one place (remove one of them)", path)
    found = files.get(path)
    if found is None:
        return refused(f"no file {path} in this revision", path)
    if found.data is None:
        return refused(f"{path} not read: {found.problem or 'it could not be read'}", path)
    text, undecodable = decode_text(found.data, path)
    if text is None:
        problem = undecodable or Diagnostic(SourceLocation(path), "not readable as text")
        return document, ServeFile(path, (problem,))
    new_value: dict[str, Any] = dict(value)
    new_spec = dict(spec) if isinstance(spec, dict) else {}
    new_spec["serveConfigV2"] = text
    new_value["spec"] = new_spec
    return replace(document, value=new_value), ServeFile(path)
