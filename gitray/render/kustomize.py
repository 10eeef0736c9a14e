"""``kustomize build`` run on a revision's files (the runner of ``gitray.plans.kustomize``).

The binary: ``$GITRAY_KUSTOMIZE``, else ``kustomize`` (v5) on PATH. Not a gitray.yaml setting:
a repository must not choose which program gitray runs. The files are written to a fresh
temporary directory (regular files only, so no symlink leads out of it) and ``kustomize
build`` runs there with the default root-only load restrictor, no plugins, no exec functions,
no Helm, a minimal environment (no credentials), a timeout, an address-space bound (set by
util-linux's ``prlimit`` before kustomize starts, else just after) and an output bound.
Results are memoized by the digest of the inputs (files, binary, limits): a revision whose
render inputs are unchanged is not rendered again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RenderLimits", "kustomize_binary", "run", "runner"]

MISSING = ("kustomize is not installed: put kustomize v5 on PATH or set GITRAY_KUSTOMIZE to "
           "render this kustomization")


@dataclass(frozen=True)
class RenderLimits:
    timeout_s: float = 30.0
    max_output_bytes: int = 32 * 1024 * 1024
    max_memory_bytes: int = 4 * 1024 * 1024 * 1024  # address space of the kustomize process


# how the Go runtime says it hit the address-space bound
_OUT_OF_MEMORY = (b"out of memory", b"cannot allocate memory", b"failed to reserve")
_MEMO: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
_MEMO_LOCK = threading.Lock()
_MEMO_SIZE = 256
RENDERS = [0]  # kustomize processes started (tests and benchmarks read it)


def kustomize_binary() -> str | None:
    configured = os.environ.get("GITRAY_KUSTOMIZE")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("kustomize")


def runner(limits: RenderLimits | None = None
           ) -> Callable[[Mapping[str, bytes], str], tuple[str | None, str | None]]:
    """``run`` with other limits (tests of hostile inputs use short ones)."""
    return lambda files, root: run(files, root, limits)


def run(files: Mapping[str, bytes], root: str,
        limits: RenderLimits | None = None) -> tuple[str | None, str | None]:
    """``(output, None)`` of ``kustomize build <root>`` over ``files``, or ``(None, why)``."""
    limits = limits or RenderLimits()
    binary = kustomize_binary()
    if binary is None:
        return None, MISSING
    key = _digest(files, root, binary, limits)
    with _MEMO_LOCK:
        known = _MEMO.get(key)
        if known is not None:
            _MEMO.move_to_end(key)
            return known
    result = _build(files, root, binary, limits)
    with _MEMO_LOCK:
        _MEMO[key] = result
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return result


def _digest(files: Mapping[str, bytes], root: str, binary: str, limits: RenderLimits) -> str:
    h = hashlib.sha256()
    try:
        stat = os.stat(binary)
        h.update(f"{binary}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    except OSError:
        h.update(binary.encode())
    h.update(f"{root}\0{limits}\0".encode())
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return h.hexdigest()


def _limit_memory(pid: int, limit: int) -> None:
    # it may have exited already, or have a lower bound: the timeout holds either way
    with contextlib.suppress(OSError, ValueError):
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))


def _build(files: Mapping[str, bytes], root: str, binary: str,
           limits: RenderLimits) -> tuple[str | None, str | None]:
    shown = root or "."
    with tempfile.TemporaryDirectory(prefix="gitray-kustomize-") as tmp:
        top = Path(tmp) / "r"
        top.mkdir()
        for path, data in files.items():
            target = top / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        workdir = top / root if root else top
        workdir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "GOMAXPROCS": "2",
               "KUSTOMIZE_PLUGIN_HOME": str(Path(tmp) / "no-plugins")}
        args = [binary, "build", "--load-restrictor", "LoadRestrictionsRootOnly", "."]
        bound = shutil.which("prlimit")  # util-linux: the bound holds from exec on
        if bound:
            args = [bound, f"--as={limits.max_memory_bytes}", "--", *args]
        RENDERS[0] += 1
        try:
            proc = subprocess.Popen(args, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            return None, f"kustomize could not be started: {exc.strerror}"
        if not bound:  # no preexec_fn (threads run here): bound it just after it started
            _limit_memory(proc.pid, limits.max_memory_bytes)
        out, err, why = _communicate(proc, limits)
        if why is not None:
            return None, f"kustomize build {shown} refused: {why}"
        if proc.returncode != 0:
            return None, (f"kustomize build {shown} failed: "
                          f"{_message(err.decode('utf-8', 'replace'), str(top))}")
    return out.decode("utf-8", "replace"), None


def _communicate(proc: subprocess.Popen[bytes], limits: RenderLimits
                 ) -> tuple[bytes, bytes, str | None]:
    """Read stdout up to the bound and stderr up to 64 KiB within the timeout; kill on excess."""
    chunks: list[bytes] = []
    errs: list[bytes] = []
    over = threading.Event()

    def read_out() -> None:
        size = 0
        assert proc.stdout is not None
        while block := proc.stdout.read(65536):
            size += len(block)
            if size > limits.max_output_bytes:
                over.set()
                proc.kill()
                return
            chunks.append(block)

    def read_err() -> None:
        assert proc.stderr is not None
        kept = 0
        while block := proc.stderr.read(65536):
            if kept < 65536:
                errs.append(block)
                kept += len(block)

    readers = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=read_err, daemon=True)]
    for t in readers:
        t.start()
    try:
        proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return b"", b"", f"it ran longer than {limits.timeout_s:g} s"
    for t in readers:
        t.join(timeout=5)
    if over.is_set():
        mib = limits.max_output_bytes / (1024 * 1024)
        return b"", b"", f"its output is over {mib:g} MiB"
    err = b"".join(errs)
    if proc.returncode != 0 and any(m in err for m in _OUT_OF_MEMORY):
        gib = limits.max_memory_bytes / 1024 ** 3
        return b"", b"", f"it needed more than {gib:g} GiB of memory"
    return b"".join(chunks), err, None


def _message(stderr: str, top: str) -> str:
    """Kustomize's error, one line, with the temporary directory taken out of its paths."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    message = (lines[-1] if lines else "no message").removeprefix("Error: ")
    for prefix in (top + "/", top):
        message = message.replace(prefix, "")
    return message[:500]
