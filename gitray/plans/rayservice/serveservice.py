"""A RayService's ``spec.serveService``: the user's template for the serve Service. Pure.

As KubeRay does, the serve Service follows the template (name, labels, annotations, type and
the rest of its spec) while the selector is the controller's own: gitray points it at the
active cluster's pods whose Serve proxy is healthy. Its ports are, as KubeRay's, the head's
serving ports (named ``serve`` or ``serve-*``; ``serve`` is 8000 unless the head names it),
each replaced by the template's port of the same name; a template port with another name is
not used, and gitray warns about it. Where gitray differs from KubeRay v1.6: a selector, a
namespace other than the RayService's, or a name that clashes with the head Service is refused
rather than silently replaced.

A change to the template is applied in place (server-side apply, so the Service keeps its
clusterIP); a new name creates the new Service and then deletes the old one.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from gitray.core.model import JSON, Diagnostic, stable_hash
from gitray.parsing.text import JsonPath
from gitray.parsing.yamlsafe import YamlDocument
from gitray.plans.names import head_service_name, serve_service_name

__all__ = ["DEFAULT_HEAD_PORTS", "head_ports", "serve_service_hash", "serve_service_ports",
           "serve_service_problems", "serve_service_template", "serve_service_warnings",
           "wanted_serve_service_name"]

_TEMPLATE: JsonPath = ("spec", "serveService")
_SERVICE_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # DNS-1035 label, as for Services

# KubeRay's default head ports by name (REFERENCE.md); a manifest's named ports win.
DEFAULT_HEAD_PORTS: dict[str, int] = {
    "gcs-server": 6379,
    "dashboard": 8265,
    "client": 10001,
    "serve": 8000,
}


def head_ports(cluster_spec: Mapping[str, JSON]) -> dict[str, int]:
    """Named container ports of the head's first container, over KubeRay's defaults."""
    ports = dict(DEFAULT_HEAD_PORTS)
    head = cluster_spec.get("headGroupSpec") or {}
    containers = ((head.get("template") or {}).get("spec") or {}).get("containers") or []
    if containers and isinstance(containers[0], dict):
        for port in containers[0].get("ports") or []:
            if isinstance(port, dict) and port.get("name") and port.get("containerPort"):
                ports[str(port["name"])] = int(port["containerPort"])
    return ports


def serve_service_template(spec: Mapping[str, JSON]) -> Mapping[str, Any] | None:
    template = spec.get("serveService")
    return template if isinstance(template, Mapping) else None


def wanted_serve_service_name(service: str, spec: Mapping[str, JSON]) -> str:
    """The template's ``metadata.name``, else ``<service>-serve-svc``."""
    meta = (serve_service_template(spec) or {}).get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else serve_service_name(service)


def serve_service_hash(spec: Mapping[str, JSON]) -> str | None:
    """Identity of the template (None without one): a change is applied to the Service."""
    template = serve_service_template(spec)
    return None if template is None else stable_hash(template, 16)


def _serving(name: str) -> bool:
    return name == "serve" or name.startswith("serve-")


def serve_service_ports(template: Mapping[str, Any],
                        head_ports: Mapping[str, int]) -> list[dict[str, Any]]:
    """The head's serving ports, each replaced by the template's port of the same name."""
    body = _mapping(template.get("spec"))
    mine = {p.get("name"): p for p in body.get("ports") or [] if isinstance(p, Mapping)}
    return [copy.deepcopy(dict(mine[name])) if name in mine else
            {"name": name, "port": port, "targetPort": port, "protocol": "TCP"}
            for name, port in sorted(head_ports.items()) if _serving(name)]


def serve_service_warnings(document: YamlDocument, spec: Mapping[str, JSON]) -> list[Diagnostic]:
    """Template ports the serve Service will not have (KubeRay drops them too)."""
    template = serve_service_template(spec)
    if template is None:
        return []
    serving = sorted(n for n in head_ports(_mapping(spec.get("rayClusterConfig")))
                     if _serving(n))
    found = []
    for index, port in enumerate(_mapping(template.get("spec")).get("ports") or []):
        name = port.get("name") if isinstance(port, Mapping) else None
        if name not in serving:
            found.append(Diagnostic(
                document.locate((*_TEMPLATE, "spec", "ports", index)),
                f"spec.serveService.spec.ports[{index}] ({name or 'unnamed'}) is not used: as "
                f"with KubeRay, the serve Service has the head's serving ports "
                f"({', '.join(serving)}); name it after one of them to change that port"))
    return found


def serve_service_problems(document: YamlDocument, service: str, namespace: str | None,
                           spec: Mapping[str, JSON]) -> list[Diagnostic]:
    template = serve_service_template(spec)
    if template is None:
        return []
    problems: list[Diagnostic] = []

    def refuse(path: JsonPath, message: str) -> None:
        problems.append(Diagnostic(document.locate((*_TEMPLATE, *path)),
                                   f"spec.serveService.{'.'.join(map(str, path))} {message}"))

    meta = _mapping(template.get("metadata"))
    name = meta.get("name")
    if isinstance(name, str) and name:
        if len(name) > 63 or not _SERVICE_NAME.match(name):
            refuse(("metadata", "name"), f"{name!r} is not a valid Service name: lowercase "
                   "letters, digits and '-', starting with a letter, at most 63 characters")
        elif name == head_service_name(service):
            refuse(("metadata", "name"), f"{name!r} is the head Service's name; choose another")
    other = meta.get("namespace")
    if other is not None and other != namespace:
        refuse(("metadata", "namespace"), f"{other!r} is not the RayService's own namespace "
               f"({namespace or 'not written on the RayService'}): the serve Service lives "
               "next to the RayService; remove it")
    body = _mapping(template.get("spec"))
    if "selector" in body:
        refuse(("spec", "selector"), "is gitray's: the serve Service always selects the active "
               "cluster's pods with a healthy Serve proxy; remove it")
    if body.get("type") == "ExternalName":
        refuse(("spec", "type"), "ExternalName cannot select pods; use ClusterIP, NodePort or "
               "LoadBalancer")
    return problems


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
