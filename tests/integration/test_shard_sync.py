"""``gitray sync --shards S`` against the real kube-apiserver: real processes, a real Git
remote, real Leases and run records (issue 28, docs/sharding.md).

The workloads are suspended RayClusters (KubeRay starts no pods for them, so no Ray head is
needed: their plan is one create or update step) spread over three namespaces. Only the API
server is needed (the `apiserver` fixture: any running environment, or one without the real
node).

What is observed, never what the replicas say of themselves alone: the shard Leases (holders,
epochs; a sampler from test_shard_leases checks every 50 ms that no epoch goes backwards and no
holder changes within an epoch), the run records (their shard and epoch), the objects' labels,
and each replica's step lines (which replica drove which workload) beside its ``/readyz``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from gitray.core.model import ObjectKey
from gitray.engine.progress import RecordReader
from gitray.engine.shards import LABEL_SHARD, shard_label, shard_of
from gitray.hosts.notes import NOTES_REF
from testenv.helpers import TestEnv, make_namespace, wait_for
from testenv.manifests import cluster_spec, dump, gitray_config
from tests.integration.chaos import Replica, holder_pid, lease_holder
from tests.integration.gitops import GitOpsRepo
from tests.integration.shardfleet import LEASE_S, RETRY_S, S, ShardFleet
from tests.integration.test_daemon import notes, push

N = 30
IMAGES = [f"rayproject/ray:2.6{i}.0" for i in range(4)]


def in_sync(inst: Instance, sha: str, says: str) -> None:
    """Every workload's commit status and the commit's overall one are success, the overall
    one saying ``says`` (git notes on the remote, written by whichever replica posted)."""
    contexts = {f"gitray/{k.namespace}/RayCluster/{k.name}" for k in inst.keys}

    def posted() -> bool:
        seen = notes(inst.bare, sha)
        return all(seen.get(c, {}).get("state") == "success" for c in contexts) \
            and seen.get("gitray", {}).get("state") == "success"
    wait_for(posted, timeout=60, interval=0.5, what=f"the statuses of {sha[:7]}")
    assert says in notes(inst.bare, sha)["gitray"]["description"]


def overall_history(bare: Path) -> list[tuple[str, str]]:
    """(state, description) of every overall record the remote's status notes ever held (the
    notes ref's history: each post is a commit of it)."""
    out = subprocess.run(["git", "log", "-p", "--format=", NOTES_REF], cwd=bare, check=True,
                         capture_output=True, text=True, timeout=60).stdout
    records = [json.loads(line[1:]) for line in out.splitlines() if line.startswith("+{")]
    return [(r["state"], r["description"]) for r in records if r.get("context") == "gitray"]


class Instance(ShardFleet):
    """One gitray instance: its lease namespace, workload namespaces, remote and replicas."""

    def __init__(self, env: TestEnv, lease_ns: str, remote: tuple[Path, GitOpsRepo],
                 tmp: Path) -> None:
        super().__init__(env, lease_ns, remote[0], tmp)
        self.work = remote[1]
        self.spaces = [make_namespace(env, "w") for _ in range(3)]
        self.instance = f"gitray-{lease_ns}"
        self.keys = [ObjectKey(kind="RayCluster", namespace=self.spaces[i % 3],
                               name=f"c-{i:02d}") for i in range(N)]

    def commit(self, image: str) -> str:
        docs = [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                 "metadata": {"name": k.name, "namespace": k.namespace},
                 "spec": cluster_spec(image, suspend=True)} for k in self.keys]
        config = gitray_config(allowed=self.spaces, instance=self.instance,
                               status={"provider": "git-notes"})
        return push(self.work, f"clusters on {image}",
                    {"gitray.yaml": config, "clusters.yaml": dump(*docs)})

    def clusters(self) -> dict[ObjectKey, dict[str, Any]]:
        return {ObjectKey(kind="RayCluster", namespace=ns, name=o["metadata"]["name"]): o
                for ns in self.spaces for o in self.env.custom.list_namespaced_custom_object(
                    "ray.io", "v1", ns, "rayclusters")["items"]}

    def converged(self, image: str) -> bool:
        live = self.clusters()
        return sorted(live) == sorted(self.keys) and all(
            o["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == image
            for o in live.values())

    def records(self) -> dict[ObjectKey, Any]:
        return {r.key: r for r in RecordReader(self.leases.kube, self.ns, self.instance).list()}

    def close(self) -> None:
        super().close()
        for ns in self.spaces:
            self.env.core.delete_namespace(ns)


@pytest.fixture
def instance(apiserver: TestEnv, api_namespace: str, remote: tuple[Path, GitOpsRepo],
             tmp_path: Path) -> Iterator[Instance]:
    made = Instance(apiserver, api_namespace, remote, tmp_path)
    yield made
    made.close()


def driven_apart(inst: Instance, step: str, since: float, image: str
                 ) -> dict[ObjectKey, dict[str, tuple[float, float, int]]]:
    """Every workload converged to ``image`` and its ``step`` logged done, never driven by two
    replicas at once: who drove it (``Instance.drivers``)."""
    def done() -> dict[ObjectKey, dict[str, tuple[float, float, int]]] | None:
        drivers = inst.drivers(step, since)
        return drivers if inst.converged(image) and all(
            sum(n for _, _, n in drivers.get(k, {}).values()) for k in inst.keys) else None
    drivers = wait_for(done, timeout=90, interval=0.5,
                       what=f"all {N} RayClusters on {image}, {step} logged done")
    assert sorted(drivers) == sorted(inst.keys), sorted(set(drivers) - set(inst.keys))
    for key, spans in drivers.items():
        assert all(a[1] < b[0] for a, b in pairwise(sorted(spans.values()))), (key, spans)
    return drivers


def check_driven(inst: Instance, step: str, since: float, image: str, *, once: bool,
                 shards: int = S) -> None:
    """:func:`driven_apart`, and every run record and object names the workload's shard of
    ``shards``. With ``once`` (no shard moved since ``since``): driven by exactly one
    replica, its shard's holder, in the Lease's epoch."""
    drivers = driven_apart(inst, step, since, image)
    head, deadline = inst.work.git("rev-parse", "HEAD"), time.monotonic() + 30
    while (records := inst.records()) and time.monotonic() < deadline and any(
            (r.state, r.revision) != ("succeeded", head) for r in records.values()):
        time.sleep(0.5)
    assert sorted(records) == sorted(inst.keys)
    late = [f"{k.name}: {r.state} {r.revision[:7]} {r.shard}@{r.epoch} cursor {r.cursor}"
            for k, r in records.items() if (r.state, r.revision) != ("succeeded", head)]
    assert late == [], late  # (a run left running after its last step: 0b3d804)
    if once:
        twice = {k: v for k, v in drivers.items()
                 if len(v) != 1 or next(iter(v.values()))[2] != 1}
        assert twice == {}, twice
    leases = inst.holders(shards)
    by_name = {r.name: r.pid for r in inst.replicas}
    for key in inst.keys:
        shard = shard_of(key, shards)
        pid, epoch = leases[shard]
        assert records[key].shard == shard_label(shard, shards), (key, records[key])
        if once:  # (else a run done before its shard moved keeps its driver's epoch)
            assert by_name[next(iter(drivers[key]))] == pid, (key, drivers[key], leases[shard])
            assert records[key].epoch == epoch, (key, records[key], leases[shard])
        else:
            assert records[key].epoch <= epoch, (key, records[key], leases[shard])
        obj = inst.clusters()[key]
        assert obj["metadata"]["labels"][LABEL_SHARD] == shard_label(shard, shards), \
            obj["metadata"]
    assert inst.leases.sampler.violations == [], inst.leases.sampler.violations[:5]


def balanced_three(inst: Instance) -> tuple[list[Replica], float]:
    """Replicas a, b, c driving two shards each, every workload converged on IMAGES[0];
    seconds from the first start until the shards were balanced."""
    since = time.time()
    inst.commit(IMAGES[0])
    t0 = time.monotonic()
    replicas = [inst.start(n) for n in ("a", "b", "c")]
    inst.wait_spread(replicas, [2, 2, 2], timeout=60)
    balanced = time.monotonic() - t0
    # (they start one by one: runs of shards handed to a newcomer are resumed by it)
    check_driven(inst, "create-cluster", since, IMAGES[0], once=False)
    return replicas, balanced


def test_three_replicas_share_six_shards_and_survive_a_sigkill(instance: Instance) -> None:
    inst = instance
    (a, victim, c), balanced = balanced_three(inst)
    since = time.time()
    second = inst.commit(IMAGES[1])  # balanced: each workload driven by its shard's holder
    check_driven(inst, "update-cluster", since, IMAGES[1], once=True)  # alone
    # each replica posts its workloads' statuses; shard 0's holder the commit's, once every
    # shard Lease says the commit is in sync there
    in_sync(inst, second, f"in sync at {second[:7]} (all {S} shards)")
    # and before that, the holder of shard 0 said it was pending
    assert ("pending", f"applying {second[:7]} across {S} shards") in overall_history(inst.bare)
    tally = Counter(min(v) for v in inst.drivers("update-cluster", since).values())
    assert sorted(tally) == ["a", "b", "c"], tally

    epochs = inst.holders()
    lost = [s for s, (pid, _) in epochs.items() if pid == victim.pid]
    killed = victim.kill()
    inst.wait_spread([a, c], [3, 3], timeout=3 * LEASE_S)
    took = time.time() - killed
    # not before its Leases lapsed, and within the lapse and a few rounds
    assert LEASE_S - 2 * RETRY_S <= took <= LEASE_S + 6 * RETRY_S, took
    after = inst.holders()
    assert len(lost) == 2 and all(after[s][1] == epochs[s][1] + 1 for s in lost), (epochs,
                                                                                   after)
    since = time.time()
    third = inst.commit(IMAGES[2])
    check_driven(inst, "update-cluster", since, IMAGES[2], once=True)
    in_sync(inst, third, f"(all {S} shards)")  # (shard 0's holder may be a new one)
    print(f"balanced {balanced:.1f} s after the first start; shards {lost} of the SIGKILLed "
          f"replica taken {took:.1f} s after the kill; updates per replica {dict(tally)}")


def test_sigterm_hands_the_shards_over_at_once_and_a_newcomer_gets_its_share(
        instance: Instance) -> None:
    inst = instance
    (a, b, c), _ = balanced_three(inst)
    before = inst.holders()
    mine = [s for s, (pid, _) in before.items() if pid == c.pid]
    t0 = time.monotonic()
    c.signal(signal.SIGTERM)
    inst.wait_spread([a, b], [3, 3], timeout=3 * LEASE_S)
    took = time.monotonic() - t0
    assert c.proc.wait(timeout=30) == 0
    # released, not lapsed: taken well before the Lease duration a crash costs
    assert took < LEASE_S / 2, took
    after = inst.holders()
    assert all(after[s][1] == before[s][1] + 1 for s in mine), (before, after)
    assert any("released shard" in line.msg for line in c.lines()), c.logs()[-2000:]

    t1 = time.monotonic()
    d = inst.start("d")
    inst.wait_spread([a, b, d], [2, 2, 2], timeout=60)
    joined = time.monotonic() - t1
    since = time.time()
    inst.commit(IMAGES[1])
    check_driven(inst, "update-cluster", since, IMAGES[1], once=True)
    assert "d" in {name for v in inst.drivers("update-cluster", since).values() for name in v}
    print(f"SIGTERM: shards {mine} taken by the others {took:.1f} s after the signal; "
          f"a newcomer got 2 shards {joined:.1f} s after it started")


def test_one_shard_is_the_one_lease_as_before(instance: Instance) -> None:
    inst = instance
    since = time.time()
    first = inst.commit(IMAGES[0])
    a, b = inst.start("a", shards=1), inst.start("b", shards=1)
    wait_for(lambda: inst.converged(IMAGES[0]), timeout=90, what="all RayClusters created")
    holder, _ = lease_holder(inst.env, inst.ns)
    leader = next(r for r in (a, b) if r.pid == holder_pid(holder))
    leases = [o["metadata"]["name"] for o in inst.leases.kube.list(
        "coordination.k8s.io/v1", "Lease", namespace=inst.ns)[0]]
    assert leases == ["gitray"], leases
    assert all("shards" not in json.loads(r.get("/readyz")[1]) for r in (a, b))
    wait_for(lambda: len(inst.records()) == N and all(
        r.state == "succeeded" for r in inst.records().values()), timeout=30,
        what="every run record succeeded")
    assert {(r.shard, r.epoch) for r in inst.records().values()} == {
        ("", lease_holder(inst.env, inst.ns)[1])}
    assert all(LABEL_SHARD not in o["metadata"].get("labels", {})
               for o in inst.clusters().values())
    drivers = inst.drivers("create-cluster", since)
    assert sorted(drivers) == sorted(inst.keys)
    assert all(list(v) == [leader.name] and v[leader.name][2] == 1 for v in drivers.values()), \
        drivers
    assert inst.leases.holders(S) == {}
    in_sync(inst, first, f"{N} workload(s) in sync at {first[:7]}")  # (the leader's, as before)


def test_resharding_six_to_four_by_a_rolling_restart(instance: Instance) -> None:
    """Replicas of count 4 join three of count 6, which are then stopped one at a time (a
    rollout); a commit lands mid-rollout. The new count waits for the old one to go, no
    workload is driven by two replicas at once, and count 4 then drives everything."""
    inst = instance
    olds, _ = balanced_three(inst)
    news = [inst.start(n, shards=4) for n in ("d", "e", "f")]
    time.sleep(4 * RETRY_S)  # rounds pass: the incumbent count stays while its replicas run
    assert all(inst.held(r) == {} for r in news)
    assert all(pid is None for pid, _ in inst.holders(4).values()), inst.holders(4)
    old_epochs = max(e for _, e in inst.holders(6).values())
    since = time.time()
    t0 = time.monotonic()
    for i, old in enumerate(olds):
        old.signal(signal.SIGTERM)
        assert old.proc.wait(timeout=30) == 0
        if i == 0:
            inst.commit(IMAGES[1])  # (mid-rollout: the old count drives it)
        time.sleep(2 * RETRY_S)
    inst.wait_spread(news, [1, 1, 2], timeout=3 * LEASE_S, shards=4)
    switched = time.monotonic() - t0
    driven_apart(inst, "update-cluster", since, IMAGES[1])
    assert all(e > old_epochs for _, e in inst.holders(4).values()), (old_epochs,
                                                                      inst.holders(4))
    since = time.time()
    inst.commit(IMAGES[2])
    check_driven(inst, "update-cluster", since, IMAGES[2], once=True, shards=4)
    print(f"count 4 drives every shard {switched:.1f} s after the rollout began")
