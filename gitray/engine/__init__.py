"""Executing plans: one idempotent action per step, the executor (fenced, resumable, retried),
the apply pass shared by ``gitray apply`` and ``gitray sync``, run records, failpoints, and
``wiring``, the one composition root. I/O through the adapters it is given.
"""
