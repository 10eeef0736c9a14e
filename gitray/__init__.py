"""gitray: GitOps for Ray on Kubernetes.

One package per external system or role (README "Architecture"); the import rule is enforced by
tests/unit/test_layers.py::

    core  <-  parsing  <-  plans  <-  engine  <-  daemon, cli     (A <- B: B may import A)
    core  <-  k8s, git, hosts, ray                               (adapters: core only)

- ``gitray.plans`` is pure: bytes and live-state values in, plans out. No Kubernetes, Git,
  HTTP, subprocess, clock, sleep or environment access.
- ``gitray.k8s``, ``gitray.git``, ``gitray.hosts`` and ``gitray.ray`` are the I/O adapters.
- ``gitray.engine`` executes plans; ``gitray.engine.wiring`` is the one composition root.
- ``gitray.cli`` parses arguments and picks a view; it holds no logic of its own.
"""

__version__ = "0.1.0"
