"""Where planning spends CPU and memory, on pure inputs: no API server needed.

    python -m bench.plan_profile --n 1000                  # phases: CPU, RSS, peak RSS
    python -m bench.plan_profile --n 1000 --profile 30     # + cProfile of loading and planning
    python -m bench.plan_profile --n 5000 --mode whole     # the whole live state at once

Desired state: benchmark 1's repository (``Fleet(n)`` with 5% changed: N RayServices + N
RayClusters over 10 namespaces) committed with real git and read with ``read_snapshot``.
Live state: ``materialize()`` of the unchanged revision with what the API server adds to each
object (uid, creationTimestamp, generation, resourceVersion, a ``managedFields`` entry derived
from the object's own fields as server-side apply records them, a KubeRay-like status), written
as LIST pages of 1,000 items to disk and read back one page at a time, as from the network.
``--mode batched`` plans as ``gitray plan --against live`` does (a LiveStore, one namespace at
a time); ``--mode whole`` as before (every page decoded, one LiveState). Both print the same
plan digest. Every figure is this process's own (``time.process_time``, ``/proc/self/statm``,
``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import pstats
import resource
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import OUT, Fleet, changed_indexes, write_tree

PAGE = 1000
_NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com",
                    *args], cwd=cwd, check=True, capture_output=True)


def _fields(value: Any) -> Any:
    """A fieldsV1 tree for ``value``, the shape server-side apply records."""
    if isinstance(value, dict):
        return {f"f:{k}": _fields(v) for k, v in value.items()}
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for i, item in enumerate(value):
            name = item.get("name") if isinstance(item, dict) else None
            key = f'k:{{"name":"{name}"}}' if name else f"v:{json.dumps(item)[:40]}#{i}"
            out[key] = {".": {}, **(_fields(item) if isinstance(item, dict) else {})}
        return out
    return {}


def _as_served(body: dict[str, Any], i: int) -> dict[str, Any]:
    """``body`` as the API server would return it in a LIST."""
    out = json.loads(json.dumps(body))
    meta = out["metadata"]
    meta.update({"uid": f"00000000-0000-4000-8000-{i:012d}", "generation": 1,
                 "resourceVersion": str(100000 + i),
                 "creationTimestamp": "2026-12-01T10:00:00Z"})
    meta["managedFields"] = [{
        "apiVersion": out["apiVersion"], "fieldsType": "FieldsV1", "manager": "gitray",
        "operation": "Apply", "time": "2026-12-01T10:00:00Z",
        "fieldsV1": _fields({k: v for k, v in out.items() if k not in {"apiVersion", "kind",
                                                                       "status"}})}]
    if out["kind"] == "RayCluster":
        out["status"] = {"state": "suspended", "desiredCPU": "3", "desiredMemory": "6Gi",
                         "desiredWorkerReplicas": 0, "lastUpdateTime": "2026-12-01T10:00:05Z",
                         "conditions": [{"type": "RayClusterSuspended", "status": "True",
                                         "reason": "RayClusterSuspended",
                                         "lastTransitionTime": "2026-12-01T10:00:05Z"}]}
    elif out["kind"] == "Service":
        spec = out["spec"]
        spec.update({"clusterIP": f"10.64.{i // 250}.{i % 250}", "clusterIPs": [],
                     "internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"],
                     "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None"})
        spec["clusterIPs"] = [spec["clusterIP"]]
        out["status"] = {"loadBalancer": {}}
    return out


def prepare(n: int) -> tuple[Path, Path]:
    """The committed repository and the directory of live pages (built once per size)."""
    root = OUT / f"plan-profile-{n}"
    repo, pages = root / "repo", root / "pages"
    if (root / "done").exists():
        return repo, pages
    from gitray.git.source import read_snapshot
    from gitray.plans.load import load_snapshot
    from gitray.plans.materialize import materialize

    base = root / "base"
    write_tree(base, Fleet(n).files())
    write_tree(repo, Fleet(n, changed_indexes(n)).files())
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"fleet {n}, 5% changed")
    result = load_snapshot(read_snapshot(str(base)), {})
    served = sorted((_as_served(dict(o.body), i)
                     for i, o in enumerate(materialize(result.workloads, result.config).objects)),
                    key=lambda o: (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]))
    pages.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(served), PAGE):
        items = [{k: v for k, v in o.items() if k not in {"apiVersion", "kind"}}
                 | {"apiVersion": o["apiVersion"], "kind": o["kind"]}
                 for o in served[start:start + PAGE]]
        (pages / f"{start // PAGE:04d}.json").write_text(json.dumps({"items": items}))
    (root / "done").write_text("")
    return repo, pages


def _pages(pages: Path) -> Iterator[list[Any]]:
    from gitray.k8s.live import _live_object  # what live_pages does with each item

    for path in sorted(pages.glob("*.json")):
        yield [_live_object(item) for item in json.loads(path.read_bytes())["items"]]


def _plan(mode: str, result: Any, pages: Path, mark: Callable[[str], None]) -> Any:
    """Read the live pages and plan, as ``gitray plan --against live`` does (``batched``) or
    with the whole live state decoded at once (``whole``)."""
    from gitray.core.livestore import LiveStore
    from gitray.core.model import LiveState
    from gitray.plans.planner import Planner, compute_plan

    allows = result.config.allows
    if mode == "whole":
        objects = [o for page in _pages(pages) for o in page if allows(o.namespace)]
        objects.sort(key=lambda o: (o.kind, o.namespace, o.name))
        live = LiveState(tuple(objects))
        del objects
        mark(f"live pages read ({len(live.objects)} objects, all decoded)")
        return compute_plan(result.workloads, live, result.config, revision="r",
                            against="live", now=_NOW)
    store = LiveStore()
    for page in _pages(pages):
        store.add(o for o in page if allows(o.namespace))
    mark(f"live pages read ({store.objects} objects, "
         f"{store.compressed_bytes / 2**20:.1f} MiB compressed)")
    planner = Planner(result.workloads, result.config, now=_NOW)
    for batch in store.batches():
        planner.add([batch], store.take(batch))
    return planner.finish(revision="r", against="live")


def run(n: int, mode: str, profile: int) -> dict[str, Any]:
    t0 = time.process_time()
    phases: list[dict[str, Any]] = []

    def mark(what: str) -> None:
        phases.append({"phase": what, "cpu_s": round(time.process_time() - t0, 2),
                       "rss_mb": round(rss_mb()), "peak_mb": round(peak_mb())})

    repo, pages = prepare(n)
    t0 = time.process_time()
    mark("start")
    from gitray.git.source import read_snapshot
    from gitray.plans.load import load_snapshot
    from gitray.plans.plan import plan_to_json
    from gitray.plans.render import Format, render
    mark("imports")
    profiler = cProfile.Profile() if profile else None
    snapshot = read_snapshot(str(repo), "HEAD")
    mark("read_snapshot")
    if profiler:
        profiler.enable()
    result = load_snapshot(snapshot, {})
    if profiler:
        profiler.disable()
    mark(f"load_snapshot ({len(result.workloads)} workloads)")
    if profiler:
        profiler.enable()
    plan = _plan(mode, result, pages, mark)
    if profiler:
        profiler.disable()
    mark("plan")
    text = render(plan, Format.TEXT, colour=False)
    mark("render")
    digest = hashlib.sha256(json.dumps(plan_to_json(plan), sort_keys=True).encode())
    out: dict[str, Any] = {"n": n, "mode": mode, "phases": phases,
                           "summary": text.strip().splitlines()[-1],
                           "plan_sha256": digest.hexdigest()[:16]}
    if profiler:
        buffer = io.StringIO()
        stats = pstats.Stats(profiler, stream=buffer)
        stats.sort_stats("tottime").print_stats(profile)
        stats.sort_stats("cumulative").print_stats(profile)
        out["profile"] = buffer.getvalue()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="RayServices (and RayClusters)")
    parser.add_argument("--mode", choices=["batched", "whole"], default="batched")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="cProfile loading and planning; print the TOP functions")
    args = parser.parse_args()
    out = run(args.n, args.mode, args.profile)
    for p in out["phases"]:
        print(f"{p['phase']:58s} cpu {p['cpu_s']:6.2f} s  rss {p['rss_mb']:4d} MB  "
              f"peak {p['peak_mb']:4d} MB")
    print(f"{out['summary']}  (plan sha256 {out['plan_sha256']})")
    if "profile" in out:
        print(out["profile"])


if __name__ == "__main__":
    main()
