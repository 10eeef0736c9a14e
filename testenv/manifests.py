"""Test builders for what goes into a GitOps repository: RayCluster specs, Serve configs,
gitray.yaml, YAML documents. The one place unit tests, integration tests and benchmarks take
them from (each with its own defaults passed in, not its own copy).

Plain values (and ``write_files``, which puts them into a work tree): nothing here imitates
Kubernetes, Ray or Git.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import walk_tree

__all__ = ["RAY_IMAGE", "cluster_spec", "dump", "gitray_config", "serve_config", "write_files"]

RAY_IMAGE = "rayproject/ray:2.60.0"
_HEAD_PORTS = [{"name": "dashboard", "containerPort": 8265},
               {"name": "serve", "containerPort": 8000}]
_ALL_HEAD_PORTS = [{"name": "gcs-server", "containerPort": 6379},
                   {"name": "dashboard", "containerPort": 8265},
                   {"name": "client", "containerPort": 10001},
                   {"name": "serve", "containerPort": 8000}]


def dump(*docs: Any) -> str:
    """Documents as YAML; multi-line strings (serveConfigV2) as literal blocks."""
    out = StringIO()
    writer = YAML(typ="rt", pure=True)
    writer.explicit_start = True
    docs = copy.deepcopy(docs)
    for doc in docs:
        walk_tree(doc)
    writer.dump_all(list(docs), out)
    return out.getvalue()


def cluster_spec(image: str = RAY_IMAGE, replicas: int = 1, autoscaling: bool = False,
                 min_replicas: int = 1, max_replicas: int = 3, *, realistic: bool = False,
                 suspend: bool = False) -> dict[str, Any]:
    """A RayCluster spec: a head and one worker group ``workers``.

    ``realistic`` adds what a cluster in a real namespace declares (rayVersion, every head
    port, CPU/memory requests and limits); ``suspend`` keeps KubeRay from starting pods.
    """
    head: dict[str, Any] = {"name": "ray-head", "image": image,
                            "ports": copy.deepcopy(_ALL_HEAD_PORTS if realistic else _HEAD_PORTS)}
    worker: dict[str, Any] = {"name": "ray-worker", "image": image}
    if realistic:
        head["resources"] = {"requests": {"cpu": "1", "memory": "2Gi"},
                             "limits": {"cpu": "2", "memory": "4Gi"}}
        worker["resources"] = {"requests": {"cpu": "1", "memory": "2Gi"},
                               "limits": {"cpu": "1", "memory": "2Gi"}}
    spec: dict[str, Any] = {"rayVersion": "2.60.0"} if realistic else {}
    spec |= {
        "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"},
                          "template": {"spec": {"containers": [head]}}},
        "workerGroupSpecs": [{
            "groupName": "workers", "replicas": replicas, "minReplicas": min_replicas,
            "maxReplicas": max_replicas, "rayStartParams": {},
            "template": {"spec": {"containers": [worker]}},
        }],
    }
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    if suspend:
        spec["suspend"] = True
    return spec


def _flow(value: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"


def serve_config(*apps: tuple[str, ...], import_path: str = "serve_apps.greeter:app",
                 args: Mapping[str, Any] | None = None,
                 deployments: Sequence[Mapping[str, Any]] = ()) -> str:
    """serveConfigV2 text: one application per ``(name, route_prefix[, import_path])``
    (default: the greeter at /greet), each with ``args`` and ``deployments`` when given."""
    lines = ["applications:"]
    for app in apps or (("greeter", "/greet"),):
        name, route = app[0], app[1]
        lines += [f"  - name: {name}", f"    route_prefix: {route}",
                  f"    import_path: {app[2] if len(app) > 2 else import_path}"]
        if args:
            lines.append(f"    args: {_flow(args)}")
        if deployments:
            lines.append("    deployments:")
            for deployment in deployments:
                first, *rest = deployment.items()
                lines.append(f"      - {first[0]}: {first[1]}")
                lines += [f"        {k}: {_flow(v) if isinstance(v, Mapping) else v}"
                          for k, v in rest]
    return "\n".join(lines) + "\n"


def gitray_config(deletion_delay: str = "10s", namespace: str | None = None, *,
                  allowed: Sequence[str] | None = None, ready_timeout: str = "3m",
                  **extra: Any) -> str:
    """gitray.yaml for a test; with ``namespace`` (or ``allowed`` globs) it only sees those
    namespaces, so objects left in other tests' (terminating) namespaces never enter its
    plans."""
    namespaces = list(allowed) if allowed is not None else [namespace] if namespace else ["*"]
    doc: dict[str, Any] = {"apiVersion": "gitray.io/v1alpha1", "kind": "Config",
                           "allowedNamespaces": namespaces,
                           "rayService": {"deletionDelay": deletion_delay,
                                          "clusterReadyTimeout": ready_timeout,
                                          "serveReadyTimeout": ready_timeout}}
    doc.update(extra)
    return dump(doc)


def write_files(root: Path, files: Mapping[str, str | None]) -> None:
    """Write each file under ``root`` (creating directories); None deletes it."""
    for rel, text in files.items():
        target = root / rel
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
