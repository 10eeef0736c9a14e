"""The README's "Try it on a real cluster" commands, run exactly as written (read from the
README, so the README cannot drift from what works): a fresh environment with the real node,
examples-repo applied with gitray's defaults (no --dashboard, no --lease-namespace), an
upgrade, an instant rollback and `gitray status`. Then every workload is checked in the
cluster, and the environment is brought down.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from testenv import control

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
SECTION = "## Try it on a real cluster"


def readme_commands() -> str:
    text = README.read_text()
    assert SECTION in text, f"README has no section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    match = re.search(r"```bash\n(.*?)```", body, re.S)
    assert match, "the Try-it section has no ```bash block"
    return match.group(1)


def test_the_readme_block_is_what_a_user_types() -> None:
    commands = readme_commands()
    assert "scripts/testenv up" in commands and "gitray apply --repo $REPO --yes" in commands
    # the defaults a new user gets: no convenience flags
    assert "--dashboard" not in commands and "--lease-namespace" not in commands
    assert "gitray status" in commands


@pytest.mark.own_node
def test_readme_walkthrough() -> None:
    commands = readme_commands()
    # mktemp's usual short /tmp paths, as a user gets them (containerd's sockets live in the
    # environment's dir and a Unix socket path must stay under 108 bytes)
    tmp_path = Path(tempfile.mkdtemp(prefix="walk-", dir="/tmp"))
    # After the README's own lines: say where the environment and the repository are, so the
    # test can check the cluster and bring the environment down whatever happened.
    script = ("set -euo pipefail\n" + commands
              + '\necho "WALKTHROUGH ENV=$ENV"\necho "WALKTHROUGH REPO=$REPO"\n')
    env = {k: v for k, v in os.environ.items() if k not in {"KUBECONFIG",
                                                           "GITRAY_TESTENV_STATE"}}
    # the README's `up` waits for another test module's real node to go (one per machine)
    env.update({"NO_COLOR": "1", "TMPDIR": str(tmp_path), "GITRAY_TESTENV_NODE_WAIT": "900"})
    result = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=1800, check=False)
    out = result.stdout + result.stderr
    print(out)  # the walkthrough's real output (pytest -s shows it; README quotes it)
    try:
        assert result.returncode == 0, out[-6000:]
        applies = re.findall(r"Apply finished: (\d+) workload\(s\) converged, (\d+) failed, "
                             r"(\d+) not run\.", result.stdout)
        assert applies[0] == ("4", "0", "0"), out[-6000:]   # the first rollout: everything
        assert len(applies) == 3 and all(a[1:] == ("0", "0") for a in applies), out[-6000:]
        assert result.stdout.count("Hello, Ada!") == 2, out[-6000:]  # before and after upgrade
        assert re.search(r"pi is about 3\.1\d", result.stdout), out[-6000:]
        assert "instant rollback" in result.stdout, out[-6000:]
        env_dir = Path(re.findall(r"WALKTHROUGH ENV=(\S+)", result.stdout)[-1])
        _check_converged(env_dir)
    finally:
        for state_file in sorted(tmp_path.glob("tmp.*/state.json")):
            control.down(state_file.parent)
        shutil.rmtree(tmp_path, ignore_errors=True)


def _check_converged(env_dir: Path) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(env_dir / "kubeconfig"))
    try:
        custom = client.CustomObjectsApi(api)
        jobs = custom.list_namespaced_custom_object("ray.io", "v1", "ray-jobs",
                                                    "rayjobs")["items"]
        assert [j["status"].get("jobStatus") for j in jobs] == ["SUCCEEDED"], jobs
        interactive = custom.get_namespaced_custom_object("ray.io", "v1", "ray-dev",
                                                          "rayclusters", "interactive")
        # gitray's part: the RayCluster as Git says, its head pod placed on the real node. (Its
        # Ray autoscaler sidecar needs the API server from inside the pod, which the test
        # environment does not offer yet: no ServiceAccount tokens, API server on loopback.)
        assert interactive["metadata"]["labels"]["team"] == "ml-platform"
        heads = client.CoreV1Api(api).list_namespaced_pod(
            "ray-dev", label_selector="ray.io/cluster=interactive,ray.io/node-type=head").items
        assert [p.spec.node_name for p in heads] == ["testenv-node"], heads
        clusters = custom.list_namespaced_custom_object("ray.io", "v1", "ray-serve",
                                                        "rayclusters")["items"]
        selector = client.CoreV1Api(api).read_namespaced_service(
            "serve-demo-serve-svc", "ray-serve").spec.selector
        live = [c["metadata"]["name"] for c in clusters
                if not c["metadata"].get("deletionTimestamp")]
        assert selector["ray.io/cluster"] in live
    finally:
        api.close()
