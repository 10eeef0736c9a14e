"""gitray: GitOps for Ray on Kubernetes.

Layers (enforced by tests/unit/test_layers.py):

- ``gitray.plans`` is pure: bytes and live-state values in, plans out. No Kubernetes, Git,
  HTTP, subprocess, clock, sleep or environment access.
- ``gitray.sync`` holds every I/O adapter (git, cluster, dashboard, lease, progress, statuses).
- ``gitray.cli`` parses arguments and picks a view; it holds no logic of its own.
"""

__version__ = "0.1.0"
