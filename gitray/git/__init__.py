"""Git: reading a revision or a working tree into a ``Snapshot`` (``source``), signatures and
ancestry (``signing``). Does I/O (git, the filesystem). Imports only ``core``.
"""
