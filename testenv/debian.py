"""The real node's runtime from Debian's packages, installed by ``scripts/testenv build`` when
missing (stdlib only). prometheus gives the monitoring tests promtool and a real Prometheus (its
system service is never started: see ``ensure_debian_packages``), chromium the status page's
headless browser."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from testenv.build import BuildError
from testenv.timings import note_build

__all__ = ["DEBIAN_PACKAGES", "debian_missing", "debian_versions", "ensure_debian_packages"]

DEBIAN_PACKAGES = ["containerd", "runc", "containernetworking-plugins", "debootstrap",
                   "nftables", "iptables", "prometheus", "chromium"]
POLICY_RC = Path("/usr/sbin/policy-rc.d")  # exit 101: apt starts no service it installs


def debian_missing() -> list[str]:
    missing = []
    for pkg in DEBIAN_PACKAGES:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True,
                              text=True, check=False)
        if "install ok installed" not in proc.stdout:
            missing.append(pkg)
    return missing


def ensure_debian_packages(log: Path) -> None:
    """`apt-get install` the node's runtime packages when any is missing (quiet, idempotent)."""
    missing = debian_missing()
    if not missing:
        print(f"Debian packages ({', '.join(DEBIAN_PACKAGES)}): installed", flush=True)
        note_build("debian-packages", None)
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise BuildError(f"Debian packages missing: {missing} (need root and apt-get: "
                         f"apt-get install {' '.join(missing)})")
    t0 = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    policy = not POLICY_RC.exists()  # the tests start what they need themselves
    if policy:
        POLICY_RC.write_text("#!/bin/sh\nexit 101\n")
        POLICY_RC.chmod(0o755)
    try:
        with log.open("a") as fh:
            for args in (["apt-get", "update", "-qq"],
                         ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                          *missing]):
                fh.write(f"\n$ {' '.join(args)}\n")
                fh.flush()
                proc = subprocess.run(args, stdout=fh, stderr=fh, env=env, check=False)
                if proc.returncode != 0:
                    raise BuildError(f"{' '.join(args)} failed ({proc.returncode}); see {log}")
    finally:
        if policy:
            POLICY_RC.unlink(missing_ok=True)
    print(f"Debian packages {missing}: installed in {time.monotonic() - t0:.0f}s", flush=True)
    note_build("debian-packages", time.monotonic() - t0)


def debian_versions() -> dict[str, str]:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Version}\n", *DEBIAN_PACKAGES],
                          capture_output=True, text=True, check=False)
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
