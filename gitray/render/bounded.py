"""Running a renderer program (kustomize, helm) on a revision's files, bounded. I/O.

What both renderers share: the binary found (an environment variable naming it, else PATH:
never a gitray.yaml setting, so a repository cannot choose which program gitray runs); the
files written to a fresh temporary directory (regular files only, so no symlink leads out of
it); a timeout, an address-space bound (set by util-linux's ``prlimit`` before the program
starts, else just after) and an output bound; results memoized by the digest of the inputs
(files, binary, arguments, limits).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import shutil
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Memo", "RenderLimits", "Rendered", "binary", "digest", "render", "write_tree"]

Rendered = tuple[str | None, str | None]  # (output, None) or (None, why not)

# how the Go runtime says it hit the address-space bound
_OUT_OF_MEMORY = (b"out of memory", b"cannot allocate memory", b"failed to reserve")
_ERR_KEPT = 65536


@dataclass(frozen=True)
class RenderLimits:
    timeout_s: float = 30.0
    max_output_bytes: int = 32 * 1024 * 1024
    max_memory_bytes: int = 4 * 1024 * 1024 * 1024  # address space of the renderer process


def binary(variable: str, name: str) -> str | None:
    """``$variable`` when set (and executable), else ``name`` on PATH."""
    configured = os.environ.get(variable)
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which(name)


def digest(files: Mapping[str, bytes], program: str, args: Sequence[str],
           limits: RenderLimits) -> str:
    """What a render depends on: the files, the program (path, size, mtime), its arguments and
    the limits."""
    h = hashlib.sha256()
    try:
        stat = os.stat(program)
        h.update(f"{program}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    except OSError:
        h.update(program.encode())
    h.update(("\0".join(args) + f"\0{limits}\0").encode())
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return h.hexdigest()


class Memo:
    """The last ``size`` results by input digest (thread-safe)."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._items: OrderedDict[str, Rendered] = OrderedDict()
        self._lock = threading.Lock()

    def get_or(self, key: str, compute: Callable[[], Rendered]) -> Rendered:
        with self._lock:
            known = self._items.get(key)
            if known is not None:
                self._items.move_to_end(key)
                return known
        result = compute()
        with self._lock:
            self._items[key] = result
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return result


def write_tree(top: Path, files: Mapping[str, bytes]) -> None:
    top.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        target = top / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def render(args: Sequence[str], cwd: Path, env: Mapping[str, str], limits: RenderLimits
           ) -> tuple[int, bytes, bytes, str | None]:
    """Run ``args`` bounded: (exit code, stdout, stderr, None), or (-1, b"", b"", why) when a
    bound stopped it. OSError when it cannot be started."""
    bound = shutil.which("prlimit")  # util-linux: the bound holds from exec on
    argv = [bound, f"--as={limits.max_memory_bytes}", "--", *args] if bound else list(args)
    proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not bound:  # no preexec_fn (threads run here): bound it just after it started
        _limit_memory(proc.pid, limits.max_memory_bytes)
    out, err, why = _communicate(proc, limits)
    if why is not None:
        return -1, b"", b"", why
    return proc.returncode, out, err, None


def _limit_memory(pid: int, limit: int) -> None:
    # it may have exited already, or have a lower bound: the timeout holds either way
    with contextlib.suppress(OSError, ValueError):
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))


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
            if kept < _ERR_KEPT:
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
