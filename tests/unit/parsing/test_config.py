"""gitray.yaml and overrides: parsing, defaults, every kind of mistake; path globs."""

from __future__ import annotations

from typing import Any

import pytest

from gitray.core.config import (
    Config,
    RayJobSettings,
    RayServiceSettings,
    StatusProvider,
    StatusSettings,
    parse_duration,
)
from gitray.core.errors import ConfigError
from gitray.parsing.config import config_diagnostics, env_overrides, parse_config
from gitray.parsing.globs import glob_problem, matches_any

HEADER = "apiVersion: gitray.io/v1alpha1\nkind: Config\n"

FULL = HEADER + """\
paths: [services, "jobs/**/*.yaml"]
exclude: [services/legacy]
defaultNamespace: ray-apps
allowedNamespaces: ["ray-*"]
prune: false
allowEmpty: true
supportingKinds: [ConfigMap, ServiceAccount]
instance: staging
maxParallel: 8
rayService:
  clusterReadyTimeout: 20m
  serveReadyTimeout: 1h30m
  deletionDelay: 90
  keepFailedClusters: true
rayJob:
  retention: 5
  timeout: 2h
status:
  provider: gitea
  contextPrefix: gitray-eu
  url: https://git.example.com/api/v1
  repository: ml/serving
"""


def test_no_file_and_no_overrides_gives_the_spec_defaults() -> None:
    assert parse_config(None) == Config()
    assert Config().rayservice.deletion_delay_s == 60
    assert Config().prune is True


def test_an_empty_file_gives_the_defaults() -> None:
    assert parse_config(b"# nothing yet\n") == Config()


def test_every_setting_is_read() -> None:
    assert parse_config(FULL.encode()) == Config(
        paths=("services", "jobs/**/*.yaml"),
        exclude=("services/legacy",),
        default_namespace="ray-apps",
        allowed_namespaces=("ray-*",),
        prune=False,
        allow_empty=True,
        supporting_kinds=("ConfigMap", "ServiceAccount"),
        instance="staging",
        max_parallel=8,
        rayservice=RayServiceSettings(1200, 5400, 90, True),
        rayjob=RayJobSettings(retention=5, timeout_s=7200),
        status=StatusSettings(
            StatusProvider.GITEA, "gitray-eu", "https://git.example.com/api/v1", "ml/serving"
        ),
    )


@pytest.mark.parametrize(
    ("overrides", "attribute", "expected"),
    [
        pytest.param({"prune": True}, "prune", True, id="a flag wins over the file"),
        pytest.param({"rayService": {"deletionDelay": "5m"}}, "rayservice",
                     RayServiceSettings(1200, 5400, 300, True),
                     id="a nested override keeps the file's other section keys"),
        pytest.param({"rayService.serveReadyTimeout": 30}, "rayservice",
                     RayServiceSettings(1200, 30, 90, True), id="a dotted override key"),
        pytest.param({"status": {"provider": "github"}}, "status",
                     StatusSettings(StatusProvider.GITHUB, "gitray-eu",
                                    "https://git.example.com/api/v1", "ml/serving"),
                     id="status provider from the environment"),
        pytest.param({"defaultNamespace": None}, "default_namespace", "ray-apps",
                     id="an unset flag (None) changes nothing"),
    ],
)
def test_overrides_win_over_the_file(overrides: dict[str, Any], attribute: str,
                                     expected: object) -> None:
    config = parse_config(FULL.encode(), overrides=overrides)
    assert getattr(config, attribute) == expected


BAD_FILES = {
    "a wrong apiVersion": (
        "apiVersion: gitray.io/v1\nkind: Config\n",
        "gitray.yaml:1:1: apiVersion: 'gitray.io/v1alpha1' was expected",
    ),
    "a missing kind": ("apiVersion: gitray.io/v1alpha1\n", "'kind' is a required property"),
    "a misspelt key gets a suggestion": (
        HEADER + "rayService:\n  deletionDelai: 10s\n",
        "gitray.yaml:4:3: rayService.deletionDelai: unknown field 'deletionDelai' "
        "(did you mean 'deletionDelay'?)",
    ),
    "a duration in words": (
        HEADER + "rayService:\n  serveReadyTimeout: ten minutes\n",
        "gitray.yaml:4:3: rayService.serveReadyTimeout: 'ten minutes' is not valid: Seconds as "
        "an integer, or a string like 90s",
    ),
    "a negative duration": (
        HEADER + "rayJob:\n  timeout: -5\n", "gitray.yaml:4:3: rayJob.timeout:"
    ),
    "a namespace that is not a DNS label": (
        HEADER + "defaultNamespace: Ray_Apps\n",
        "gitray.yaml:3:1: defaultNamespace: 'Ray_Apps' is not valid: lowercase letters",
    ),
    "a glob that climbs out of the repository": (
        HEADER + "paths: [ok, ../other]\n",
        "gitray.yaml:3:13: paths: glob '../other' uses '..'; it cannot leave the repository",
    ),
    "an absolute exclude glob": (
        HEADER + "exclude:\n  - /etc\n",
        "gitray.yaml:4:5: exclude: glob '/etc' is absolute",
    ),
    "a cluster-scoped supporting kind": (
        HEADER + "supportingKinds: [ConfigMap, ClusterRole]\n",
        "gitray.yaml:3:30: supportingKinds: ClusterRole is cluster-scoped",
    ),
    "a Ray kind listed as supporting": (
        HEADER + "supportingKinds: [RayJob]\n",
        "gitray.yaml:3:19: supportingKinds: RayJob is a Ray workload kind",
    ),
    "maxParallel of zero": (HEADER + "maxParallel: 0\n", "maxParallel: 0 is less than the minimum"),
    "an unknown status provider": (
        HEADER + "status: {provider: bitbucket}\n",
        "gitray.yaml:3:10: status.provider: 'bitbucket' is not one of",
    ),
    "two documents": (HEADER + "---\n" + HEADER, "gitray.yaml:4:1: gitray.yaml must hold a single"),
    "a list instead of a mapping": ("- paths\n", "gitray.yaml:1:1: gitray.yaml must be a mapping"),
    "broken YAML": (HEADER + "paths: [a\n", "gitray.yaml:4:1: YAML syntax error"),
    "an alias bomb": (
        'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n'
        + "".join(f"b{i}: &a{i} [" + ",".join([f"*a{i - 1}" if i else "*a"] * 10) + "]\n"
                  for i in range(9)),
        "aliases expand to more than",
    ),
    "binary content": ("\x00\x01", "gitray.yaml:1:1: binary file"),
}


@pytest.mark.parametrize(("text", "expected"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_bad_gitray_yaml_is_a_located_config_error(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text.encode())
    assert expected in str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    text = HEADER + "prune: yes please\nmaxParallel: 0\npaths: [/abs]\n"
    _, diagnostics = config_diagnostics(text.encode())
    assert [str(d.location) for d in diagnostics] == [
        "gitray.yaml:3:1", "gitray.yaml:4:1", "gitray.yaml:5:9",
    ]


def test_a_bad_override_names_the_flag_source() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(None, overrides={"rayService": {"deletionDelay": "soon"}})
    assert str(caught.value).startswith(
        "(flags/env):1:1: override rayService.deletionDelay: 'soon' is not valid"
    )


def test_an_unknown_override_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown field 'prunee'"):
        parse_config(None, overrides={"prunee": False})


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(0, 0), (45, 45), ("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400),
     ("2h0m5s", 7205)],
)
def test_durations(value: int | str, seconds: int) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "m", "1d", "1.5h", "10 m"])
def test_durations_that_are_not(value: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("path", "patterns", "expected"),
    [
        ("a.yaml", ["**"], True),
        ("deep/er/a.yaml", ["**"], True),
        (".github/workflows/ci.yaml", ["**"], False),
        ("apps/.hidden/x.yaml", ["**"], False),
        (".github/ray/x.yaml", [".github/ray/**"], True),
        ("services/a/b.yaml", ["services"], True),
        ("services/a/b.yaml", ["services/"], True),
        ("servicesx/b.yaml", ["services"], False),
        ("b.yaml", ["**/b.yaml"], True),
        ("x/y/b.yaml", ["**/b.yaml"], True),
        ("x/y/b.yaml", ["*.yaml"], False),
        ("a1.yaml", ["a[0-9].yaml"], True),
        ("ab.yaml", ["a[!0-9].yaml"], True),
        ("a.yml", ["*.yaml"], False),
        ("jobs/x/run.yaml", ["jobs/*/run.yaml"], True),
        ("jobs/x/y/run.yaml", ["jobs/*/run.yaml"], False),
    ],
)
def test_glob_matching(path: str, patterns: list[str], expected: bool) -> None:
    assert matches_any(path, patterns) is expected


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [("ok/**", None), ("/etc", "absolute"), ("a/../b", "'..'"), ("C:\\x", "absolute"),
     ("a\\b", "backslash"), ("  ", "empty")],
)
def test_glob_problems(pattern: str, problem: str | None) -> None:
    found = glob_problem(pattern)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({"GITRAY_PRUNE": "false"}, {"prune": False}, id="a boolean"),
        pytest.param({"GITRAY_ALLOWED_NAMESPACES": "ray-*, default"},
                     {"allowedNamespaces": ["ray-*", "default"]}, id="a comma-separated list"),
        pytest.param({"GITRAY_RAY_SERVICE_DELETION_DELAY": "90"},
                     {"rayService.deletionDelay": 90}, id="a duration in seconds"),
        pytest.param({"GITRAY_RAY_JOB_TIMEOUT": "2h"}, {"rayJob.timeout": "2h"},
                     id="a duration with a unit"),
        pytest.param({"GITRAY_DEFAULT_NAMESPACE": "123"}, {"defaultNamespace": "123"},
                     id="a digit-only string stays a string"),
        pytest.param({"GITRAY_STATUS_PROVIDER": "gitlab", "GITRAY_LEASE_NAME": "x", "HOME": "/"},
                     {"status.provider": "gitlab"}, id="unrelated variables are ignored"),
    ],
)
def test_environment_overrides(environ: dict[str, str], expected: dict[str, Any]) -> None:
    assert env_overrides(environ) == expected


def test_environment_overrides_apply_and_are_validated() -> None:
    config = parse_config(FULL.encode(), overrides=env_overrides(
        {"GITRAY_MAX_PARALLEL": "2", "GITRAY_RAY_SERVICE_KEEP_FAILED_CLUSTERS": "no"}))
    assert (config.max_parallel, config.rayservice.keep_failed_clusters) == (2, False)
    with pytest.raises(ConfigError, match="override prune: 'maybe' is not of type 'boolean'"):
        parse_config(None, overrides=env_overrides({"GITRAY_PRUNE": "maybe"}))
