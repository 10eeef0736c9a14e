"""The test Gitea's access token, read from what ``gitea admin user generate-access-token
--raw`` printed: as root Gitea may print its warning on stdout beside it (a full run on a fresh
machine took the warning's last line for the token, and every request of test_statuses_gitea
was refused with "token is required")."""

from __future__ import annotations

from testenv.gitea.server import token_in

TOKEN = "6948093334e27418ce11364c9451f945bab5e5f6"
WARNING = ("You are running Gitea using the root user, and have purposely chosen to skip "
           "built-in protections around this. You have been warned against this.")


def test_the_token_alone() -> None:
    assert token_in(f"{TOKEN}\n") == TOKEN


def test_the_token_with_the_root_warning_after_or_before_it() -> None:
    assert token_in(f"{TOKEN}\n{WARNING}\n") == TOKEN
    assert token_in(f"{WARNING}\n{TOKEN}\n") == TOKEN
    assert token_in(f"{TOKEN}{WARNING}") is None  # (not a token's line: no guess)


def test_no_token_printed() -> None:
    assert token_in(f"{WARNING}\n") is None
    assert token_in("") is None
