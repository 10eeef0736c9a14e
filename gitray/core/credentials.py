"""Credentials in Git URLs, and keeping secrets out of text. No I/O.

- ``redact_url``: the ``user:password@`` part of every URL in a text becomes ``***@``;
- ``redact_secrets``: given secret values (and their URL-encoded forms) become ``***``;
- ``git_auth``: an http(s) URL without its credentials, plus what hands them to ``git``
  through its environment and one inline credential helper — never argv (visible to other
  users, logged by GitPython), a repository's config, logs or error messages. Fetching
  (``gitray.git``) and pushing git notes (``gitray.hosts``) use the same helper.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit, urlunsplit

__all__ = ["GIT_NO_PROMPT", "REDACTED", "GitAuth", "git_auth", "redact_secrets", "redact_url"]

REDACTED = "***"
GIT_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_HELPER = (
    '!f() { test "$1" = get || exit 0; echo "username=$GITRAY_GIT_USERNAME"; '
    'echo "password=$GITRAY_GIT_PASSWORD"; }; f'
)


def redact_url(text: str) -> str:
    """``text`` with the user/password part of every URL in it replaced by ``***``."""
    return _USERINFO.sub(REDACTED + "@", text)


def redact_secrets(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret (and its URL-encoded form) replaced by ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            text = text.replace(form, REDACTED)
    return text


@dataclass(frozen=True)
class GitAuth:
    """How to run ``git`` against a URL that may carry credentials."""

    url: str  # without user:password@
    env: dict[str, str] = field(default_factory=lambda: dict(GIT_NO_PROMPT))
    args: tuple[str, ...] = ()  # -c options that install the credential helper
    secrets: tuple[str, ...] = ()  # to redact from git's output


def git_auth(url: str) -> GitAuth:
    """The credentials of an http(s) ``url`` moved into git's environment (other URLs as
    they are)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return GitAuth(url)
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    host = parts.netloc.rsplit("@", 1)[1]
    return GitAuth(urlunsplit(parts._replace(netloc=host)),
                   {**GIT_NO_PROMPT, "GITRAY_GIT_USERNAME": user,
                    "GITRAY_GIT_PASSWORD": password},
                   ("-c", "credential.helper=", "-c", f"credential.helper={_HELPER}"),
                   tuple(s for s in (password, parts.password or "") if s))
