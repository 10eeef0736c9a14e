"""An HTTP answer as one adapter hands it to another (the API server's proxy to the Ray
client). A value; no I/O."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

__all__ = ["RawResponse"]


@dataclass(frozen=True)
class RawResponse:
    """The answer to a raw request through the API server (e.g. its service proxy)."""

    status: int
    text: str
    api_server: bool  # the API server answered itself (a Status object), not the backend

    @classmethod
    def parse(cls, status: int, text: str) -> RawResponse:
        return cls(status, text, api_server=_is_status(text))

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def message(self) -> str:
        """The API server's Status message, or the start of the backend's body."""
        if self.api_server:
            with contextlib.suppress(ValueError, AttributeError):
                return str(json.loads(self.text).get("message") or self.text[:300])
        return self.text[:300].strip()


def _is_status(text: str) -> bool:
    if not text.startswith("{"):
        return False
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("kind") == "Status" \
        and body.get("apiVersion") == "v1"
