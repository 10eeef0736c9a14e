"""The status page in a real headless browser (Debian's ``chromium``) with hostile text: a
workload name and step messages carrying HTML and script are shown as text, never run (issue
30). The page is served by the daemon's real HTTP endpoint on 127.0.0.1; what it shows comes
from the daemon's signals, fed here as a pass would feed them."""

from __future__ import annotations

import time
from pathlib import Path

from gitray.core.model import ObjectKey
from gitray.daemon.http import HttpEndpoints, Probes
from gitray.daemon.metrics import Metrics
from gitray.daemon.signals import Signals
from gitray.daemon.state import DaemonState
from gitray.engine.executor import Outcome, StepEvent, WorkloadOutcome
from gitray.plans.plan import Step
from gitray.plans.steptypes import StepType
from tests.integration.test_monitoring import chromium

SHA = "0123456789abcdef0123456789abcdef01234567"
# each would change the page's title if the browser ran it
PWN = "document.title='pwned'"
NAME = f'<img src=x onerror="{PWN}">'
SCRIPT = f"<script>{PWN}</script>"


def test_a_hostile_workload_name_and_step_text_are_shown_as_text(tmp_path: Path) -> None:
    metrics = Metrics()
    signals = Signals(metrics, repo="https://git.example/team/repo.git")
    key = ObjectKey("RayService", "ml", NAME)
    report = signals.reporter(SHA, lambda _event: None)
    create = Step("c", StepType.CREATE_CLUSTER, f"new{SCRIPT}", {"manifest": {"spec": {}}})
    report(StepEvent(key, 1, 2, create, "start"))
    report(StepEvent(key, 1, 2, create, "done", f"created {SCRIPT}"))
    signals.outcomes(SHA, "commit", [WorkloadOutcome(key, Outcome.FAILED, f"failed: {SCRIPT}",
                                                     1, 2)])
    state = DaemonState(fetched=SHA, synced=SHA)
    http = HttpEndpoints(("127.0.0.1", 0), Probes(lambda: True, lambda: True, lambda: True,
                                                  dict), metrics, lambda: None, None,
                         page=lambda: signals.page(state, True))
    http.start()
    try:
        started = time.monotonic()
        dom = chromium(tmp_path, "--dump-dom", f"http://127.0.0.1:{http.port}/status")
        print(f"chromium rendered the page in {time.monotonic() - started:.1f} s")
    finally:
        http.stop()
    assert "<title>gitray status</title>" in dom, dom[:500]  # neither ran
    assert "pwned" not in dom.split("<body>", 1)[0]
    assert "<img" not in dom and "<script>" not in dom.split("<body>", 1)[1]
    assert f"ml/RayService/&lt;img src=x onerror=\"{PWN}\"&gt;" in dom, dom
    assert f"created &lt;script&gt;{PWN}&lt;/script&gt;" in dom
    assert "run failed: failed: &lt;script&gt;" in dom
