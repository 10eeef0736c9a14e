"""The settings of ``gitray sync`` (flags and environment, read by the CLI). No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitray.engine.shards import check_shards
from gitray.engine.wiring import ExecSettings
from gitray.k8s.settings import KubeSettings

__all__ = ["DaemonSettings"]


@dataclass(frozen=True)
class DaemonSettings:
    """What ``gitray sync`` follows and serves; ``execution`` is shared with ``gitray apply``
    (the Lease, its timings, dashboards, identity)."""

    repo: str
    execution: ExecSettings
    branch: str | None = None
    interval_s: float = 30.0
    drift_every: int = 10  # polls between drift checks (0: never)
    deletion_interval_s: float = 15.0
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    webhook_secret: bytes | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    kube: KubeSettings = field(default_factory=KubeSettings)
    cache_dir: Path | None = None
    max_backoff_s: float = 300.0
    status_token: str | None = None  # for the Git host's status API (never logged)
    allowed_signers: Path | None = None  # when set, only commits signed by these keys apply
    workers: int = 8  # workloads whose runs go on at the same time (gitray.engine.fleet)
    # the workloads are sharded over the replicas, each shard on a Lease of its own
    # (docs/sharding.md); 1: unsharded, one leader holding the Lease
    shards: int = 1

    def __post_init__(self) -> None:
        check_shards(self.shards)
