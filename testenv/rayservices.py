"""The RayServices tests and benchmarks run on the real environment: the examples-repo
RayService moved to a namespace, sized for the real node, or upgraded incrementally through
the Gateway. Plain values: nothing here imitates Kubernetes or Ray.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from testenv.manifests import dump, serve_config

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_SERVICE = REPO_ROOT / "examples-repo" / "ray-serve" / "rayservice.yaml"
_yaml = YAML(typ="safe", pure=True)


def example_rayservice(namespace: str, *, image: str = "rayproject/ray:2.60.0",
                       serve: str | None = None, name: str = "serve-demo",
                       revision: int = 0, workers: int | None = None) -> dict[str, Any]:
    """The examples-repo RayService, moved to ``namespace``, with the given image/Serve config.
    Each ``revision`` > 0 is another cluster spec (an environment variable of the head) with
    the same image: as many blue-green upgrades as a test needs, all runnable on real pods.
    ``workers``: its worker group's replicas (and at most as many minReplicas) instead of the
    example's; a test whose Serve apps fit the head needs none (measured on the suite's
    environment: a RayService with one worker pod used 4.6 CPU-s more than one without, from
    its creation to 60 s after Ready: the worker's `ray health-check` init loop, raylet and
    agents). Every Ray container requests 100m CPU, not the example's 200m, as
    testenv.helpers' real_raycluster_spec: the suite runs up to four modules at once on the
    node's 2 CPUs (in the clean-clone run of c8af979, four modules at once, a Pod of the
    in-cluster Deployment was not bound to the node for two minutes)."""
    doc: dict[str, Any] = copy.deepcopy(_yaml.load(EXAMPLE_SERVICE.read_text()))
    doc["metadata"] = {"name": name, "namespace": namespace}
    cluster = doc["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        group["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100m"
    if workers is not None:
        for group in cluster["workerGroupSpecs"]:
            group["replicas"] = workers
            group["minReplicas"] = min(int(group.get("minReplicas", 0)), workers)
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["image"] = image
    if revision:
        head["env"] = [{"name": "GITRAY_TEST_REVISION", "value": str(revision)}]
    if serve is not None:
        doc["spec"]["serveConfigV2"] = serve
    return doc


# A different image of the same Ray: an image change (blue-green upgrade) that real pods can run
# (the environment imports the locally built Ray image under both names).
NEW_IMAGE = "localhost/gitray-ray:2.60.0"


def real_node_rayservice(namespace: str, image: str = "rayproject/ray:2.60.0",
                         serve: str | None = None, workers: int = 1,
                         name: str = "serve-demo", head_cpu: str | None = None,
                         revision: int = 0, **spec: Any) -> dict[str, Any]:
    """The examples-repo RayService sized for the real node (testenv.helpers'
    real_raycluster_spec: small requests, so two clusters fit side by side), with ``image`` on
    every Ray container, ``serve`` as its Serve config (default greeter + calc), the head's CPU
    request ``head_cpu`` if given, ``revision`` as in example_rayservice, and ``spec``'s
    extra RayService fields (upgradeStrategy, serveService, ...)."""
    from testenv.helpers import real_raycluster_spec
    from testenv.manifests import serve_config

    doc = example_rayservice(namespace, name=name)
    doc["spec"]["serveConfigV2"] = serve or serve_config(GREETER, CALC)
    cluster = real_raycluster_spec(workers=workers)
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        group["template"]["spec"]["containers"][0]["image"] = image
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    if head_cpu:
        head["resources"]["requests"]["cpu"] = head_cpu
    if revision:  # another cluster spec, same image (as example_rayservice's revision)
        head["env"] = [*head.get("env", []),
                       {"name": "GITRAY_TEST_REVISION", "value": str(revision)}]
    doc["spec"]["rayClusterConfig"] = cluster
    doc["spec"].update(copy.deepcopy(spec))
    return doc


def incremental_rayservice(ns: str, version: int, *, metrics: str, name: str,
                           gateway_class: str = "traefik", interval: int = 15,
                           fail_every: int = 0, failure_limit: int = 2,
                           pauses: list[dict[str, Any]] | None = None,
                           checks: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A RayService upgraded with NewClusterWithIncrementalUpgrade (steps of 25 %, surge 50 %,
    ``interval`` s) on the real node: the hello app answering ``v<version>`` (every
    ``fail_every``-th request of its replica an HTTP 500) on a cluster spec of its own
    (``revision``), analysed at each step (``gitray.io/analysis``: Serve health and a success
    rate >= 99 % of at least 20 requests from the gateway's ``metrics``, ``failureLimit``,
    ``pauses``, and ``checks`` besides)."""
    args: dict[str, Any] = {"greeting": f"v{version}"}
    if fail_every:
        args["fail_every"] = fail_every
    doc = real_node_rayservice(
        ns, serve=serve_config(("hello", "/hello", "hello:build"), args=args), workers=0,
        name=name, revision=version,
        upgradeStrategy={"type": "NewClusterWithIncrementalUpgrade", "clusterUpgradeOptions": {
            "gatewayClassName": gateway_class, "stepSizePercent": 25, "maxSurgePercent": 50,
            "intervalSeconds": interval}})
    analysis: dict[str, Any] = {
        "metrics": {"url": metrics},
        "checks": [{"type": "serve-health"},
                   {"type": "success-rate", "min": 99, "minRequests": 20}, *checks],
        "failureLimit": failure_limit,
    }
    if pauses:
        analysis["pauses"] = pauses
    doc["metadata"]["annotations"] = {"gitray.io/analysis": dump(analysis)}
    return doc


GREETER = ("greeter", "/greet", "serve_apps.greeter:app")
CALC = ("calc", "/calc", "serve_apps.calc:app")
HELLO = ("hello", "/hello", "hello:app")
