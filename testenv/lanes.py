"""The order in which scripts/test's lanes take whole modules: a pytest plugin
(``-p testenv.lanes``) for its lanes phase (pytest-xdist ``--dist loadfile``).

pytest-xdist hands each lane whole modules, the modules with the most tests first (its
``--loadscope-reorder``, on by default). A long module with few tests therefore begins late,
and one lane runs it alone after the other has nothing left. ``HEAD`` names the long modules
that mostly wait (a RayJob that sleeps for 10 minutes in ``test_fleet.py``): the first lane to
ask for work takes them first, so their waits overlap everything else; every other module
keeps pytest-xdist's order. Only the order changes: which tests run, and where, does not.
Not for modules that load the node (``--no-loadscope-reorder`` with every long module first
put two real-Ray modules side by side at once and slowed the API server: commit 30e8e30).
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

__all__ = ["HEAD", "HeadFirst"]

HEAD = ("tests/integration/test_fleet.py",)  # long, and waiting most of its time


class HeadFirst(LoadFileScheduling):
    """``--dist loadfile`` with the modules of ``HEAD`` handed out before all others."""

    def _assign_work_unit(self, node: Any) -> None:
        for module in HEAD:
            if module in self.workqueue:
                self.workqueue.move_to_end(module, last=False)
                break
        super()._assign_work_unit(node)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    return HeadFirst(config, log)
