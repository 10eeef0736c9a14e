"""Ray: the dashboard / Serve REST client and how a cluster's dashboard is reached. Does I/O
(HTTP, directly or through the API server). Imports only ``core``.
"""
