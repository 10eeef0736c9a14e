"""Following a LIST's continue tokens (the loop only; the requests themselves are tested
against the real API server in tests/integration/test_kube_list.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gitray.core.errors import TransientError
from gitray.k8s.client import paged


def _pages(*tokens: str | None) -> tuple[list[str | None], Any]:
    asked: list[str | None] = []

    def fetch(after: str | None) -> Mapping[str, Any]:
        asked.append(after)
        index = len(asked) - 1
        return {"items": [index], "metadata": {"continue": tokens[index] or ""}}

    return asked, fetch


def test_pages_follow_the_continue_token_until_there_is_none() -> None:
    asked, fetch = _pages("a", "b", None)
    pages = [page["items"] for page in paged(fetch)]
    assert pages == [[0], [1], [2]]
    assert asked == [None, "a", "b"]


def test_one_page_when_the_first_has_no_token() -> None:
    asked, fetch = _pages(None)
    assert [page["items"] for page in paged(fetch)] == [[0]]
    assert asked == [None]


def test_pages_are_fetched_only_as_they_are_consumed() -> None:
    asked, fetch = _pages("a", None)
    pages = paged(fetch)
    next(pages)
    assert asked == [None]  # the caller holds one page at a time


def test_a_token_that_does_not_move_on_is_a_transient_error() -> None:
    _, fetch = _pages("a", "a", None)
    with pytest.raises(TransientError, match="same continue token"):
        list(paged(fetch, "listing RayCluster in all namespaces"))
