"""Benchmark helpers (pure): benchmark 3's split of push -> converged into Ray's time and
gitray's, the daemon's "config sent" line read from its log, and `bench/run --only scale`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from bench.common import expand_only
from bench.upgrade import _sent_at, derive


def _cluster_change(**edges: float) -> dict[str, object]:
    return {"kind": "cluster change", **{f"{k}_s": v for k, v in edges.items()}}


def test_ready_to_deploy_is_split_at_kuberays_verdict() -> None:
    out = derive(_cluster_change(created=1.0, ready=8.0, kuberay_ready=12.0, deployed=12.2,
                                 running=15.0, converged=16.0))
    assert out["ready_to_deploy_s"] == 4.2
    assert out["kuberay_lag_s"] == 4.0  # KubeRay said ready 4 s after Ray was up
    assert out["verdict_to_deploy_s"] == 0.2  # gitray deployed 0.2 s after that
    assert out["overhead_s"] == round(1.0 + 4.2 + 1.0, 2)
    assert out["ray_s"] == round(16.0 - out["overhead_s"], 2)


def test_without_the_verdict_edge_the_split_is_left_out() -> None:
    out = derive(_cluster_change(created=1.0, ready=8.0, deployed=8.5, running=10.0,
                                 converged=11.0))
    assert out["ready_to_deploy_s"] == 0.5 and "kuberay_lag_s" not in out


def test_a_deploy_accepted_before_the_runner_reported_ready_costs_nothing() -> None:
    out = derive(_cluster_change(created=1.0, ready=9.0, kuberay_ready=7.0, deployed=8.0,
                                 running=10.0, converged=10.5))
    assert out["ready_to_deploy_s"] == 0.0
    assert out["kuberay_lag_s"] == -2.0 and out["verdict_to_deploy_s"] == 1.0


def test_the_daemons_config_sent_line_is_read_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "sync.log"
    lines = [
        {"time": "2026-12-02T06:21:08.375Z", "msg": "ns/RayService/up step 1/2 deploy-serve: "
                                                    "Serve config sent to up-9d3d8"},
        "not json",
        {"time": "2026-12-02T06:21:19.223Z", "msg": "ns/RayService/up step 3/7 deploy-serve "
                                                    "up-1e41d"},
        {"time": "2026-12-02T06:21:19.392Z", "msg": "ns/RayService/up step 3/7 deploy-serve: "
                                                    "Serve config sent to up-1e41d"},
    ]
    log.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines))
    since = datetime(2026, 12, 2, 6, 21, 18, 900000, tzinfo=UTC).timestamp()
    sent = _sent_at(SimpleNamespace(log=log), since)
    assert sent == datetime(2026, 12, 2, 6, 21, 19, 392000, tzinfo=UTC).timestamp()
    assert _sent_at(SimpleNamespace(log=log), since + 60) is None
    assert _sent_at(SimpleNamespace(log=tmp_path / "missing.log"), since) is None


def test_only_scale_means_plan_and_git_at_the_scale_issues_sizes() -> None:
    profile: dict[str, object] = {"plan_sizes": [100], "git": [(1000, 500)]}
    assert expand_only("scale", profile, full=True) == ["plan", "git"]
    assert profile["plan_sizes"] == [1000, 5000, 10000] and profile["kubectl_max"] == 5000
    assert profile["git"] == [(10000, 5000), (10000, 20000)]
    quick: dict[str, object] = {"plan_sizes": [20]}
    assert expand_only("git,scale", quick, full=False) == ["git", "plan"]
    assert quick == {"plan_sizes": [20]}  # --quick/--tiny keep their small sizes
    assert expand_only("plan, steady", {}, full=True) == ["plan", "steady"]
