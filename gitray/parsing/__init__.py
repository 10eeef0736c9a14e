"""Reading untrusted text: hostile-input-safe YAML, YAML 1.2 scalars, JSON Schemas, globs and
gitray.yaml itself, with ``file:line`` diagnostics. Pure: no I/O. Imports only ``core``.
"""
