"""``helm template`` run on a revision's files (the runner of ``gitray.plans.helm``).

The binary: ``$GITRAY_HELM``, else ``helm`` (v3 or v4) on PATH. Not a gitray.yaml setting: a
repository must not choose which program gitray runs. The chart's files and its values files
are written to a fresh temporary directory (regular files only, so no symlink leads out of
it) and ``helm template`` runs there offline: no repository or OCI pulls (dependencies must be
vendored, checked before anything runs), no cluster, no plugins, ``HELM_*`` homes inside the
temporary directory, a minimal environment (no credentials), with the timeout, address-space
and output bounds of ``gitray.render.kustomize``. Results are memoized by the digest of the
inputs (files, arguments, binary, limits): an unchanged chart is not rendered again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gitray.render.kustomize import RenderLimits, _communicate, _limit_memory

__all__ = ["MISSING", "RENDERS", "helm_binary", "run", "runner"]

MISSING = "helm is not installed: put helm (v3 or v4) on PATH or set GITRAY_HELM to render charts"

_MEMO: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
_MEMO_LOCK = threading.Lock()
_MEMO_SIZE = 256
RENDERS = [0]  # helm processes started (tests and benchmarks read it)

# (files by path under a fresh directory, chart directory, release, namespace, values files)
HelmRunner = Callable[[Mapping[str, bytes], str, str, str, Sequence[str]],
                      tuple[str | None, str | None]]


def helm_binary() -> str | None:
    configured = os.environ.get("GITRAY_HELM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("helm")


def runner(limits: RenderLimits | None = None) -> HelmRunner:
    """``run`` with other limits (tests of hostile charts use short ones)."""
    return lambda files, chart, release, namespace, values: run(
        files, chart, release, namespace, values, limits)


def run(files: Mapping[str, bytes], chart: str, release: str, namespace: str,
        values: Sequence[str], limits: RenderLimits | None = None
        ) -> tuple[str | None, str | None]:
    """``(output, None)`` of ``helm template release chart -n namespace -f values...`` over
    ``files``, or ``(None, why)`` in one line."""
    limits = limits or RenderLimits()
    binary = helm_binary()
    if binary is None:
        return None, MISSING
    key = _digest(files, (chart, release, namespace, *values), binary, limits)
    with _MEMO_LOCK:
        known = _MEMO.get(key)
        if known is not None:
            _MEMO.move_to_end(key)
            return known
    result = _template(files, chart, release, namespace, values, binary, limits)
    with _MEMO_LOCK:
        _MEMO[key] = result
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return result


def _digest(files: Mapping[str, bytes], args: Sequence[str], binary: str,
            limits: RenderLimits) -> str:
    h = hashlib.sha256()
    try:
        stat = os.stat(binary)
        h.update(f"{binary}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    except OSError:
        h.update(binary.encode())
    h.update(("\0".join(args) + f"\0{limits}\0").encode())
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return h.hexdigest()


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
              values: Sequence[str], binary: str, limits: RenderLimits
              ) -> tuple[str | None, str | None]:
    with tempfile.TemporaryDirectory(prefix="gitray-helm-") as tmp:
        top = Path(tmp) / "r"
        top.mkdir()
        for path, data in files.items():
            target = top / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        args = [binary, "template", release, f"./{chart}", "--namespace", namespace,
                "--skip-tests"]
        for path in values:
            args += ["--values", f"./{path}"]
        bound = shutil.which("prlimit")  # util-linux: the bound holds from exec on
        if bound:
            args = [bound, f"--as={limits.max_memory_bytes}", "--", *args]
        RENDERS[0] += 1
        try:
            proc = subprocess.Popen(args, cwd=top, env=_environment(tmp),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except OSError as exc:
            return None, f"helm could not be started: {exc.strerror}"
        if not bound:
            _limit_memory(proc.pid, limits.max_memory_bytes)
        out, err, why = _communicate(proc, limits)
        shown = f"helm template {release} {chart or '.'} -n {namespace}"
        if why is not None:
            return None, f"{shown} refused: {why}"
        if proc.returncode != 0:
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
