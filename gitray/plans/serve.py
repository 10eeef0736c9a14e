"""Reading Ray Serve's application status: is a deploy done, still going, or failed? Pure.

Ready means (as KubeRay decides it) at least one application and every application RUNNING,
plus — because a PUT is asynchronous and the previous config may still be what is RUNNING —
the applications Serve reports are exactly the ones gitray sent, with the same import paths.
``DEPLOY_FAILED`` or ``UNHEALTHY`` fail at once with Serve's own message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["ServeState", "ServeVerdict", "live_config_at", "serve_verdict"]

_MESSAGE_LIMIT = 2000


class ServeState(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"
    FAILED = "failed"


@dataclass(frozen=True)
class ServeVerdict:
    state: ServeState
    summary: str  # for progress lines: "2/2 apps RUNNING", "1/2 apps DEPLOYING"
    message: str = ""  # Serve's error message when FAILED


def _expected(sent: Mapping[str, Any]) -> dict[str, str]:
    apps = sent.get("applications") or []
    return {str(a.get("name", "default")): str(a.get("import_path", ""))
            for a in apps if isinstance(a, Mapping)}


def serve_verdict(sent: Mapping[str, Any], reported: Mapping[str, Any]) -> ServeVerdict:
    """Compare what was sent (``serveConfigV2`` as data) with ``GET /api/serve/applications/``."""
    expected = _expected(sent)
    apps = reported.get("applications") or {}
    if not isinstance(apps, Mapping):
        apps = {}
    statuses = {str(n): str((a or {}).get("status", "")) for n, a in apps.items()}
    for name, app in sorted(apps.items()):
        status = statuses[str(name)]
        if status in {"DEPLOY_FAILED", "UNHEALTHY"} and str(name) in expected:
            message = str((app or {}).get("message") or "").strip()
            return ServeVerdict(ServeState.FAILED, f"application {name} is {status}",
                                f"Serve application {name!s} is {status}: "
                                f"{message[-_MESSAGE_LIMIT:] or 'no message'}")
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n}/{len(statuses)} apps {s}" for s, n in sorted(counts.items())) \
        or "no applications yet"
    if not expected or set(statuses) != set(expected):
        return ServeVerdict(ServeState.WAITING, summary)
    for name, import_path in expected.items():
        deployed = (apps[name] or {}).get("deployed_app_config") or {}
        if deployed and deployed.get("import_path") not in {None, import_path}:
            return ServeVerdict(ServeState.WAITING, f"{summary} (previous config still live)")
    if all(s == "RUNNING" for s in statuses.values()):
        return ServeVerdict(ServeState.RUNNING, summary)
    return ServeVerdict(ServeState.WAITING, summary)


_INSTANCE_OPTIONS = ("proxy_location", "http_options", "grpc_options")


def live_config_at(details: Mapping[str, Any], percent: int) -> dict[str, Any] | None:
    """The Serve config a cluster runs (``GET /api/serve/applications/?api_type=declarative``:
    each application's ``deployed_app_config`` and the instance-wide options), to be sent
    again with ``target_capacity`` = ``percent``; None when it runs no application."""
    apps = details.get("applications") or {}
    if not isinstance(apps, Mapping):
        return None
    configs = [dict(app["deployed_app_config"]) for _, app in sorted(apps.items())
               if isinstance(app, Mapping) and isinstance(app.get("deployed_app_config"),
                                                          Mapping)]
    if not configs:
        return None
    out: dict[str, Any] = {key: details[key] for key in _INSTANCE_OPTIONS
                           if isinstance(details.get(key), (str, Mapping))}
    return {**out, "applications": configs, "target_capacity": percent}
