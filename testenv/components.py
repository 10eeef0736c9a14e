"""A test component that is missing: with CI=true the test fails (never a silent skip in CI);
elsewhere it is skipped with the same message, which says how to get the component."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(message: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
