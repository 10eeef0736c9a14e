"""``helm template`` run on a revision's files (the runner of ``gitray.plans.helm``).

The binary: ``$GITRAY_HELM``, else ``helm`` (v3 or v4) on PATH. Not a gitray.yaml setting: a
repository must not choose which program gitray runs. The chart's files and its values files
are written to a fresh temporary directory (regular files only, so no symlink leads out of
it) and ``helm template`` runs there offline: no repository or OCI pulls (dependencies must be
vendored, checked before anything runs), no cluster, no plugins, ``HELM_*`` homes inside the
temporary directory, a minimal environment (no credentials), bounded and memoized as
``gitray.render.bounded`` says: an unchanged chart is not rendered again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gitray.render.bounded import Memo, Rendered, RenderLimits, binary, digest, render, write_tree

__all__ = ["MISSING", "RENDERS", "helm_binary", "run", "runner"]

MISSING = "helm is not installed: put helm (v3 or v4) on PATH or set GITRAY_HELM to render charts"

_MEMO = Memo()
RENDERS = [0]  # helm processes started (tests and benchmarks read it)

# (files by path under a fresh directory, chart directory, release, namespace, values files)
HelmRunner = Callable[[Mapping[str, bytes], str, str, str, Sequence[str]], Rendered]


def helm_binary() -> str | None:
    return binary("GITRAY_HELM", "helm")


def runner(limits: RenderLimits | None = None) -> HelmRunner:
    """``run`` with other limits (tests of hostile charts use short ones)."""
    return lambda files, chart, release, namespace, values: run(
        files, chart, release, namespace, values, limits)


def run(files: Mapping[str, bytes], chart: str, release: str, namespace: str,
        values: Sequence[str], limits: RenderLimits | None = None) -> Rendered:
    """``(output, None)`` of ``helm template release chart -n namespace -f values...`` over
    ``files``, or ``(None, why)`` in one line."""
    limits = limits or RenderLimits()
    program = helm_binary()
    if program is None:
        return None, MISSING
    key = digest(files, program, (chart, release, namespace, *values), limits)
    return _MEMO.get_or(key, lambda: _template(files, chart, release, namespace, values,
                                               program, limits))


def _environment(tmp: str) -> dict[str, str]:
    home = Path(tmp) / "home"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GOMAXPROCS": "2",
           "KUBECONFIG": str(home / "no-kubeconfig")}
    for name, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"),
                      ("HELM_DATA_HOME", "data"), ("HELM_PLUGINS", "no-plugins")):
        env[name] = str(home / sub)
    env["HELM_REGISTRY_CONFIG"] = str(home / "config" / "registry.json")
    env["HELM_REPOSITORY_CONFIG"] = str(home / "config" / "repositories.yaml")
    env["HELM_REPOSITORY_CACHE"] = str(home / "cache" / "repository")
    return env


def _template(files: Mapping[str, bytes], chart: str, release: str, namespace: str,
              values: Sequence[str], program: str, limits: RenderLimits) -> Rendered:
    with tempfile.TemporaryDirectory(prefix="gitray-helm-") as tmp:
        top = Path(tmp) / "r"
        write_tree(top, files)
        args = [program, "template", release, f"./{chart}", "--namespace", namespace,
                "--skip-tests"]
        for path in values:
            args += ["--values", f"./{path}"]
        RENDERS[0] += 1
        try:
            code, out, err, why = render(args, top, _environment(tmp), limits)
        except OSError as exc:
            return None, f"helm could not be started: {exc.strerror}"
        shown = f"helm template {release} {chart or '.'} -n {namespace}"
        if why is not None:
            return None, f"{shown} refused: {why}"
        if code != 0:
            return None, f"{shown} failed: {_message(err.decode('utf-8', 'replace'), str(top))}"
    return out.decode("utf-8", "replace"), None


def _message(stderr: str, top: str) -> str:
    """Helm's error (v4 spreads one over lines), one line, without the temporary directory."""
    lines = [line.strip() for line in stderr.splitlines()
             if line.strip() and not line.startswith(("Use --debug", "WARNING:"))]
    message = " ".join(lines).removeprefix("Error: ") or "no message"
    for prefix in (top + "/", top):
        message = message.replace(prefix, "")
    return message[:500]
