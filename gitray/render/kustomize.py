"""``kustomize build`` run on a revision's files (the runner of ``gitray.plans.kustomize``).

The binary: ``$GITRAY_KUSTOMIZE``, else ``kustomize`` (v5) on PATH. ``kustomize build`` runs
with the default root-only load restrictor, no plugins, no exec functions, no Helm, a minimal
environment (no credentials), bounded and memoized as ``gitray.render.bounded`` says: a
revision whose render inputs are unchanged is not rendered again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from gitray.render.bounded import Memo, Rendered, RenderLimits, binary, digest, render, write_tree

__all__ = ["RENDERS", "RenderLimits", "kustomize_binary", "run", "runner"]

MISSING = ("kustomize is not installed: put kustomize v5 on PATH or set GITRAY_KUSTOMIZE to "
           "render this kustomization")

_MEMO = Memo()
RENDERS = [0]  # kustomize processes started (tests and benchmarks read it)


def kustomize_binary() -> str | None:
    return binary("GITRAY_KUSTOMIZE", "kustomize")


def runner(limits: RenderLimits | None = None
           ) -> Callable[[Mapping[str, bytes], str], Rendered]:
    """``run`` with other limits (tests of hostile inputs use short ones)."""
    return lambda files, root: run(files, root, limits)


def run(files: Mapping[str, bytes], root: str, limits: RenderLimits | None = None) -> Rendered:
    """``(output, None)`` of ``kustomize build <root>`` over ``files``, or ``(None, why)``."""
    limits = limits or RenderLimits()
    program = kustomize_binary()
    if program is None:
        return None, MISSING
    return _MEMO.get_or(digest(files, program, (root,), limits),
                        lambda: _build(files, root, program, limits))


def _build(files: Mapping[str, bytes], root: str, program: str,
           limits: RenderLimits) -> Rendered:
    shown = root or "."
    with tempfile.TemporaryDirectory(prefix="gitray-kustomize-") as tmp:
        top = Path(tmp) / "r"
        write_tree(top, files)
        workdir = top / root if root else top
        workdir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "GOMAXPROCS": "2",
               "KUSTOMIZE_PLUGIN_HOME": str(Path(tmp) / "no-plugins")}
        RENDERS[0] += 1
        try:
            code, out, err, why = render(
                [program, "build", "--load-restrictor", "LoadRestrictionsRootOnly", "."],
                workdir, env, limits)
        except OSError as exc:
            return None, f"kustomize could not be started: {exc.strerror}"
        if why is not None:
            return None, f"kustomize build {shown} refused: {why}"
        if code != 0:
            return None, (f"kustomize build {shown} failed: "
                          f"{_message(err.decode('utf-8', 'replace'), str(top))}")
    return out.decode("utf-8", "replace"), None


def _message(stderr: str, top: str) -> str:
    """Kustomize's error, one line, with the temporary directory taken out of its paths."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    message = (lines[-1] if lines else "no message").removeprefix("Error: ")
    for prefix in (top + "/", top):
        message = message.replace(prefix, "")
    return message[:500]
