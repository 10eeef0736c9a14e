"""The real ``kustomize`` v5 for gitray's rendering tests (issue 32), built from the Go module
proxy into the test-environment cache, keyed by its own version. Stdlib only. Part of every
``scripts/testenv build`` (after the environment, before Traefik).

Built and found as ``testenv/gocli.py`` says (``<root>/kustomize-<version>/bin/kustomize``).

v5.8.2: the newest CLI whose go.mod asks for no newer Go than this machine's 1.26 (v5.8.3 needs
1.27); it requires sigs.k8s.io/kustomize/api v0.21.2. Tests find the binary with
``kustomize_binary()``; gitray itself finds ``kustomize`` on PATH or through gitray.yaml's
``render.kustomize`` (docs/rendering.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testenv.gocli import GoCli

__all__ = ["KUSTOMIZE", "build_kustomize", "kustomize_binary", "kustomize_for_tests"]

KUSTOMIZE = ("sigs.k8s.io/kustomize/kustomize/v5", "v5.8.2")
_CLI = GoCli("kustomize", KUSTOMIZE[0], KUSTOMIZE[1], KUSTOMIZE[0],
             f"-X sigs.k8s.io/kustomize/api/provenance.version=kustomize/{KUSTOMIZE[1]}",
             ("version",), "GITRAY_KUSTOMIZE", "testenv/kustomize.py")


def kustomize_binary(root: Path | None = None) -> Path:
    """Where the built binary is (whether or not it has been built)."""
    return _CLI.binary(root)


def build_kustomize(root: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Build the CLI when missing; return its path. Raises BuildError (log tail) on failure."""
    return _CLI.build(root, say)


def kustomize_for_tests() -> str:
    """The kustomize the rendering tests run (``GoCli.for_tests``)."""
    return _CLI.for_tests()


if __name__ == "__main__":
    build_kustomize(say=lambda m: print(m, flush=True))
