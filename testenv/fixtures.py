"""The test environment's pytest plugin: the one place fixtures start or reuse an environment
(registered for every pytest run by the repository's root conftest.py; the integration
tests take them from here; bench/run, the soak test and test_failover's second environment call
`testenv.helpers.environment`, which these are built on, directly).

- `testenv` (session): an environment **with the real node**, reused from
  ``$GITRAY_TESTENV_STATE`` (or ``$GITRAY_TESTENV_NODE_STATE``) when set and never stopped then,
  otherwise started in a fresh state dir and stopped at the session's end; started with
  ``up --gateway`` when a selected test is marked `gateway`.
- `gateway` (session): Traefik's ``web`` and ``metrics`` URLs in that environment.
- `kwokenv` (module): an environment of its own without the real node (kwok's nodes and the Ray
  pod runner), stopped after the module.
- `apiserver` (session): for tests that need only the API server (Leases, ConfigMaps): the
  environment of ``$GITRAY_TESTENV_STATE`` (or ``$GITRAY_TESTENV_NODE_STATE``), with or without
  the real node, never stopped then; otherwise one without the real node of its own, stopped at
  the session's end (it never waits for the machine's real node).
- `namespace` / `kwok_namespace` / `api_namespace` (function): a fresh namespace in one of
  them, deleted after the test (and, in kwokenv, its runner's Ray heads gone).

A missing or broken environment FAILS the test that needs it (never a skip), with or without
CI=true.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import pytest

from testenv.helpers import (
    EnvUnavailable,
    TestEnv,
    drop_namespace,
    environment,
    make_namespace,
    wait_for,
)


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


@pytest.fixture(scope="session")
def apiserver() -> Iterator[TestEnv]:
    reuse = os.environ.get("GITRAY_TESTENV_STATE") or os.environ.get("GITRAY_TESTENV_NODE_STATE")
    try:
        with environment(reuse, prefix="gitray-testenv-api-") as (env, _):
            yield env
    except EnvUnavailable as exc:
        pytest.fail(str(exc))


@contextlib.contextmanager
def _fresh_namespace(env: TestEnv, prefix: str, drop: Callable[[str], None]) -> Iterator[str]:
    name = make_namespace(env, prefix)
    try:
        yield name
    finally:
        drop(name)


@pytest.fixture
def api_namespace(apiserver: TestEnv) -> Iterator[str]:
    with _fresh_namespace(apiserver, "a", apiserver.core.delete_namespace) as name:
        yield name


@pytest.fixture
def namespace(testenv: TestEnv) -> Iterator[str]:
    with _fresh_namespace(testenv, "t", lambda name: drop_namespace(testenv, name)) as name:
        yield name


@pytest.fixture
def kwok_namespace(kwokenv: TestEnv) -> Iterator[str]:
    def drop(name: str) -> None:
        kwokenv.core.delete_namespace(name)

        def gone() -> bool:
            pods = kwokenv.core.list_namespaced_pod(name).items
            return not pods and not [h for h in kwokenv.ray_heads() if h["namespace"] == name]
        # the runner's Ray heads take about 1 GB each: don't let them pile up across tests
        wait_for(gone, timeout=180, what=f"pods and Ray heads of namespace {name} gone")

    with _fresh_namespace(kwokenv, "k", drop) as name:
        yield name
