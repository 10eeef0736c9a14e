"""Deciding what to do: repository bytes and live state in, plans and their views out.

PURE: no Kubernetes, Git, HTTP, subprocess, clock, sleep, environment or file access here
(checked by tests/unit/test_layers.py). Callers pass in everything, including ``now``.
"""
