"""What a new user's first `gitray apply` depends on, without a cluster: the Lease namespace is
the one kubectl would use, and a refused dashboard request is one actionable line.

(The same paths against the real API server: tests/integration/test_first_run.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitray.core.errors import ConfigError
from gitray.core.http import RawResponse
from gitray.k8s.client import KubeSettings
from gitray.k8s.connection import default_namespace
from gitray.ray.dashboard import DashboardMode, denied

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:6443"}}
users:
- name: u
  user: {{token: "not-a-real-token"}}
contexts:
- name: plain
  context: {{cluster: c, user: u}}
- name: team
  context: {{cluster: c, user: u, namespace: ray-team}}
current-context: {current}
"""


def kubeconfig(tmp_path: Path, current: str) -> str:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG.format(current=current))
    return str(path)


@pytest.mark.parametrize(("current", "context", "expected"), [
    ("team", None, "ray-team"),        # the current context names a namespace
    ("plain", None, "default"),        # it names none: kubectl's default
    ("plain", "team", "ray-team"),     # --context wins over the current context
    ("team", "plain", "default"),
])
def test_lease_namespace_follows_the_kubeconfig_context(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, current: str, context: str | None,
        expected: str) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings = KubeSettings(kubeconfig=kubeconfig(tmp_path, current), context=context)
    assert default_namespace(settings) == expected


def test_kubeconfig_from_the_environment(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, "team"))
    assert default_namespace() == "ray-team"


def test_unknown_context_is_a_config_error(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings = KubeSettings(kubeconfig=kubeconfig(tmp_path, "team"), context="nope")
    with pytest.raises(ConfigError, match="no context 'nope'"):
        default_namespace(settings)


def test_missing_kubeconfig_is_a_config_error(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="cannot load the Kubernetes configuration"):
        default_namespace(KubeSettings(kubeconfig=str(tmp_path / "absent")))


FORBIDDEN = json.dumps({
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
    "code": 403,
    "message": 'services "rs-a-head-svc:dashboard" is forbidden: User "system:serviceaccount:'
               't:gitray" cannot update resource "services/proxy" in API group "" in the '
               'namespace "t"'})


def test_api_server_refusal_names_the_missing_permission() -> None:
    r = RawResponse(403, FORBIDDEN, api_server=True)
    line = denied(r, "cluster t/rs-a", DashboardMode.PROXY, "t")
    assert "\n" not in line
    assert 'cannot update resource "services/proxy"' in line
    assert "get and update on services/proxy" in line and "namespace t" in line
    assert "--dashboard pod-ip" in line


def test_dashboard_refusal_points_at_the_ray_token() -> None:
    r = RawResponse(401, "Unauthorized: missing x-ray-authorization", api_server=False)
    line = denied(r, "cluster t/rs-a", DashboardMode.POD_IP, "t")
    assert "--ray-token-file" in line and "HTTP 401" in line
    assert "services/proxy" not in line


@pytest.mark.parametrize(("text", "is_status"), [
    (FORBIDDEN, True),
    ('{"kind": "Status", "apiVersion": "v1", "message": "no endpoints available"}', True),
    ('{"applications": {}}', False),                 # the dashboard's own JSON
    ("Internal Server Error", False),
    ('{"kind": "Status"', False),                    # truncated
])
def test_api_server_answers_are_told_from_the_proxied_backend(text: str,
                                                              is_status: bool) -> None:
    r = RawResponse.parse(500, text)
    assert r.api_server is is_status
    assert r.message()  # never empty: the Status message or the body's start


def test_status_message_is_extracted() -> None:
    assert RawResponse(403, FORBIDDEN, api_server=True).message().startswith(
        'services "rs-a-head-svc:dashboard" is forbidden')
