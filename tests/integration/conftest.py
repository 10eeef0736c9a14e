"""Fixtures for integration tests against the real loopback environment (see docs/testenv.md).

- `testenv` (session): a `tests.testenv.helpers.TestEnv` — `.kubeconfig` (path), `.api_client`
  (kubernetes.client.ApiClient), `.core` (CoreV1Api), `.custom` (CustomObjectsApi), `.state`
  (PIDs, ports, state dir), `.pod_network`, helpers `create_raycluster`, `wait_head_pod`,
  `wait_dashboard`, `wait_serve_running`, `ray_heads`, `kubectl`; plus `wait_for` in
  tests.testenv.helpers. Reuses the environment in `$GITRAY_TESTENV_STATE` when set (never
  stops it); otherwise starts its own in a fresh state dir and stops it at session end.
- `namespace` (function): name of a fresh namespace, deleted after the test.
- `realnode` (module): an environment of its own **with the real node** (kubelet, containerd,
  kube-proxy, CoreDNS; pods get 198.18.0.x IPs, Services 198.19.0.x; KubeRay with
  `--use-kubernetes-proxy`); `realnode.real_node` has its facts. Reuses
  `$GITRAY_TESTENV_NODE_STATE` when set. One real node per machine: it waits (bounded) for
  another one to go. `node_namespace` (function): a fresh namespace in it.

Every test in tests/integration/ is marked `integration`. A missing or broken environment FAILS
the tests (never skips), with or without CI=true.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testenv.helpers import EnvUnavailable, TestEnv, environment, wait_for

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def testenv() -> Iterator[TestEnv]:
    try:
        with environment(os.environ.get("GITRAY_TESTENV_STATE")) as (env, _):
            yield env
    except EnvUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def realnode() -> Iterator[TestEnv]:
    try:
        with environment(os.environ.get("GITRAY_TESTENV_NODE_STATE"),
                         prefix="gitray-testenv-node-", real_node=True, node_wait=600) as (env, _):
            if not env.real_node:
                pytest.fail("GITRAY_TESTENV_NODE_STATE names an environment without a real node")
            yield env
    except EnvUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def node_namespace(realnode: TestEnv) -> Iterator[str]:
    from kubernetes import client

    name = f"n-{uuid.uuid4().hex[:8]}"
    realnode.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        realnode.core.delete_namespace(name)
        # real pods take real memory: don't let them pile up across tests
        wait_for(lambda: not realnode.core.list_namespaced_pod(name).items, timeout=120,
                 what=f"pods of namespace {name} gone")


@pytest.fixture
def namespace(testenv: TestEnv) -> Iterator[str]:
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:8]}"
    testenv.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        testenv.core.delete_namespace(name)

        def gone() -> bool:
            pods = testenv.core.list_namespaced_pod(name).items
            return not pods and not [h for h in testenv.ray_heads() if h["namespace"] == name]
        # don't let Ray heads (about 1 GB each) pile up across tests, nor their IPs linger
        wait_for(gone, timeout=120, what=f"pods and Ray heads of namespace {name} gone")
