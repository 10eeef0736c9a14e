"""``gitray status``'s table: the OWNER column (shard and replica) only for a sharded
instance."""

from __future__ import annotations

from gitray.cli.status import StatusRow, render_status
from gitray.core.model import ObjectKey

SVC, JOB = ObjectKey("RayService", "team-a", "svc"), ObjectKey("RayJob", "team-b", "job")


def test_unsharded_the_table_is_as_before() -> None:
    text = render_status([StatusRow(SVC, "abc", "succeeded", "7/7"),
                          StatusRow(JOB, "-", "never applied", "-")])
    assert text.splitlines()[0].split() == ["WORKLOAD", "REVISION", "STATE", "STEP", "ACTIVE",
                                            "PENDING", "HEALTH"]
    assert "OWNER" not in text


def test_sharded_each_workload_shows_its_shard_and_holder() -> None:
    text = render_status([StatusRow(SVC, "abc", "running", "3/7", owner="2-of-6 gitray-1_aa"),
                          StatusRow(JOB, "abc", "succeeded", "2/2", owner="5-of-6 free")])
    header, svc, job = text.splitlines()
    assert header.split()[-1] == "OWNER"
    assert svc.endswith("2-of-6 gitray-1_aa") and job.endswith("5-of-6 free")
    assert header.index("OWNER") == svc.index("2-of-6") == job.index("5-of-6")
