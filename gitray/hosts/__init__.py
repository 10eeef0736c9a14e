"""Git hosts: commit statuses (GitHub, Gitea/Forgejo, GitLab, git notes), the best-effort
publisher and pull-request plan comments. Does I/O (HTTP, git). Imports only ``core``.
"""
