"""KubeRay's ``clusterUpgradeOptions`` and the weight schedule they imply. Pure, no I/O.

``upgradeStrategy.type: NewClusterWithIncrementalUpgrade`` moves traffic from the active
cluster to the new one through a Gateway API HTTPRoute. The options, as KubeRay defines them:

- ``stepSizePercent``: traffic moved to the new cluster per step;
- ``intervalSeconds``: how long each weight is held before the next step;
- ``maxSurgePercent`` (default 100): Serve ``target_capacity`` is raised on the new cluster
  in steps of this size, and lowered on the old one by the same amount once the traffic has
  caught up, so the two clusters together never run more than 100 % + maxSurge;
- ``gatewayClassName``: the GatewayClass of the Gateway the HTTPRoute hangs off.

The traffic weight never runs ahead of the new cluster's capacity: a step is cut short at the
capacity (KubeRay does the same), so with ``stepSizePercent: 15, maxSurgePercent: 20`` the
weights are 15, 20, 35, 40, ... 95, 100.

gitray is stricter than KubeRay where KubeRay accepts a value that can never finish an upgrade
(a step or surge of 0 %).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gitray.parsing.text import JsonPath

__all__ = [
    "DEFAULT_MAX_SURGE",
    "Capacity",
    "IncrementalOptions",
    "Side",
    "Weight",
    "options_problems",
    "read_options",
    "schedule",
]

DEFAULT_MAX_SURGE = 100  # KubeRay's CRD default
_OPTIONS: JsonPath = ("spec", "upgradeStrategy", "clusterUpgradeOptions")
_MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class IncrementalOptions:
    gateway_class: str
    step_percent: int
    interval_s: int
    max_surge_percent: int = DEFAULT_MAX_SURGE


class Side(StrEnum):
    NEW = "new"
    OLD = "old"


@dataclass(frozen=True)
class Capacity:
    """Set Serve ``target_capacity`` of one side's cluster to ``percent``."""

    side: Side
    percent: int


@dataclass(frozen=True)
class Weight:
    """Route ``percent`` of the traffic to the new cluster (the rest to the old)."""

    percent: int


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def options_problems(strategy: Mapping[str, object]) -> Iterator[tuple[JsonPath, str]]:
    """Why ``spec.upgradeStrategy``'s clusterUpgradeOptions cannot drive an upgrade.

    Types and required fields are the CRD schema's (reported by the loader); these are the
    values the schema accepts and an upgrade cannot use.
    """
    options = strategy.get("clusterUpgradeOptions")
    name = "spec.upgradeStrategy.clusterUpgradeOptions"
    if not isinstance(options, Mapping):
        yield ("spec", "upgradeStrategy"), (
            f"{name} is required for NewClusterWithIncrementalUpgrade: set gatewayClassName, "
            "stepSizePercent and intervalSeconds (maxSurgePercent defaults to 100)")
        return
    step, surge = _int(options.get("stepSizePercent")), _int(options.get("maxSurgePercent"))
    interval = _int(options.get("intervalSeconds"))
    if step is not None and not 1 <= step <= 100:
        yield (*_OPTIONS, "stepSizePercent"), (
            f"{name}.stepSizePercent {step} must be between 1 and 100: it is the share of "
            "traffic moved to the new cluster per step (0 would never move any)")
    if surge is not None and not 1 <= surge <= 100:
        yield (*_OPTIONS, "maxSurgePercent"), (
            f"{name}.maxSurgePercent {surge} must be between 1 and 100: it is the Serve "
            "capacity added to the new cluster per step (0 would never add any)")
    if step is not None and 1 <= step <= 100 and step > (surge or DEFAULT_MAX_SURGE) >= 1:
        yield (*_OPTIONS, "stepSizePercent"), (
            f"{name}.stepSizePercent {step} must not exceed maxSurgePercent "
            f"{surge}: traffic cannot move faster than the new cluster's capacity grows")
    if interval is not None and not 1 <= interval <= _MAX_INT32:
        yield (*_OPTIONS, "intervalSeconds"), (
            f"{name}.intervalSeconds {interval} must be at least 1: it is how long each "
            "traffic weight is held (and analysed) before the next step")
    gateway_class = options.get("gatewayClassName")
    if isinstance(gateway_class, str) and not gateway_class.strip():
        yield (*_OPTIONS, "gatewayClassName"), (
            f"{name}.gatewayClassName is empty: name the GatewayClass whose controller "
            "splits the traffic (kubectl get gatewayclass)")


def read_options(strategy: Mapping[str, object]) -> IncrementalOptions:
    """The options of a validated ``spec.upgradeStrategy`` (see :func:`options_problems`)."""
    options = strategy.get("clusterUpgradeOptions")
    if not isinstance(options, Mapping) or next(options_problems(strategy), None):
        raise ValueError("clusterUpgradeOptions were not validated")
    step, interval = _int(options.get("stepSizePercent")), _int(options.get("intervalSeconds"))
    gateway_class = options.get("gatewayClassName")
    if step is None or interval is None or not isinstance(gateway_class, str):
        raise ValueError("clusterUpgradeOptions were not validated")
    return IncrementalOptions(gateway_class=gateway_class, step_percent=step,
                              interval_s=interval,
                              max_surge_percent=_int(options.get("maxSurgePercent"))
                              or DEFAULT_MAX_SURGE)


def schedule(options: IncrementalOptions) -> tuple[Capacity | Weight, ...]:
    """The capacity and weight moves of an upgrade, in order.

    Starts after Serve was deployed to the new cluster at ``target_capacity`` = maxSurge,
    with the old cluster at 100 % capacity and 100 % of the traffic. Ends at weight 100.
    """
    surge, step = options.max_surge_percent, options.step_percent
    new_capacity, old_capacity, weight = min(surge, 100), 100, 0
    moves: list[Capacity | Weight] = []
    while weight < 100:
        if weight == new_capacity:  # the traffic caught up with the capacity: surge again
            if old_capacity > 100 - new_capacity:
                old_capacity = 100 - new_capacity
                moves.append(Capacity(Side.OLD, old_capacity))
            new_capacity = min(new_capacity + surge, 100)
            moves.append(Capacity(Side.NEW, new_capacity))
        weight = min(weight + step, new_capacity)
        moves.append(Weight(weight))
    return tuple(moves)
