"""Fixtures for integration tests against the real environment (see docs/testenv.md).

- `testenv` (session): a `testenv.helpers.TestEnv` of an environment **with the real
  node** (kubelet, containerd, runc, CNI, kube-proxy, CoreDNS: Ray runs in real pods with
  198.18.0.x IPs, Services get 198.19.0.x ClusterIPs; KubeRay with `--use-kubernetes-proxy`);
  kwok's two fake nodes are tainted and take only pods that tolerate that (scale tests).
  `.kubeconfig` (path), `.api_client`, `.core` (CoreV1Api), `.custom` (CustomObjectsApi),
  `.state`, `.real_node` (facts), helpers `create_raycluster`, `wait_raycluster_ready`,
  `wait_head_pod`, `endpoint_addresses`, `wait_serve_running`, `kubectl`; plus `wait_for` in
  testenv.helpers. Reuses the environment in `$GITRAY_TESTENV_STATE` (or
  `$GITRAY_TESTENV_NODE_STATE`) when set, never stopping it; otherwise starts its own in a
  fresh state dir and stops it at session end. One real node per machine: it waits (bounded)
  for another one to go.
- `namespace` (function): name of a fresh namespace, deleted (and its pods gone) after the test.
- Tests marked `own_node` start an environment with the real node of their own; they are run
  first (the session's environment holds the machine's one real node from its start to the end
  of the session), so they cannot run beside a reused `$GITRAY_TESTENV_STATE`.
- Tests marked `gateway` need Traefik and the Gateway API CRDs (part of `scripts/testenv
  build`; they run in scripts/test with the rest, alone with `scripts/test-gateway`). When one
  is selected, the session's environment is started with `up --gateway`; the `gateway` fixture
  gives Traefik's `web` and `metrics` URLs.
- `remote` (function): a bare Git repository (`main`) in the test's tmp dir and a work
  clone (`GitOpsRepo`) whose `origin` it is: what `gitray sync` tests push to.
- `kwokenv` (module): an environment of its own without the real node (kwok's nodes and the
  Ray pod runner, which runs Ray heads on the host: what bench/ uses), for the runner's tests;
  `kwok_namespace` (function): a fresh namespace in it.

Every test in tests/integration/ is marked `integration`. A missing or broken environment FAILS
the tests (never skips), with or without CI=true.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testenv.helpers import (
    EnvUnavailable,
    TestEnv,
    drop_namespace,
    environment,
    make_namespace,
    wait_for,
)
from tests.integration.chaos import Replica
from tests.integration.gitops import GitOpsRepo

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
    # The machine has one real node. Tests that bring up an environment of their own with it
    # (`scripts/testenv up`/`down`, the README walkthrough) run first, before the session's
    # environment takes the node and holds it to the end.
    items.sort(key=lambda item: item.get_closest_marker("own_node") is None)


def _selects_gateway_tests(session: pytest.Session) -> bool:
    """Whether a selected test (after -m) is marked ``gateway``."""
    return any(item.get_closest_marker("gateway") for item in session.items)


@pytest.fixture(scope="session")
def testenv(request: pytest.FixtureRequest) -> Iterator[TestEnv]:
    reuse = os.environ.get("GITRAY_TESTENV_STATE") or os.environ.get("GITRAY_TESTENV_NODE_STATE")
    try:
        with environment(reuse, prefix="gitray-testenv-node-", real_node=True, node_wait=600,
                         gateway=_selects_gateway_tests(request.session)) as (env, _):
            if not env.real_node:
                pytest.fail(f"GITRAY_TESTENV_STATE={env.state.dir} is an environment without "
                            "the real node (started with --no-node): Ray workloads need real pods")
            yield env
    except EnvUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def gateway(testenv: TestEnv) -> dict[str, str]:
    """Traefik in the session's environment: ``{"web": ..., "metrics": ...}`` URLs (a
    `gateway`-marked test; the environment was started with ``up --gateway``)."""
    traefik = testenv.state.components.get("traefik")
    if not traefik:
        pytest.fail(f"the test environment in {testenv.state.dir} has no Gateway: run "
                    "scripts/testenv build (and up --gateway for a reused one)")
    return {"web": str(traefik["web"]), "metrics": str(traefik["metrics"])}


@pytest.fixture(scope="module")
def kwokenv() -> Iterator[TestEnv]:
    try:
        with environment(None, prefix="gitray-testenv-kwok-") as (env, _):
            yield env
    except EnvUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def namespace(testenv: TestEnv) -> Iterator[str]:
    name = make_namespace(testenv)
    try:
        yield name
    finally:
        drop_namespace(testenv, name)


@pytest.fixture
def remote(tmp_path: Path) -> tuple[Path, GitOpsRepo]:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = GitOpsRepo(tmp_path / "work")
    work.git("remote", "add", "origin", str(bare))
    return bare, work


@pytest.fixture
def kwok_namespace(kwokenv: TestEnv) -> Iterator[str]:
    name = make_namespace(kwokenv, "k")
    try:
        yield name
    finally:
        kwokenv.core.delete_namespace(name)

        def gone() -> bool:
            pods = kwokenv.core.list_namespaced_pod(name).items
            return not pods and not [h for h in kwokenv.ray_heads() if h["namespace"] == name]
        # the runner's Ray heads take about 1 GB each: don't let them pile up across tests
        wait_for(gone, timeout=180, what=f"pods and Ray heads of namespace {name} gone")


@pytest.fixture
def sync_proc(testenv: TestEnv, namespace: str, remote: tuple[Path, GitOpsRepo],
              tmp_path: Path) -> Iterator[Replica]:
    """``gitray sync`` of ``remote`` (1 s polls, statuses as the test's gitray.yaml says)."""
    from tests.integration.test_daemon import start_sync

    bare, _ = remote
    sync = start_sync(testenv, namespace, bare, tmp_path)
    yield sync
    sync.terminate()
