"""The real ``helm`` v4 for gitray's chart-rendering tests (issue 32), built from the Go module
proxy into the test-environment cache, keyed by its own version. Stdlib only. Part of every
``scripts/testenv build`` (after kustomize, before Traefik). Like kustomize: never committed.

Built and found as ``testenv/gocli.py`` says (``<root>/helm-<version>/bin/helm``, the
CLI of helm.sh/helm/v4/cmd/helm).

v4.3.2: the newest helm v4 the module proxy serves here. Tests find the binary with
``helm_for_tests()``; gitray itself finds ``helm`` on PATH or through ``$GITRAY_HELM``
(gitray/render/helm.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testenv.gocli import GoCli

__all__ = ["HELM", "build_helm", "helm_binary", "helm_for_tests"]

HELM = ("helm.sh/helm/v4", "v4.3.2")
_CLI = GoCli("helm", HELM[0], HELM[1], "helm.sh/helm/v4/cmd/helm",
             f"-X helm.sh/helm/v4/internal/version.version={HELM[1]}", ("version", "--short"),
             "GITRAY_HELM", "testenv/helm.py")


def helm_binary(root: Path | None = None) -> Path:
    """Where the built binary is (whether or not it has been built)."""
    return _CLI.binary(root)


def build_helm(root: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Build the CLI when missing; return its path. Raises BuildError (log tail) on failure."""
    return _CLI.build(root, say)


def helm_for_tests() -> str:
    """The helm the rendering tests run (``GoCli.for_tests``)."""
    return _CLI.for_tests()


if __name__ == "__main__":
    build_helm(say=lambda m: print(m, flush=True))
