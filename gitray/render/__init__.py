"""Adapters that run a renderer program on a revision's files (``kustomize build``, ``helm
template``)."""

from __future__ import annotations

from typing import Any


def runners() -> dict[str, Any]:
    """The real renderers as ``load_snapshot`` keyword arguments (imported when first used)."""
    from gitray.render.helm import run as run_helm
    from gitray.render.kustomize import run as run_kustomize

    return {"kustomize": run_kustomize, "helm": run_helm}
