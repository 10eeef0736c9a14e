"""The test environment's Gateway (``scripts/testenv up --gateway``): what the incremental
upgrade's tests will stand on. Marked ``gateway``: its environment starts with Traefik
(``up --gateway``); part of scripts/test, alone with ``scripts/test-gateway``
(docs/testenv.md). The incremental upgrades themselves, with requests through Traefik:
tests/integration/test_incremental.py."""

from __future__ import annotations

import pytest

from gitray.k8s.client import Kube
from gitray.k8s.live import GATEWAY_API, absent_apis
from gitray.k8s.settings import KubeSettings
from testenv.gatewayenv import GATEWAY_CLASS
from testenv.helpers import TestEnv, get_text

pytestmark = pytest.mark.gateway


def test_gitray_finds_the_gateway_api_served(testenv: TestEnv, gateway: dict[str, str]) -> None:
    """With the CRDs installed, gitray apply and sync no longer refuse an incremental
    RayService for want of them (gitray.plans.prerequisites)."""
    kube = Kube.connect(KubeSettings(kubeconfig=testenv.kubeconfig))
    assert absent_apis(kube, [GATEWAY_API]) == frozenset()


def test_traefik_accepted_the_gateway_class_and_serves_metrics(
        testenv: TestEnv, gateway: dict[str, str]) -> None:
    testenv.kubectl("wait", "--for=condition=Accepted", "--timeout=30s",
                    f"gatewayclass/{GATEWAY_CLASS}")
    assert "# TYPE traefik_" in get_text(gateway["metrics"])
