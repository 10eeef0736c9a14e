"""``gitray sync``: scheduled jobs, state as immutable snapshots, status and Event reporting,
the HTTP endpoints (probes, metrics, webhook) and logging. Does I/O.
"""
