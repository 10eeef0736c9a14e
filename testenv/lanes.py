"""Which lane takes which module in scripts/test's pytest-xdist phases: a pytest plugin
(``-p testenv.lanes``) for its lanes phase and its alone phase (``--alone-lanes``), both
``--dist loadfile``.

pytest-xdist hands each lane whole modules, the modules with the most tests first (its
``--loadscope-reorder``, on by default). ``HEAD`` names the long modules that mostly wait (a
RayJob that sleeps for 10 minutes in ``test_fleet.py``). They get a lane of their own, the
**waiting lanes**: with ``-n N`` and H modules of ``HEAD`` selected, the H workers with the
highest ids (``gwN-1``, ...) run one module of ``HEAD`` each from the start
(``waiting_lanes``: at least one other lane is left; fewer workers, and a waiting lane runs
the rest of ``HEAD`` one after another), and the other workers run every other module in
pytest-xdist's order. So ``scripts/test`` asks for a worker more than its lanes per module of
``HEAD``: the waits overlap all the rest and each other without holding a lane that could run
it. A waiting lane whose modules of ``HEAD`` are all taken takes the other modules too, as
one more lane: in the clean-clone run of 2136143 the lane of ``test_health_notices.py`` idled
from 259 s and that of ``test_fleet.py`` from 806 s of a 1,167-s lanes phase, the machine
45-86 % busy after 806 s by ``/proc/stat``. With one worker there is no waiting lane (it runs
everything). Only where modules run changes: which tests run does not.
Not for modules that load the node (``--no-loadscope-reorder`` with every long module first
put two real-Ray modules side by side at once and slowed the API server: commit 30e8e30).

Unit tests (under ``UNIT_DIR``) need no environment: ``--unit-phase`` selects only them
(scripts/test runs them beside its own_node phase, whose CPU was about half idle) and
``--without-unit`` every other test (its lanes phase, whose CPU is the busiest).

The alone phase (``--alone-lanes``) runs the tests that count failed requests or judge success
rates, and the Gateway tests, with no lane beside them: in three lanes, one test at a time in
each (``AloneLanes``): the modules of ``GATEWAY_LANE`` (the Gateway tests: one Traefik
listener, one ``/hello`` route at a time) in one, those of ``GATES_LANE`` in another, every
other module in the third. The CI tests (under ``LATE_DIR``, marked ``late``: the GitHub
Action, the GitLab template and the pre-commit hook, run as their hosts run them; no
Kubernetes) follow on the lanes other than the Gateway's once those ran their own modules: the
Gateway lane ends about 140 s after the other two, the machine ~30 % idle meanwhile, and the
CI tests touch nothing the counting tests count.
(pytest-xdist's ``--dist loadgroup`` would do it by marks, but groups nothing with pytest 9.2
and pytest-xdist 3.8 here: every test was handed out on its own.)
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling, LoadScopeScheduling

__all__ = ["ALONE_GROUPS", "GATES_LANE", "GATEWAY_LANE", "HEAD", "LATE_DIR", "UNIT_DIR",
           "AloneLanes", "WaitingLane", "alone_group", "is_unit", "next_alone_scope",
           "next_module", "waiting_lanes"]

# long, and waiting most of their time (seconds in the clean-clone run of dc85845, one waiting
# lane for both: test_fleet.py 800, a RayJob sleeping 10 minutes and two RayJobs parked for
# 150 s; test_health_notices.py 451 after it, the health watch's polls and a receiver that
# hangs: that lane ended last, 2 s after the busiest other lane)
HEAD = ("tests/integration/test_fleet.py", "tests/integration/test_health_notices.py")


UNIT_DIR = "tests/unit"

# The alone phase's lanes. The Gateway lane: every module marked gateway (a unit test checks
# that). Another lane for the gate tests and test_vs_kuberay.py; the third for the rest (seconds
# in two alone lanes, clean-clone run of 9b5c602: test_incremental.py 391, test_monitoring.py
# 126; test_bluegreen_gates.py 285, test_vs_kuberay.py about 70; test_failover.py 263,
# test_realnode.py's traffic test 101).
GATEWAY_LANE = ("tests/integration/test_gateway.py", "tests/integration/test_incremental.py",
                "tests/integration/test_monitoring.py")
GATES_LANE = ("tests/integration/test_bluegreen_gates.py", "tests/integration/test_vs_kuberay.py")
ALONE_GROUPS = ("gateway", "gates", "alone")  # the alone phase's lanes, handed out first
# The CI tests (marked late): at the end of the alone phase, not in the lanes (seconds in the
# clean-clone run of 2f9378f with three lanes: the alone phase's other lanes ended at 409 and
# 423, the Gateway lane at 538; test_github_action.py took 135 in a lane)
LATE_DIR = "tests/ci"


def alone_group(nodeid: str) -> str:
    """The alone phase's scope of a test (its node id): its lane's group, or its own module
    for a late module (under ``LATE_DIR``: one module at a time on a lane that is free)."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(f"{LATE_DIR}/"):
        return module
    return "gateway" if module in GATEWAY_LANE else "gates" if module in GATES_LANE else "alone"


def next_alone_scope(queue: list[str], gateway_lane: bool) -> str | None:
    """The scope a lane of the alone phase takes next from the queue: a group of
    ``ALONE_GROUPS`` while one is left (in that order), then the late modules in the queue's
    order, never on the Gateway lane (``gateway_lane``: it ends last as it is); None: none
    for it."""
    group = next((g for g in ALONE_GROUPS if g in queue), None)
    if group is not None:
        return group
    if gateway_lane:
        return None
    return next((scope for scope in queue if scope not in ALONE_GROUPS), None)


def is_unit(nodeid: str) -> bool:
    """A unit test (under ``UNIT_DIR``): it needs no environment, so scripts/test runs it
    beside the own_node tests (``--unit-phase``) and not in the lanes (``--without-unit``)."""
    return nodeid.startswith(f"{UNIT_DIR}/")


def next_module(queue: list[str], waiting: bool | None) -> str | None:
    """The module a lane takes next from the queue (in its order): the waiting lane
    (``waiting`` True) the first module of ``HEAD``, and once none is left the first other
    module, as another lane beside it (False) does, which never takes one of ``HEAD``; the one
    lane there is (None) the first; None: none for it."""
    if waiting is None:
        return queue[0] if queue else None
    if waiting:
        head = next((m for m in HEAD if m in queue), None)
        if head is not None:
            return head
    return next((m for m in queue if m not in HEAD), None)


def waiting_lanes(workers: int, heads: int) -> int:
    """How many of ``workers`` are waiting lanes when ``heads`` modules of ``HEAD`` are selected:
    one per module, with at least one other lane left (none with one worker)."""
    return max(0, min(heads, workers - 1))


class WaitingLane(LoadFileScheduling):
    """``--dist loadfile`` with each module of ``HEAD`` on a worker of its own (the workers
    with the highest ids), while there are workers enough."""

    # the waiting lanes' worker ids, chosen once at the first hand-out: workers that end leave
    # ``self.nodes``, and ranking what is left again made a busy lane a waiting lane that took
    # nothing more (clean-clone run of e9b5b01: one lane idle from 09:21, the other ran on alone)
    _waiting_ids: frozenset[str] | None = None

    def _waiting(self, node: Any) -> bool | None:
        if self._waiting_ids is None:
            nodes = self.nodes
            heads = sum(m in self.workqueue for m in HEAD)
            ranked = sorted(nodes, key=lambda n: _order(n.gateway.id), reverse=True)
            count = max(1, waiting_lanes(len(nodes), heads)) if len(nodes) >= 2 else 0
            self._waiting_ids = frozenset(n.gateway.id for n in ranked[:count])
        if not self._waiting_ids:
            return None
        return node.gateway.id in self._waiting_ids

    def _assign_work_unit(self, node: Any) -> None:
        _hand_out(self, node, next_module(list(self.workqueue), self._waiting(node)))


class AloneLanes(LoadScopeScheduling):
    """The alone phase: the tests of one ``alone_group`` on one worker, one after another, then
    the late modules on the lanes other than the Gateway lane (``next_alone_scope``)."""

    def _split_scope(self, nodeid: str) -> str:
        return alone_group(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        # (the one lane there is runs everything)
        gateway_lane = "gateway" in self.assigned_work.get(node, {}) and len(self.nodes) > 1
        _hand_out(self, node, next_alone_scope(list(self.workqueue), gateway_lane))


def _hand_out(scheduler: LoadScopeScheduling, node: Any, scope: str | None) -> None:
    """Give ``node`` the queue's ``scope`` next, or, when None (nothing in the queue is for
    this lane, now or later: it only shrinks), tell its worker so. A pytest-xdist worker holds
    its last test back until it gets more work or this; unsaid, a waiting lane's last test
    began only when every other lane had ended (clean-clone run of 43f284b: test_fleet.py's
    second test, 154 s, began at 1,151 s and ended the lanes phase at 1,305 s)."""
    if scope is None:
        if not node.shutting_down:
            node.shutdown()
        return
    scheduler.workqueue.move_to_end(scope, last=False)
    LoadScopeScheduling._assign_work_unit(scheduler, node)


def _order(worker: str) -> tuple[int, str]:
    """``gw10`` after ``gw9``."""
    digits = worker.lstrip("gw")
    return (int(digits) if digits.isdigit() else -1, worker)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--unit-phase", action="store_true",
                     help="scripts/test's first phase beside the own_node tests: only the tests "
                          f"under {UNIT_DIR}/ (they need no environment)")
    parser.addoption("--without-unit", action="store_true",
                     help=f"scripts/test's lanes phase: every test but those under {UNIT_DIR}/ "
                          "(the first phase ran them)")
    parser.addoption("--alone-lanes", action="store_true",
                     help="scripts/test's alone phase: the Gateway tests in one lane, the "
                          "gate tests in another, the rest in a third (testenv/lanes.py; "
                          "with --dist loadfile)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit_only, without_unit = config.getoption("unit_phase"), config.getoption("without_unit")
    if not unit_only and not without_unit:
        return
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (keep if is_unit(item.nodeid) == bool(unit_only) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    if config.getoption("alone_lanes"):
        return AloneLanes(config, log)
    return WaitingLane(config, log)
