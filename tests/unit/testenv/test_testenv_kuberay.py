"""Which KubeRay the test environment runs (issue 33, item 4): v1.7.0 built from KubeRay's
source folder beside the repository (``../shared/kuberay-v1.7.0/ray-operator``; the module
proxy refuses that release), else the newest release the proxy serves, said in one line; the
CRDs installed are the running release's; a new KubeRay reuses the rest of the cache; ``up``'s
state, ``up`` and ``status`` name the release (testenv/kuberay.py, testenv/gosteps.py).

Nothing here compiles or starts anything: the Go steps are replaced by recorders over a cache
of empty files. The real build is measured in docs/testenv.md."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from testenv import build, cli, control, debian, gitray_image, gosteps, images, kuberay

PROBED = {"kubernetes": "v1.36.3", "etcd": "v3.6.16", "kwok": "v0.8.0", "kuberay": "v1.6.2",
          "coredns": "v1.14.7"}
# KubeRay's controllers/ray/utils/constant.go states the release so (a constant in a block)
CONSTANT_GO = """package utils

const (
\t// KUBERAY_VERSION is the build version of KubeRay.
\t// The version is included in the RAY_USAGE_STATS_EXTRA_TAGS environment variable
\t// as well as the user-agent. This constant is updated before release.
\t// TODO: Update KUBERAY_VERSION to be a build-time variable.
\tKUBERAY_VERSION = "{version}"
)
"""
CRD_FILES = [*build.CRD_NAMES, "ray.io_raycronjobs.yaml"]


def make_source(folder: Path, version: str = "v1.7.0") -> Path:
    """A KubeRay source folder as ../shared/kuberay-v1.7.0 holds it (only what is read)."""
    operator = folder / "ray-operator"
    (operator / kuberay.VERSION_FILE).parent.mkdir(parents=True)
    (operator / kuberay.VERSION_FILE).write_text(CONSTANT_GO.format(version=version))
    (operator / "go.mod").write_text("module github.com/ray-project/kuberay/ray-operator\n")
    bases = operator / "config" / "crd" / "bases"
    bases.mkdir(parents=True)
    for name in CRD_FILES:
        (bases / name).write_text(f"# {version} {name}\n")
    return folder


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The default source folder, present, holding v1.7.0."""
    folder = make_source(tmp_path / "shared" / "kuberay-v1.7.0")
    monkeypatch.setattr(kuberay, "SOURCE", folder)
    monkeypatch.delenv(kuberay.SOURCE_VAR, raising=False)
    return folder


@pytest.fixture
def no_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The default source folder missing (e.g. a clone without ../shared)."""
    folder = tmp_path / "shared" / "kuberay-v1.7.0"
    monkeypatch.setattr(kuberay, "SOURCE", folder)
    monkeypatch.delenv(kuberay.SOURCE_VAR, raising=False)
    return folder


def probed_cache(root: Path) -> Path:
    """A cache whose module-proxy probe chose PROBED (ray-operator v1.6.2: v1.7.0 refused)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"probe-{build._candidates_hash()}.json").write_text(json.dumps(
        {"versions": PROBED, "refused": {"kuberay": {"v1.7.0": "403 Forbidden"}}}))
    return root


def test_the_source_folder_names_the_release_and_keys_the_cache(source: Path,
                                                                tmp_path: Path) -> None:
    lay = build.layout(probed_cache(tmp_path / "cache"), probe_if_needed=False)
    assert lay.versions["kuberay"] == "v1.7.0"
    assert lay.kuberay_source == kuberay.KubeRaySource(source, "v1.7.0")
    assert lay.dir.name == "k8s-v1.36.3_etcd-v3.6.16_kwok-v0.8.0_kuberay-v1.7.0"
    assert kuberay.origin(lay) == f"built from the KubeRay source in {source / 'ray-operator'}"
    # the other components keep the versions the proxy serves
    assert {k: v for k, v in lay.versions.items() if k != "kuberay"} == \
        {k: v for k, v in PROBED.items() if k != "kuberay"}


def test_without_the_folder_the_proxys_release_is_used(no_source: Path, tmp_path: Path) -> None:
    lay = build.layout(probed_cache(tmp_path / "cache"), probe_if_needed=False)
    assert lay.versions["kuberay"] == "v1.6.2" and lay.kuberay_source is None
    assert lay.dir.name.endswith("_kuberay-v1.6.2")
    assert kuberay.origin(lay) == \
        "github.com/ray-project/kuberay/ray-operator@v1.6.2 from the Go module proxy"
    assert kuberay.fallback_line(lay) == (
        f"KubeRay: no KubeRay source in {no_source}: the environment runs "
        "github.com/ray-project/kuberay/ray-operator@v1.6.2 from the Go module proxy instead "
        "(v1.7.0 and later are not served there)")


def test_the_variable_names_another_folder_or_the_proxy(source: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    other = make_source(tmp_path / "elsewhere", version="v1.7.1")
    monkeypatch.setenv(kuberay.SOURCE_VAR, str(other))
    assert kuberay.find_source() == (kuberay.KubeRaySource(other, "v1.7.1"), "")
    monkeypatch.setenv(kuberay.SOURCE_VAR, "proxy")
    assert kuberay.find_source() == (None, "$GITRAY_KUBERAY_SOURCE=proxy")


def test_a_named_folder_without_a_source_is_an_error_not_a_fallback(
        source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kuberay.SOURCE_VAR, str(tmp_path / "typo"))
    with pytest.raises(build.BuildError, match=r"holds no KubeRay source .*set it to `proxy`"):
        kuberay.find_source()


@pytest.mark.parametrize("broken", ["constant", "crds"])
def test_a_folder_that_is_not_a_kuberay_source_is_refused(broken: str, source: Path) -> None:
    operator = source / "ray-operator"
    if broken == "constant":
        (operator / kuberay.VERSION_FILE).write_text("package utils\n")
    else:
        for crd in (operator / "config" / "crd" / "bases").iterdir():
            crd.unlink()
        (operator / "config" / "crd" / "bases").rmdir()
    with pytest.raises(build.BuildError, match="is not a KubeRay ray-operator source"):
        kuberay.find_source()


# ---- build: a cache of empty files, the Go steps recorded --------------------------------------


def complete_key(root: Path, versions: dict[str, str]) -> build.Layout:
    """Every output of a key built earlier (files naming their key) and its versions.json."""
    lay = build.Layout(root=root, versions=versions)
    for path in [*(lay.binary(b) for b in build.BINARIES),
                 *(lay.crds / c for c in CRD_FILES),
                 *(lay.stages / Path(s).name for s in build.KWOK_STAGES)]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{lay.key} {path.name}\n")
    lay.versions_file.write_text(json.dumps({
        "modules": {n: {"module": build.CANDIDATES[n][0], "version": v}
                    for n, v in versions.items()},
        "go": "go version go1.26.8", "build_seconds": {"kubernetes": 652.1}}))
    return lay


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Go steps of `build`, recorded (each writes its outputs), in the order they ran."""
    ran: list[str] = []

    def recorder(name: str, outputs: list[str]) -> object:
        def step(lay: build.Layout, _run: object) -> None:
            ran.append(name)
            for out in outputs:
                lay.binary(out).write_text(f"built {name}\n")
        return step
    for name, outputs in [("etcd", ["etcd"]), ("kwok", ["kwok"]),
                          ("kuberay", ["kuberay-operator"]),
                          ("kubernetes", build.K8S_COMMANDS), ("coredns", ["coredns"]),
                          ("pause", ["pause"])]:
        monkeypatch.setattr(gosteps, f"build_{name}", recorder(name, outputs))
    monkeypatch.setattr(debian, "ensure_debian_packages", lambda _log: None)
    monkeypatch.setattr(build, "_go_version", lambda: "go version go1.26.8")
    monkeypatch.setattr(shutil, "which", lambda _name: "/usr/bin/go")
    return ran


def images_built(root: Path) -> None:
    for path in (images.ray_image_path(root), images.pause_image_path(root),
                 gitray_image.image_archive_path(root)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


def test_a_new_kuberay_is_built_from_the_source_and_the_rest_linked(
        source: Path, built: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = probed_cache(tmp_path / "cache")
    images_built(root)
    old = complete_key(root, PROBED)  # the v1.6.2 environment built before
    lay = build.build(root)
    out = capsys.readouterr().out
    assert lay.dir.name.endswith("_kuberay-v1.7.0") and lay.complete()
    assert built == ["kuberay", "pause"]  # KubeRay (and the 1 s pause): nothing else compiled
    for binary in build.BINARIES:
        if binary not in ("kuberay-operator", "pause"):
            assert os.path.samefile(lay.binary(binary), old.binary(binary)), binary
    for stage in build.KWOK_STAGES:
        assert os.path.samefile(lay.stages / Path(stage).name, old.stages / Path(stage).name)
    assert lay.binary("kuberay-operator").read_text() == "built kuberay\n"
    # the CRDs installed are the running release's: from the source folder, all of them
    bases = source / "ray-operator" / "config" / "crd" / "bases"
    assert sorted(p.name for p in lay.crds.iterdir()) == sorted(CRD_FILES)
    for name in CRD_FILES:
        assert (lay.crds / name).read_text() == (bases / name).read_text()
    assert old.binary("kuberay-operator").read_text().startswith(old.key)  # untouched
    assert f"KubeRay v1.7.0 ({source / 'ray-operator'}) -> kuberay-operator: built in" in out
    assert f"k8s.io/kubernetes@v1.36.3 -> kube-apiserver, kube-controller-manager, " \
        f"kube-scheduler, kubectl, kubelet, kube-proxy: linked from {old.key} (same version)" \
        in out
    assert f"kwok stages: linked from {old.key} (same version)" in out
    assert "KubeRay v1.7.0 CRDs: copied in" in out
    assert "Go module proxy instead" not in out  # the fallback line is for a missing folder
    recorded = json.loads(lay.versions_file.read_text())
    assert recorded["modules"]["kuberay"] == {
        "module": "github.com/ray-project/kuberay/ray-operator", "version": "v1.7.0",
        "source": str(source / "ray-operator")}
    assert set(recorded["build_seconds"]) == {"kuberay"}

    # a second build: every component cached, nothing compiled
    built.clear()
    build.build(root)
    again = capsys.readouterr().out
    assert built == []
    assert "linked" not in again and "built in" not in again
    assert f"KubeRay v1.7.0 ({source / 'ray-operator'}) -> kuberay-operator: cached" in again


def test_a_component_at_another_version_is_not_linked(source: Path, built: list[str],
                                                      tmp_path: Path) -> None:
    root = probed_cache(tmp_path / "cache")
    images_built(root)
    old = complete_key(root, PROBED | {"etcd": "v3.6.15"})  # another etcd, same Kubernetes
    lay = build.build(root)
    assert built == ["etcd", "kuberay", "pause"]
    assert lay.binary("etcd").read_text() == "built etcd\n"
    assert os.path.samefile(lay.binary("kubectl"), old.binary("kubectl"))


def test_without_the_folder_the_build_says_so_in_one_line(no_source: Path, built: list[str],
                                                          tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    root = probed_cache(tmp_path / "cache")
    images_built(root)
    old = complete_key(root, PROBED)  # the v1.6.2 environment, complete
    lay = build.build(root)
    out = capsys.readouterr().out
    assert lay.dir == old.dir and built == []  # what was there runs, nothing rebuilt
    said = [line for line in out.splitlines() if "v1.7.0" in line or str(no_source) in line]
    assert said == [kuberay.fallback_line(lay)]
    assert "github.com/ray-project/kuberay/ray-operator@v1.6.2 -> kuberay-operator: cached" \
        in out


def test_build_ends_naming_the_kuberay_it_built(source: Path, built: list[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from testenv import helm, kustomize, traefik

    root = probed_cache(tmp_path / "cache")
    images_built(root)
    complete_key(root, PROBED | {"kuberay": "v1.7.0"})
    monkeypatch.setenv("GITRAY_TESTENV_CACHE", str(root))
    for module, name in ((kustomize, "build_kustomize"), (helm, "build_helm"),
                         (traefik, "build_gateway")):
        monkeypatch.setattr(module, name, lambda _root, say: traefik.GatewayLayout(root))
    assert cli.main(["build"]) == 0
    ready = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("testenv ready in ")]
    assert len(ready) == 1 and ": KubeRay v1.7.0 [" in ready[0], ready


# ---- up's state and status ---------------------------------------------------------------------


def _state(tmp_path: Path, operator: dict[str, object], cache: str) -> Path:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "state.json").write_text(json.dumps({
        "cache": cache, "kubeconfig": str(state_dir / "kubeconfig"),
        "apiserver": "https://127.0.0.1:1", "pod_net": 7,
        "components": {"kuberay-operator": {"pid": 2**22 + 1, "started": 1, "ports": [],
                                            **operator}}}))
    return state_dir


def test_status_names_the_kuberay_the_environment_runs(tmp_path: Path) -> None:
    state_dir = _state(tmp_path, {"version": "v1.7.0",
                                  "origin": "built from the KubeRay source in /x/ray-operator"},
                       "/c/k8s-v1.36.3_etcd-v3.6.16_kwok-v0.8.0_kuberay-v1.7.0")
    state = control.State.load(state_dir)
    assert state is not None and kuberay.recorded_version(state) == "v1.7.0"
    ok, text = control.status(state_dir)
    assert not ok  # the recorded operator is not running
    assert "KubeRay: v1.7.0 (built from the KubeRay source in /x/ray-operator)" in \
        text.splitlines()


def test_an_environment_started_before_the_record_is_named_by_its_cache(tmp_path: Path) -> None:
    state_dir = _state(tmp_path, {}, "/c/k8s-v1.36.3_etcd-v3.6.16_kwok-v0.8.0_kuberay-v1.6.2")
    state = control.State.load(state_dir)
    assert state is not None and kuberay.recorded_version(state) == "v1.6.2"
    assert "KubeRay: v1.6.2" in control.status(state_dir)[1].splitlines()


def test_up_ends_naming_the_kuberay_it_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = _state(tmp_path, {"version": "v1.7.0",
                                  "origin": "built from the KubeRay source in /x/ray-operator"},
                       "/c/k8s-v1.36.3_etcd-v3.6.16_kwok-v0.8.0_kuberay-v1.7.0")
    monkeypatch.setattr(control, "up", lambda *_args, **_kw: control.State.load(state_dir))
    assert cli.main(["up", "--state-dir", str(state_dir)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("testenv up in ")
    assert said[0].endswith(f"(state: {state_dir}), KubeRay v1.7.0"), said
