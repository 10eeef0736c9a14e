"""The test environment's build recipe for Traefik and the Gateway API CRDs
(testenv/traefik.py): its cache layout and the checks it makes before compiling.
The real build is measured in docs/testenv.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from testenv import build
from testenv.traefik import GATEWAY_API, TRAEFIK, GatewayLayout, _required_version

GOMOD = """\
module github.com/traefik/traefik/v3

go 1.25.0

require (
\tk8s.io/client-go v0.34.1
\tsigs.k8s.io/gateway-api v1.4.0
)

require sigs.k8s.io/yaml v1.6.0 // indirect

replace github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59
"""


def test_each_component_has_a_cache_entry_keyed_by_its_own_version(tmp_path: Path) -> None:
    gl = GatewayLayout(tmp_path)
    assert gl.traefik == tmp_path / "traefik-v3.6.12" / "bin" / "traefik"
    assert gl.crds == tmp_path / "gateway-api-v1.4.0" / "crds"
    assert (TRAEFIK[1], GATEWAY_API[1]) == ("v3.6.12", "v1.4.0")
    assert not gl.complete()
    gl.crds.mkdir(parents=True)
    (gl.crds / "gateway.networking.k8s.io_httproutes.yaml").write_text("kind: CRD\n")
    gl.traefik.parent.mkdir(parents=True)
    assert not gl.complete()
    gl.traefik.write_bytes(b"\x7fELF")
    assert gl.complete()


@pytest.mark.parametrize(("module", "expected"), [
    ("sigs.k8s.io/gateway-api", "v1.4.0"),  # in a require block
    ("sigs.k8s.io/yaml", "v1.6.0"),  # on a require line of its own
    ("github.com/gorilla/mux", None),  # replaced, not required here
    ("sigs.k8s.io/gateway", None),  # a prefix is not the module
])
def test_the_gateway_api_pin_is_checked_against_traefiks_go_mod(module: str,
                                                                 expected: str | None) -> None:
    assert _required_version(GOMOD, module) == expected


def test_goflags_from_the_environment_are_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """`GOFLAGS=-p=1 scripts/testenv build` limits the compile on a shared machine."""
    monkeypatch.setenv("GOFLAGS", "-p=1")
    assert build._go_env()["GOFLAGS"] == "-mod=mod -p=1"
    assert build._go_env(goflags="-mod=readonly")["GOFLAGS"] == "-mod=readonly -p=1"
    monkeypatch.delenv("GOFLAGS")
    assert build._go_env()["GOFLAGS"] == "-mod=mod"


def test_traefik_attaches_gitrays_gateways_and_exposes_metrics_apart() -> None:
    """Traefik attaches a Gateway listener (gitray's listen on 80) to the entry point whose
    address ends in its port; ping and metrics stay on 127.0.0.1, a port of their own."""
    from gitray.plans.rayservice.gateway import GATEWAY_PORT
    from testenv.gatewayenv import crd_names, gateway_address, traefik_args

    address = gateway_address(7)
    assert address == "127.7.254.1"  # the environment's own /16, outside kwok's ranges
    args = traefik_args(Path("/c/traefik"), address, 45678)
    assert f"--entryPoints.web.address=127.7.254.1:{GATEWAY_PORT}" in args
    assert "--entryPoints.admin.address=127.0.0.1:45678" in args
    assert "--providers.kubernetesgateway.statusAddress.ip=127.7.254.1" in args
    assert {"--ping.entryPoint=admin", "--metrics.prometheus.entryPoint=admin"} <= set(args)
    assert crd_names([Path("gateway.networking.k8s.io_httproutes.yaml")]) == \
        ["crd/httproutes.gateway.networking.k8s.io"]
