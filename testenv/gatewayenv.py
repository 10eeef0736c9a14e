"""A real Gateway in the test environment: the Gateway API CRDs, a GatewayClass ``traefik``
and Traefik with its Kubernetes Gateway provider, out of cluster (stdlib only).

Started by ``scripts/testenv up --gateway`` (real node only: Traefik sends requests to the
pods' addresses in its EndpointSlices, which kwok's loopback pods never get).
tests/integration/test_incremental.py sends requests through it.

- The CRDs are ``config/crd/standard`` of sigs.k8s.io/gateway-api (testenv/traefik.py),
  applied server-side and waited for (Established).
- Traefik binds its ``web`` entry point to ``127.<pod net>.254.1:80``: inside this
  environment's claimed loopback /16 (kwok's pods use .0 and .1, kwok's own cidr .255), so
  several environments never collide, and on port 80 because Traefik attaches a Gateway
  listener to the entry point whose address ends in its port (gitray's Gateways listen on 80).
  Its Gateway status address is that IP.
- Ping and Prometheus metrics (per service, with finer latency buckets than Traefik's
  default 0.1/0.3/1.2/5 s) are on an entry point of their own on 127.0.0.1, a free port.
- KubeRay's ``RayServiceIncrementalUpgrade`` feature gate goes on with it (control.py), for the
  side-by-side comparison with KubeRay's own incremental upgrade.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from testenv import control, procs
from testenv.traefik import GatewayLayout

__all__ = ["CONTROLLER_NAME", "GATEWAY_CLASS", "LATENCY_BUCKETS", "crd_names",
           "gateway_address", "gateway_up", "require_built", "traefik_args"]

GATEWAY_CLASS = "traefik"
CONTROLLER_NAME = "traefik.io/gateway-controller"
LATENCY_BUCKETS = "0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10"
WEB_PORT = 80


def gateway_address(pod_net: int) -> str:
    """Where this environment's Gateway listens (inside its claimed 127.<pod_net>.0.0/16)."""
    return f"127.{pod_net}.254.1"


def crd_names(files: list[Path]) -> list[str]:
    """``crd/<plural>.<group>`` of CRD files named ``<group>_<plural>.yaml``."""
    names = []
    for f in files:
        found = re.fullmatch(r"(?P<group>[^_]+)_(?P<plural>[^.]+)\.yaml", f.name)
        if found is None:
            raise control.EnvError(f"unexpected CRD file name {f.name}")
        names.append(f"crd/{found['plural']}.{found['group']}")
    return names


def require_built(gl: GatewayLayout) -> None:
    """Raise EnvError, in one line naming the command, unless ``build`` installed them."""
    if not gl.complete():
        raise control.EnvError(f"Traefik or the Gateway API CRDs are not built (in "
                               f"{gl.root}); run: scripts/testenv build")


def traefik_args(binary: Path, address: str, admin_port: int) -> list[str]:
    return [
        str(binary), "--global.checkNewVersion=false", "--global.sendAnonymousUsage=false",
        f"--entryPoints.web.address={address}:{WEB_PORT}",
        f"--entryPoints.admin.address=127.0.0.1:{admin_port}",
        "--ping=true", "--ping.entryPoint=admin",
        "--metrics.prometheus=true", "--metrics.prometheus.entryPoint=admin",
        "--metrics.prometheus.addServicesLabels=true",
        f"--metrics.prometheus.buckets={LATENCY_BUCKETS}",
        "--providers.kubernetesgateway=true",
        f"--providers.kubernetesgateway.statusAddress.ip={address}",
        "--log.level=INFO",
    ]


def _gateway_class() -> str:
    return json.dumps({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS}, "spec": {"controllerName": CONTROLLER_NAME},
    })


def gateway_up(state: control.State, gl: GatewayLayout, starter: control._Starter,
               step: Callable[[str], Callable[[], None]]) -> None:
    """CRDs, GatewayClass, Traefik; recorded in ``state.components["traefik"]`` with its
    ``web`` and ``metrics`` URLs."""
    require_built(gl)
    done = step("Gateway API CRDs")
    files = gl.crd_files()
    control.kubectl(state, "apply", "--server-side", *[a for f in files for a in ("-f", str(f))])
    control.kubectl(state, "wait", "--for=condition=Established", "--timeout=60s",
                    *crd_names(files))
    control.kubectl(state, "apply", "-f", "-", stdin=_gateway_class())
    done()

    done = step("Traefik (Kubernetes Gateway provider)")
    address, admin = gateway_address(state.pod_net), procs.free_port()
    pid, log = starter.start("traefik", traefik_args(gl.traefik, address, admin), [admin],
                             env={**os.environ, "KUBECONFIG": state.kubeconfig})
    control._wait("traefik", lambda: control._http_ok(f"http://127.0.0.1:{admin}/ping"), 60,
                  pid, log)
    control._wait(f"GatewayClass {GATEWAY_CLASS} accepted", lambda: control.kubectl(
        state, "wait", "--for=condition=Accepted", "--timeout=5s",
        f"gatewayclass/{GATEWAY_CLASS}", check=False).returncode == 0, 60, pid, log)
    state.components["traefik"].update({"web": f"http://{address}:{WEB_PORT}",
                                        "metrics": f"http://127.0.0.1:{admin}/metrics"})
    state.save()
    done()
