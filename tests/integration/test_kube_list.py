"""Kube.list against the real API server: paged, one consistent snapshot, nothing lost."""

from __future__ import annotations

import pytest

from gitray.k8s import client as kube_module
from gitray.k8s.client import Kube
from gitray.k8s.settings import KubeSettings
from testenv.helpers import TestEnv


def test_list_reads_every_page_of_one_snapshot(testenv: TestEnv, namespace: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube.connect(KubeSettings(kubeconfig=testenv.kubeconfig))
    try:
        for i in range(7):
            kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": f"cm-{i}", "namespace": namespace,
                                      "labels": {"page-test": "yes" if i != 3 else "no"}},
                         "data": {"i": str(i)}})
        monkeypatch.setattr(kube_module, "LIST_PAGE", 2)
        before = kube.requests
        items, version = kube.list("v1", "ConfigMap", namespace=namespace,
                                   label_selector="page-test=yes")
        pages = kube.requests - before
        assert sorted(i["metadata"]["name"] for i in items) == [
            f"cm-{i}" for i in range(7) if i != 3]
        assert all(i["apiVersion"] == "v1" and i["kind"] == "ConfigMap" for i in items)
        assert [i["data"] for i in items if i["metadata"]["name"] == "cm-5"] == [{"i": "5"}]
        assert version.isdigit()
        assert pages >= 4  # the resource lookup + at least 3 pages of 2
        monkeypatch.setattr(kube_module, "LIST_PAGE", 1000)
        before = kube.requests
        again, _ = kube.list("v1", "ConfigMap", namespace=namespace,
                             label_selector="page-test=yes")
        assert kube.requests - before <= 2
        assert sorted(i["metadata"]["name"] for i in again) == sorted(
            i["metadata"]["name"] for i in items)
    finally:
        kube.close()
