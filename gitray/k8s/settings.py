"""How to reach the API server, and whether a configuration exists. Reads only the environment
and the kubeconfig's presence: cheap enough for ``gitray plan`` to ask without loading the
Kubernetes client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KubeSettings", "cluster_configured"]


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: str | None = None  # default: $KUBECONFIG, ~/.kube/config, or in-cluster
    context: str | None = None
    request_timeout_s: float = 30.0
    impersonate: str | None = None  # e.g. system:serviceaccount:gitray:gitray (tests, audits)


def cluster_configured(settings: KubeSettings | None = None) -> bool:
    """Whether a kubeconfig or in-cluster config is available (no connection attempted)."""
    if settings and settings.kubeconfig:
        return True
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        return any(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p)
    return (Path.home() / ".kube" / "config").is_file()
