"""Build Gitea from the Go module proxy into a version-keyed cache. Stdlib only; does I/O.

``python -m testenv.gitea.build`` builds (or reuses) the binary and prints its path.

Gitea's go.mod has ``replace`` directives, so ``go install code.gitea.io/gitea@vX`` is refused.
A throwaway module requires ``code.gitea.io/gitea vX`` and copies every ``replace`` line from
that exact go.mod (read from the module cache, never hard-coded); the root package is ``main``.
sqlite needs cgo and the ``sqlite sqlite_unlock_notify`` tags. Without the ``bindata`` tag Gitea
reads ``options/``, ``templates/`` and ``public/`` from disk, so they are copied next to the binary.

Cache layout (``$GITRAY_TESTENV_CACHE`` or ``~/.cache/gitray-testenv``)::

    <root>/gitea-<version>/bin/gitea      the binary
    <root>/gitea-<version>/static/        options/ templates/ public/ from the module
    <root>/gitea-<version>/build.json     version, Go version, build seconds
    <root>/gitea-<version>/build.log      output of every go command
    <root>/gitea-<version>/src/           the throwaway module
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

MODULE = "code.gitea.io/gitea"
# Preferred first; the proxy lists v1.26.0, v1.27.3 and v1.28.0-dev. v1.27.3 is not usable:
# its go.mod declares `module gitea.dev` ("module declares its path as: gitea.dev but was
# required as: code.gitea.io/gitea"), and the proxy refuses gitea.dev itself (403 Forbidden).
VERSIONS = ("v1.26.0",)
BUILD_TAGS = "sqlite sqlite_unlock_notify"


class GiteaBuildError(RuntimeError):
    """A build step failed; the message is one line naming the step and the log file."""


def cache_root() -> Path:
    env = os.environ.get("GITRAY_TESTENV_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gitray-testenv"


def entry_dir(version: str) -> Path:
    return cache_root() / f"gitea-{version}"


def binary_path(version: str) -> Path:
    return entry_dir(version) / "bin" / "gitea"


def static_dir(version: str) -> Path:
    return entry_dir(version) / "static"


def cached() -> tuple[str, Path] | None:
    """The newest cached (version, binary) pair, or None when nothing has been built."""
    for version in VERSIONS:
        binary = binary_path(version)
        if binary.is_file() and (entry_dir(version) / "build.json").is_file():
            return version, binary
    return None


def _go(args: list[str], cwd: Path, log: Path, env: dict[str, str], step: str) -> str:
    with log.open("a") as out:
        out.write(f"\n$ go {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run(
            ["go", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=out, text=True,
            check=False,
        )
        out.write(proc.stdout[-20000:])
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise GiteaBuildError(f"gitea build: {step} failed ({tail[0][:200]}); see {log}")
    return proc.stdout


def _replaces(gomod: str) -> list[str]:
    """Every replace directive of a go.mod, single-line or in a block, as `a => b v` lines."""
    lines: list[str] = []
    in_block = False
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
            elif "=>" in line:
                lines.append(line)
        elif re.match(r"^replace\s*\($", line):
            in_block = True
        elif line.startswith("replace ") and "=>" in line:
            lines.append(line[len("replace "):].strip())
    for line in lines:
        if re.search(r"=>\s*\.{1,2}/", line):
            raise GiteaBuildError(f"gitea build: local replace {line!r} cannot be mirrored")
    return lines


@contextlib.contextmanager
def _locked(entry: Path) -> Iterator[None]:
    """One build of a version at a time: `scripts/test` starts one in the background, and a test
    that needs Gitea before it is done waits here for it instead of building it again."""
    entry.mkdir(parents=True, exist_ok=True)
    with (entry / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(version: str) -> Path:
    """Build one version (reusing the cache entry when complete) and return the binary path."""
    entry = entry_dir(version)
    with _locked(entry):
        return _build(version, entry)


def _build(version: str, entry: Path) -> Path:
    binary = binary_path(version)
    if binary.is_file() and (entry / "build.json").is_file():
        return binary
    src = entry / "src"
    src.mkdir(parents=True, exist_ok=True)
    log = entry / "build.log"
    env = {**os.environ, "GOWORK": "off", "CGO_ENABLED": "1", "GOFLAGS": "-mod=mod"}
    started = time.monotonic()
    info = json.loads(
        _go(["mod", "download", "-json", f"{MODULE}@{version}"], src, log, env, "download")
    )
    module_dir = Path(info["Dir"])
    gomod = Path(info["GoMod"]).read_text()
    go_line = re.search(r"^go\s+(\S+)", gomod, re.M)
    text = "module local/giteabuild\n\n"
    text += f"go {go_line.group(1) if go_line else '1.26'}\n\n"
    text += f"require {MODULE} {version}\n\n"
    text += "".join(f"replace {line}\n" for line in _replaces(gomod))
    (src / "go.mod").write_text(text)
    (src / "tools.go").write_text(
        "//go:build tools\n\npackage giteabuild\n\nimport _ \"code.gitea.io/gitea\"\n"
    )
    _go(["mod", "tidy", "-e"], src, log, env, "mod tidy")
    plain = version.removeprefix("v")
    ldflags = f"-s -w -X main.Version={plain} -X main.Tags={BUILD_TAGS.replace(' ', ',')}"
    out = entry / "bin" / "gitea.partial"
    out.parent.mkdir(parents=True, exist_ok=True)
    _go(
        ["build", "-trimpath", "-tags", BUILD_TAGS, "-ldflags", ldflags, "-o", str(out), MODULE],
        src, log, env, "go build",
    )
    static = static_dir(version)
    for name in ("options", "templates", "public"):
        if (module_dir / name).is_dir():
            if (static / name).exists():
                shutil.rmtree(static / name)
            shutil.copytree(module_dir / name, static / name)
            for path in (static / name).rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
    out.rename(binary)
    go_version = subprocess.run(
        ["go", "version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    record = {
        "version": version,
        "go": go_version,
        "tags": BUILD_TAGS,
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (entry / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    return binary


def build_any() -> tuple[str, Path]:
    """A cached build, else the first version that builds; raise with every error otherwise."""
    found = cached()
    if found is not None:
        return found
    errors: list[str] = []
    for version in VERSIONS:
        try:
            return version, build(version)
        except GiteaBuildError as exc:
            errors.append(f"{version}: {exc}")
    raise GiteaBuildError("; ".join(errors))


def main() -> int:
    try:
        version, binary = build_any()
    except GiteaBuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"gitea {version}: {binary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
