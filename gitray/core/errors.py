"""The one exception tree of gitray. No I/O.

::

    GitrayError                 base; ``str(e)`` is one line a user can act on
    ├── UserError               bad input from the user: never retried, exit code 1
    │   ├── ConfigError         gitray.yaml / flags / env
    │   ├── SourceError         repository or revision cannot be read
    │   ├── ValidationError     a revision has invalid manifests (carries every diagnostic)
    │   └── StalePlanError      a saved plan no longer matches Git or the cluster
    ├── TerminalError           a step failed for good (timeout, Serve DEPLOY_FAILED, ...)
    │   ├── NotFoundError       Kubernetes 404: the object (or its kind) does not exist
    │   ├── ForbiddenError      Kubernetes 401/403: RBAC refused the request
    │   ├── InvalidError        Kubernetes 400/422: the API server rejected the object
    │   ├── AnalysisFailed      a progressive-delivery analysis found a check failing (counted
    │   │                       against failureLimit before it fails the upgrade)
    │   └── Aborted             `gitray abort` asked to roll an incremental upgrade back
    ├── StatusRejected          a Git host refused a status/comment for good (gitray.hosts)
    ├── TransientError          worth retrying with backoff (API hiccup, conflict, network)
    │   ├── ConflictError       Kubernetes 409: compare-and-swap lost, or it already exists
    │   ├── LeaseBusyError      another process held the Lease longer than we would wait
    │   └── LeaseLostError      this process no longer holds the Lease; stop mutating
    ├── Interrupted             shutting down: stop between (or inside a wait of) steps; the
    │                           run record stays "running" so the next leader resumes it
    └── Superseded              Git moved on while an upgrade waited: its run ends
                                "cancelled" and the next pass plans the newer commit
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gitray.core.model import Diagnostic

__all__ = [
    "Aborted",
    "AnalysisFailed",
    "ConfigError",
    "ConflictError",
    "ForbiddenError",
    "GitrayError",
    "Interrupted",
    "InvalidError",
    "LeaseBusyError",
    "LeaseLostError",
    "NotFoundError",
    "SourceError",
    "StalePlanError",
    "StatusRejected",
    "Superseded",
    "TerminalError",
    "TransientError",
    "UserError",
    "ValidationError",
]


class GitrayError(Exception):
    """Base of every error gitray raises on purpose."""


class UserError(GitrayError):
    """The user's input is wrong; retrying will not help."""


class ConfigError(UserError):
    """gitray.yaml, a flag or an environment variable is invalid."""


class SourceError(UserError):
    """The repository, revision or a file in it cannot be read."""


class ValidationError(UserError):
    """A revision holds invalid manifests. All-or-nothing: nothing from it is applied."""

    def __init__(self, diagnostics: Sequence[Diagnostic], *, reported: bool = False) -> None:
        self.diagnostics = tuple(diagnostics)
        self.reported = reported  # already shown in a reviewer's format (--format github...)
        n = len(self.diagnostics)
        super().__init__(f"{n} problem{'s' if n != 1 else ''} found; nothing was applied")


class StalePlanError(UserError):
    """A saved plan was computed against a revision or live objects that have changed."""


class TerminalError(GitrayError):
    """A step failed and will not succeed by retrying it (the plan fails with this reason)."""


class TransientError(GitrayError):
    """A temporary failure (API server, network, conflict); retry with backoff."""


class NotFoundError(TerminalError):
    """The object (or its kind) does not exist."""


class ConflictError(TransientError):
    """Compare-and-swap lost (resourceVersion changed) or the object already exists."""


class ForbiddenError(TerminalError):
    """RBAC refused the request."""


class InvalidError(TerminalError):
    """The API server rejected the object as invalid."""


class AnalysisFailed(TerminalError):
    """An analysis of an incremental upgrade failed: ``check`` (its name) measured ``value``.

    The executor counts it against the analysis' ``failureLimit``: below the limit the weight
    is held and the analysis runs again; at the limit the upgrade is rolled back."""

    def __init__(self, message: str, check: str, value: str) -> None:
        super().__init__(message)
        self.check = check
        self.value = value


class Aborted(TerminalError):
    """``gitray abort`` asked to roll the incremental upgrade in flight back."""


class LeaseBusyError(TransientError):
    """Another process held the Lease for longer than this process was willing to wait."""


class StatusRejected(GitrayError):
    """The Git host refused a status or comment for good (bad token, unknown commit, limits)."""


class LeaseLostError(TransientError):
    """The Lease is no longer held by this process (or is about to expire): stop mutating."""


class Interrupted(GitrayError):
    """This process is shutting down; the interrupted run is resumed by the next leader."""


class Superseded(GitrayError):
    """A newer commit wants another spec for a workload whose upgrade is still waiting (for
    its pending cluster or for Serve there), before any traffic moved: its run ends
    ``cancelled``, nothing is cleaned up, and the next pass plans the newer commit against
    what exists (SPEC §3: the pending cluster is abandoned; a revert cancels the upgrade)."""
