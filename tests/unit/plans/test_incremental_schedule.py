"""KubeRay's clusterUpgradeOptions: which values an upgrade can use, and the weight schedule.

The schedule is the sequence of Serve capacity moves (``n``: the new cluster, ``o``: the old
one) and traffic weights (plain numbers, the new cluster's share) after Serve was deployed to
the new cluster at ``target_capacity`` = maxSurgePercent.
"""

from __future__ import annotations

from typing import Any

import pytest

from gitray.plans.rayservice.upgradeoptions import (
    Capacity,
    IncrementalOptions,
    Side,
    Weight,
    options_problems,
    read_options,
    schedule,
)


def moves(step: int, surge: int) -> str:
    out = []
    for move in schedule(IncrementalOptions("traefik", step, 30, surge)):
        if isinstance(move, Capacity):
            out.append(f"{move.side.value[0]}{move.percent}")
        else:
            out.append(str(move.percent))
    return " ".join(out)


@pytest.mark.parametrize(("step", "surge", "expected"), [
    pytest.param(25, 100, "25 50 75 100",
                 id="full surge: the new cluster is built at 100 %, only traffic moves"),
    pytest.param(100, 100, "100", id="a 100 % step moves everything at once, still analysed"),
    pytest.param(30, 100, "30 60 90 100", id="the last step is cut to 100"),
    pytest.param(5, 20, "5 10 15 20 o80 n40 25 30 35 40 o60 n60 45 50 55 60 o40 n80 65 70 75 80"
                 " o20 n100 85 90 95 100",
                 id="KubeRay's documented example: surge 20, step 5"),
    pytest.param(15, 20, "15 20 o80 n40 35 40 o60 n60 55 60 o40 n80 75 80 o20 n100 95 100",
                 id="traffic never runs ahead of capacity: a step is cut at the capacity"),
    pytest.param(10, 10, "10 o90 n20 20 o80 n30 30 o70 n40 40 o60 n50 50 o50 n60 60 o40 n70 70"
                 " o30 n80 80 o20 n90 90 o10 n100 100", id="KubeRay's sample: 10/10"),
    pytest.param(30, 50, "30 50 o50 n100 80 100", id="a surge of half the capacity"),
    pytest.param(40, 40, "40 o60 n80 80 o20 n100 100",
                 id="capacity is capped at 100 % on both sides"),
])
def test_weight_schedule(step: int, surge: int, expected: str) -> None:
    assert moves(step, surge) == expected


@pytest.mark.parametrize(("step", "surge"), [(s, m) for m in (1, 7, 20, 33, 50, 99, 100)
                                             for s in (1, 3, 7, 20, 33, 50, 99, 100) if s <= m])
def test_every_schedule_ends_at_100_and_never_exceeds_the_surge(step: int, surge: int) -> None:
    new, old, weight = surge, 100, 0
    for move in schedule(IncrementalOptions("gw", step, 1, surge)):
        if isinstance(move, Capacity) and move.side is Side.NEW:
            assert move.percent > new
            new = move.percent
        elif isinstance(move, Capacity):
            assert move.percent < old
            old = move.percent
        else:
            assert weight < move.percent <= new, "traffic stays within the new capacity"
            assert move.percent - weight <= step
            weight = move.percent
        assert new + old <= 100 + surge, "the two clusters never exceed 100 % + maxSurge"
        assert 100 - weight <= old, "the old cluster keeps capacity for its traffic"
    assert weight == 100 and new == 100


def test_the_schedule_is_deterministic() -> None:
    options = IncrementalOptions("gw", 7, 10, 30)
    assert schedule(options) == schedule(options)
    assert all(isinstance(m, Capacity | Weight) for m in schedule(options))


def strategy(**options: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"gatewayClassName": "traefik", "stepSizePercent": 10,
                            "intervalSeconds": 30}
    base.update(options)
    return {"type": "NewClusterWithIncrementalUpgrade",
            "clusterUpgradeOptions": {k: v for k, v in base.items() if v is not None}}


@pytest.mark.parametrize(("options", "path", "message"), [
    ({"stepSizePercent": 0}, "stepSizePercent", "stepSizePercent 0 must be between 1 and 100"),
    ({"stepSizePercent": 101}, "stepSizePercent", "stepSizePercent 101 must be between 1 and"),
    ({"maxSurgePercent": 0}, "maxSurgePercent", "maxSurgePercent 0 must be between 1 and 100"),
    ({"maxSurgePercent": 150}, "maxSurgePercent", "maxSurgePercent 150 must be between 1 and"),
    ({"stepSizePercent": 30, "maxSurgePercent": 20}, "stepSizePercent",
     "stepSizePercent 30 must not exceed maxSurgePercent 20: traffic cannot move faster"),
    ({"intervalSeconds": 0}, "intervalSeconds", "intervalSeconds 0 must be at least 1"),
    ({"intervalSeconds": -5}, "intervalSeconds", "intervalSeconds -5 must be at least 1"),
    ({"gatewayClassName": " "}, "gatewayClassName", "gatewayClassName is empty: name the "
     "GatewayClass"),
], ids=["zero step", "step over 100", "zero surge", "surge over 100", "step over surge",
        "zero interval", "negative interval", "blank gateway class"])
def test_options_an_upgrade_cannot_use_are_refused_by_name(options: dict[str, Any], path: str,
                                                          message: str) -> None:
    found = list(options_problems(strategy(**options)))
    assert len(found) == 1, found
    where, text = found[0]
    assert where == ("spec", "upgradeStrategy", "clusterUpgradeOptions", path)
    assert text.startswith("spec.upgradeStrategy.clusterUpgradeOptions." + message), text


def test_missing_options_are_asked_for() -> None:
    found = list(options_problems({"type": "NewClusterWithIncrementalUpgrade"}))
    assert found == [(("spec", "upgradeStrategy"),
                      "spec.upgradeStrategy.clusterUpgradeOptions is required for "
                      "NewClusterWithIncrementalUpgrade: set gatewayClassName, stepSizePercent "
                      "and intervalSeconds (maxSurgePercent defaults to 100)")]


def test_valid_options_read_with_kuberays_default_surge() -> None:
    assert not list(options_problems(strategy()))
    assert read_options(strategy()) == IncrementalOptions("traefik", 10, 30, 100)
    assert read_options(strategy(maxSurgePercent=20)).max_surge_percent == 20


def test_unvalidated_options_are_not_read() -> None:
    with pytest.raises(ValueError, match="not validated"):
        read_options(strategy(stepSizePercent=0))
