"""A real Gitea for tests: built from the Go module proxy (build.py), started on loopback
(server.py). Nothing here is imported by gitray itself.
"""
