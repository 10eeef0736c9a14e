"""A strict local Git host for tests: GitHub's, Gitea's and GitLab's documented commit-status and
PR-comment endpoints on 127.0.0.1, with their limits (GitHub 422 on a description over 140
characters, GitLab 400 on a repeated transition), token checks, pagination, fault injection
(500s, hangs) and a request log. See server.py.
"""

from testenv.githost.server import Fault, GitHost, Request

__all__ = ["Fault", "GitHost", "Request"]
