"""Path globs for ``paths`` / ``exclude`` in gitray.yaml. Pure, no I/O.

Semantics (documented in the config reference):

- patterns are relative to the repository root and use ``/``; ``*`` and ``?`` stay within one
  path segment, ``**`` spans any number of segments, ``[abc]`` is a character class;
- a pattern that matches a directory matches everything under it (``services`` = ``services/**``);
- wildcards never match a name starting with ``.``, so ``**`` skips ``.github/`` and other
  dot-directories unless a pattern names them (``.github/ray/**``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["glob_problem", "matches_any"]

_NOT_DOT = r"(?!\.)"
_SEGMENT = r"[^/]+"


def glob_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not an acceptable repository glob, or None."""
    if not pattern.strip():
        return "an empty glob matches nothing"
    if pattern.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", pattern):
        return f"glob {pattern!r} is absolute; write it relative to the repository root"
    if "\\" in pattern:
        return f"glob {pattern!r} contains a backslash; use '/' between directories"
    if ".." in pattern.split("/"):
        return f"glob {pattern!r} uses '..'; it cannot leave the repository"
    return None


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    segments = [s for s in pattern.strip("/").split("/") if s not in ("", ".")]
    regex = ""
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            if last:
                regex += f"(?:{_NOT_DOT}{_SEGMENT}(?:/{_NOT_DOT}{_SEGMENT})*)?"
            else:
                regex += f"(?:{_NOT_DOT}{_SEGMENT}/)*"
            continue
        regex += _segment(segment) + ("" if last else "/")
    return re.compile(regex + r"\Z")


def _segment(segment: str) -> str:
    out = "" if segment.startswith(".") else _NOT_DOT
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "[":
            end = segment.find("]", i + 2)
            if end < 0:
                out += re.escape(char)
            else:
                body = segment[i + 1 : end]
                negate = body.startswith(("!", "^"))
                body = body[1:] if negate else body
                out += "[" + ("^/" if negate else "") + body.replace("\\", "\\\\") + "]"
                i = end
        else:
            out += re.escape(char)
        i += 1
    return out


def matches_any(path: str, patterns: Iterable[str]) -> bool:
    """Whether ``path`` (or a directory above it) matches one of ``patterns``."""
    parts = path.split("/")
    # a directory match covers what is under it, except dot-entries (they stay opt-in)
    prefixes = [path]
    for n in range(len(parts) - 1, 0, -1):
        if parts[n].startswith("."):
            break
        prefixes.append("/".join(parts[:n]))
    for pattern in patterns:
        compiled = _compile(pattern)
        if any(compiled.match(prefix) for prefix in prefixes):
            return True
    return False
