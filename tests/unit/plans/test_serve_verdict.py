"""When is a Serve deploy done? One row per situation Serve can report."""

from __future__ import annotations

from typing import Any

import pytest

from gitray.plans.serve import ServeState, serve_verdict

SENT = {"applications": [{"name": "greeter", "import_path": "apps.greeter:app"},
                         {"name": "calc", "import_path": "apps.calc:app"}]}


def app(status: str, import_path: str | None = None, message: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "message": message}
    if import_path:
        out["deployed_app_config"] = {"import_path": import_path}
    return out


CASES = [
    ("all applications RUNNING", {"greeter": app("RUNNING", "apps.greeter:app"),
                                  "calc": app("RUNNING", "apps.calc:app")}, ServeState.RUNNING),
    ("no applications yet", {}, ServeState.WAITING),
    ("one still DEPLOYING", {"greeter": app("RUNNING"), "calc": app("DEPLOYING")},
     ServeState.WAITING),
    ("only the previous config's application is RUNNING", {"old": app("RUNNING")},
     ServeState.WAITING),
    ("RUNNING but still the previous import path", {
        "greeter": app("RUNNING", "apps.old:app"), "calc": app("RUNNING", "apps.calc:app")},
     ServeState.WAITING),
    ("DEPLOY_FAILED fails fast", {"greeter": app("DEPLOY_FAILED", message="ImportError: x"),
                                  "calc": app("RUNNING")}, ServeState.FAILED),
    ("UNHEALTHY fails fast", {"greeter": app("RUNNING"), "calc": app("UNHEALTHY")},
     ServeState.FAILED),
    ("a failed application we did not send is not our failure",
     {"greeter": app("DEPLOYING"), "calc": app("DEPLOYING"), "other": app("DEPLOY_FAILED")},
     ServeState.WAITING),
]


@pytest.mark.parametrize(("situation", "apps", "state"), CASES, ids=[c[0] for c in CASES])
def test_serve_verdict(situation: str, apps: dict[str, Any], state: ServeState) -> None:
    assert serve_verdict(SENT, {"applications": apps}).state is state


def test_failure_carries_serves_message() -> None:
    verdict = serve_verdict(SENT, {"applications": {
        "greeter": app("DEPLOY_FAILED", message="Traceback ...\nModuleNotFoundError: nope")}})
    assert "ModuleNotFoundError: nope" in verdict.message
    assert verdict.message.startswith("Serve application greeter is DEPLOY_FAILED")


def test_progress_summary_counts_statuses() -> None:
    verdict = serve_verdict(SENT, {"applications": {"greeter": app("RUNNING"),
                                                    "calc": app("DEPLOYING")}})
    assert verdict.summary == "1/2 apps DEPLOYING, 1/2 apps RUNNING"
