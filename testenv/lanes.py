"""Which lane takes which module in scripts/test's lanes phase: a pytest plugin
(``-p testenv.lanes``) for pytest-xdist ``--dist loadfile``.

pytest-xdist hands each lane whole modules, the modules with the most tests first (its
``--loadscope-reorder``, on by default). ``HEAD`` names the long modules that mostly wait (a
RayJob that sleeps for 10 minutes in ``test_fleet.py``). They get a lane of their own, the
**waiting lane**: with ``-n N`` and at least two workers, the worker with the highest id
(``gwN-1``) runs the modules of ``HEAD`` and nothing else, from the start, and the other N - 1
workers run every other module in pytest-xdist's order. So ``scripts/test`` asks for one worker
more than its lanes: the waits overlap all the rest without holding a lane that could run it.
With one worker there is no waiting lane (it runs everything); with no module of ``HEAD``
selected the waiting lane has nothing to do and idles until the others end. Only where
modules run changes: which tests run does not.
Not for modules that load the node (``--no-loadscope-reorder`` with every long module first
put two real-Ray modules side by side at once and slowed the API server: commit 30e8e30).
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

__all__ = ["HEAD", "WaitingLane", "next_module"]

# long, and waiting most of their time (seconds in the clean-clone run of 7caa327, in a lane:
# test_fleet.py 801, a RayJob sleeping 10 minutes and two RayJobs parked for 150 s;
# test_health_notices.py 241, the health watch's polls and a receiver that hangs)
HEAD = ("tests/integration/test_fleet.py", "tests/integration/test_health_notices.py")


def next_module(queue: list[str], waiting: bool | None) -> str | None:
    """The module a lane takes next from the queue (in its order): the waiting lane
    (``waiting`` True) the first module of ``HEAD``, another lane beside it (False) the first
    module not in ``HEAD``, the one lane there is (None) the first; None: none for it."""
    if waiting is None:
        return queue[0] if queue else None
    if waiting:
        return next((m for m in HEAD if m in queue), None)
    return next((m for m in queue if m not in HEAD), None)


class WaitingLane(LoadFileScheduling):
    """``--dist loadfile`` with the modules of ``HEAD`` on a worker of their own."""

    def _waiting(self, node: Any) -> bool | None:
        nodes = self.nodes
        if len(nodes) < 2:
            return None
        return bool(node is max(nodes, key=lambda n: _order(n.gateway.id)))

    def _assign_work_unit(self, node: Any) -> None:
        module = next_module(list(self.workqueue), self._waiting(node))
        if module is None:
            return  # nothing for this lane now; when all is done, xdist stops every worker
        self.workqueue.move_to_end(module, last=False)
        super()._assign_work_unit(node)


def _order(worker: str) -> tuple[int, str]:
    """``gw10`` after ``gw9``."""
    digits = worker.lstrip("gw")
    return (int(digits) if digits.isdigit() else -1, worker)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    return WaitingLane(config, log)
