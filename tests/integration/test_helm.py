"""A Helm chart planned by the real ``gitray plan`` against the real API server (issue 32),
rendered with the real helm v4 of the test environment (testenv/helm.py).

A chart (a ConfigMap and a suspended RayCluster, neither naming a namespace) released into the
test's namespace with a values file: the plan against the live cluster (judged by the CRDs it
serves) creates what ``helm template`` printed, each under its template's name; with the
objects applied (as helm template printed them), a change of the values file is planned as an
update under the template's name, saying the chart and values file it was rendered with and
the values line the change reads; a value that renders an invalid object is refused at its
values line, naming the template line that printed it. ``gitray apply`` and the daemon
render charts once gitray/engine/apply.py passes ``helm=`` to ``load_snapshot``
(``gitray.render.runners()``), as the CLI does.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from testenv.helm import helm_for_tests
from testenv.helpers import TestEnv
from testenv.manifests import dump, gitray_config
from tests.integration.gitops import REPO_ROOT, GitOpsRepo, Gitray, output

EXAMPLE_CLUSTER = REPO_ROOT / "examples-repo" / "ray-cluster" / "raycluster.yaml"
CHART = "charts/lab"
_yaml = YAML(typ="safe", pure=True)


def chart_files() -> dict[str, str | None]:
    cluster: dict[str, Any] = _yaml.load(EXAMPLE_CLUSTER.read_text())
    cluster["metadata"] = {"name": "{{ .Release.Name }}"}
    cluster["spec"]["suspend"] = True  # no pods: the objects are what matters here
    cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 999
    template = dump(cluster).replace("maxReplicas: 999", "maxReplicas: {{ .Values.maxReplicas }}")
    return {
        f"{CHART}/Chart.yaml": "apiVersion: v2\nname: lab\nversion: 0.1.0\n",
        f"{CHART}/values.yaml": "level: base\nmaxReplicas: 2\n",
        f"{CHART}/templates/cluster.yaml": template,
        f"{CHART}/templates/settings.yaml": (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"
            "data:\n  level: {{ .Values.level }}\n"),
    }


def values(level: str, max_replicas: int = 3) -> dict[str, str | None]:
    return {"env/test.yaml": f"level: {level}\nmaxReplicas: {max_replicas}\n"}


@dataclass(frozen=True)
class HelmGitray(Gitray):
    """The CLI with the test environment's helm."""

    helm: str = ""

    def env(self) -> dict[str, str]:
        return {**super().env(), "GITRAY_HELM": self.helm}


@pytest.fixture
def tools(testenv: TestEnv, namespace: str, tmp_path: Path) -> tuple[GitOpsRepo, Gitray]:
    gitray = HelmGitray(testenv.kubeconfig, namespace, helm=helm_for_tests())
    return GitOpsRepo(tmp_path / "repo"), gitray


def test_a_chart_is_planned_as_helm_template_prints_it_and_errors_name_the_template(
        testenv: TestEnv, namespace: str, tools: tuple[GitOpsRepo, Gitray]) -> None:
    repo, gitray = tools
    entry = {"chart": CHART, "release": "lab", "namespace": namespace,
             "values": ["env/test.yaml"]}
    repo.commit("v1", {"gitray.yaml": gitray_config(namespace=namespace, helm=[entry]),
                       **chart_files(), **values("staging")})
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    assert f"# RayCluster {namespace}/lab  ({CHART}/templates/cluster.yaml:1:1)" in r.stdout
    assert f"# ConfigMap {namespace}/settings  ({CHART}/templates/settings.yaml:1:1)" in r.stdout
    assert "Plan: 2 to create" in r.stdout, output(r)
    assert r.stdout.count(f"      rendered from {CHART} with env/test.yaml\n") == 2, output(r)

    with tempfile.TemporaryDirectory() as home:
        printed = subprocess.run(
            [helm_for_tests(), "template", "lab", CHART, "--namespace", namespace,
             "--values", "env/test.yaml"], cwd=repo.path, capture_output=True, text=True,
            check=True, env={"PATH": "/usr/bin:/bin", "HOME": home, "HELM_CACHE_HOME": home,
                             "HELM_CONFIG_HOME": home, "HELM_DATA_HOME": home}).stdout
    # the same objects as plain files, applied: then the chart's plan has nothing to do
    plain = GitOpsRepo(repo.path.parent / "plain")
    plain.commit("v1", {"gitray.yaml": gitray_config(namespace=namespace,
                                                     defaultNamespace=namespace),
                        "printed.yaml": printed})
    r = gitray.run("apply", "--repo", str(plain.path), "--yes")
    assert r.returncode == 0, output(r)
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0 and "No changes." in r.stdout, output(r)

    repo.commit("v2", values("staging", max_replicas=4))
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 0, output(r)
    assert f"# RayCluster {namespace}/lab  ({CHART}/templates/cluster.yaml:1:1)" in r.stdout
    assert "maxReplicas: 3 -> 4  (set in env/test.yaml:2:1)\n" in r.stdout, output(r)

    repo.commit("v3", {"env/test.yaml": "level: 7\nmaxReplicas: 4\n"})
    r = gitray.run("plan", "--repo", str(repo.path))
    assert r.returncode == 1, output(r)
    template = f"{CHART}/templates/settings.yaml"
    assert r.stderr.splitlines()[0] == (
        "env/test.yaml:1:1: data.level must be a string; quote the value (rendered through "
        f"{template}:6:3 by helm template lab {CHART} -n {namespace})"), output(r)
    assert "Traceback" not in r.stderr
