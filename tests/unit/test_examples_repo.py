"""examples-repo/ is what users copy: it must validate cleanly and mean what its comments say."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitray.core.model import ObjectKey, Workload
from gitray.git.source import read_snapshot
from gitray.plans.load import LoadResult, load_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples-repo"


@pytest.fixture(scope="module")
def examples() -> LoadResult:
    return load_snapshot(read_snapshot(str(EXAMPLES)))


def by_kind(result: LoadResult, kind: str) -> Workload:
    (workload,) = [w for w in result.workloads if w.key.kind == kind]
    return workload


def test_examples_repo_validates_with_no_diagnostics(examples: LoadResult) -> None:
    assert [str(d) for d in examples.diagnostics] == []
    assert [w.key for w in examples.workloads] == [
        ObjectKey("ConfigMap", "ray-jobs", "pi-estimate-code"),
        ObjectKey("RayCluster", "ray-dev", "interactive"),
        ObjectKey("RayJob", "ray-jobs", "pi-estimate"),
        ObjectKey("RayService", "ray-serve", "serve-demo"),
    ]


def test_examples_gitray_yaml_sets_what_the_docs_promise(examples: LoadResult) -> None:
    config = examples.config
    assert config.allowed_namespaces == ("ray-*", "default")
    assert config.rayservice.deletion_delay_s == 60
    assert config.rayservice.cluster_ready_timeout_s == 900
    assert config.rayservice.serve_ready_timeout_s == 600


def test_the_rayservice_serves_two_applications(examples: LoadResult) -> None:
    spec = by_kind(examples, "RayService").spec
    serve = YAML(typ="safe", pure=True).load(spec["serveConfigV2"])
    apps = {a["name"]: a for a in serve["applications"]}
    assert {n: (a["import_path"], a["route_prefix"]) for n, a in apps.items()} == {
        "greeter": ("serve_apps.greeter:app", "/greet"),
        "calc": ("serve_apps.calc:app", "/calc"),
    }
    assert all(d["num_replicas"] == 1 for a in apps.values() for d in a["deployments"])
    head = spec["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"] == {"dashboard-host": "0.0.0.0"}
    (container,) = head["template"]["spec"]["containers"]
    assert container["image"] == "rayproject/ray:2.60.0"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000,
    }
    (workers,) = spec["rayClusterConfig"]["workerGroupSpecs"]
    assert workers["replicas"] == 1


def test_the_raycluster_autoscales_its_workers(examples: LoadResult) -> None:
    spec = by_kind(examples, "RayCluster").spec
    assert spec["enableInTreeAutoscaling"] is True
    (group,) = spec["workerGroupSpecs"]
    assert group["minReplicas"] < group["maxReplicas"]


def test_the_rayjob_runs_the_script_its_configmap_mounts(examples: LoadResult) -> None:
    job = by_kind(examples, "RayJob")
    configmap = by_kind(examples, "ConfigMap")
    pod = job.spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert volume["configMap"]["name"] == configmap.key.name
    assert configmap.key.namespace == job.key.namespace
    (item,) = volume["configMap"]["items"]
    assert item["key"] in configmap.manifest["data"]
    script = f"{mount['mountPath']}/{item['path']}"
    assert job.spec["entrypoint"] == f"python {script}"
    compile(configmap.manifest["data"][item["key"]], item["key"], "exec")


def test_the_committed_examples_validate_too() -> None:
    result = load_snapshot(read_snapshot(str(EXAMPLES), "HEAD"))
    assert [str(d) for d in result.diagnostics] == []


@pytest.fixture
def serve_apps() -> Iterator[Any]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module("serve_apps")
    finally:
        sys.path.remove(str(EXAMPLES))


def request(query: str) -> Any:
    from starlette.requests import Request

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [],
             "query_string": query.encode()}
    return Request(scope)


@pytest.mark.parametrize(
    ("module", "query", "status", "body"),
    [
        pytest.param("greeter", "name=Ada", None, "Hello, Ada!", id="greeter greets by name"),
        pytest.param("greeter", "", None, "Hello, world!", id="greeter without a name"),
        pytest.param("calc", "op=mul&a=6&b=7", 200, b'{"result":42.0}', id="calc multiplies"),
        pytest.param("calc", "op=div&a=1&b=0", 400, b'{"error":"float division by zero"}',
                     id="calc refuses division by zero"),
        pytest.param("calc", "op=pow", 400, b"op must be one of", id="calc refuses unknown ops"),
    ],
)
def test_the_serve_apps_answer(serve_apps: Any, module: str, query: str, status: int | None,
                               body: object) -> None:
    from ray.serve import Application

    mod = importlib.import_module(f"serve_apps.{module}")
    assert isinstance(mod.app, Application)  # what the import path serve_apps.<m>:app names
    deployment_class = next(v for v in vars(mod).values() if hasattr(v, "func_or_class"))
    answer = asyncio.run(deployment_class.func_or_class()(request(query)))
    if status is None:
        assert answer == body
    else:
        assert answer.status_code == status
        assert isinstance(body, bytes) and body in answer.body
