"""When ``wait-serve-running`` sends the Serve config again (a head that restarted and lost
it), counted from the last PUT — also for a wait parked by ``gitray sync``, which each re-check
resumes with a new call (pure parts of ``gitray.engine.servesteps``)."""

from __future__ import annotations

import pytest

from gitray.core.waits import Clock, Deadline
from gitray.engine.servesteps import REDEPLOY_AFTER_S, last_put_at, resend_due

SENT = {"applications": [{"name": "app", "import_path": "m:app"}]}


class Ticks:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("reported", "since", "due"), [
    ({}, REDEPLOY_AFTER_S, True), ({"applications": {}}, 60.0, True),
    ({}, REDEPLOY_AFTER_S - 0.1, False),  # just after a PUT Serve may not list them yet
    ({"applications": {"app": {"status": "DEPLOYING"}}}, 60.0, False),  # it has them
])
def test_the_config_is_sent_again_only_when_serve_lost_it_for_a_while(
        reported: dict[str, object], since: float, due: bool) -> None:
    assert resend_due(SENT, reported, since) is due
    assert resend_due({}, reported, since) is False  # nothing was sent: nothing to re-send


def test_the_last_put_is_counted_from_the_wait_steps_first_start_not_from_each_check() -> None:
    ticks = Ticks(1000.0)
    clock = Clock(monotonic=ticks)
    fresh = Deadline(180.0, clock)
    assert last_put_at(fresh) == 1000.0  # a wait this call began: deploy-serve just sent it
    # a parked wait checked again 40 s after its step began (a new call each time): Serve
    # holding no application now is due for a re-send at once, as a wait that never parked
    # would have re-sent it 15 s in
    resumed = Deadline(180.0, clock, spent=40.0)
    assert last_put_at(resumed) == 960.0
    assert resend_due(SENT, {}, ticks() - last_put_at(resumed))
    # ... while counted from the check's own call it would never be (every check is new)
    assert not resend_due(SENT, {}, ticks() - resumed.started)
    ticks.now += 5.0
    assert resend_due(SENT, {}, ticks() - last_put_at(resumed))
