"""gitray.engine.failpoints stops the process at the named point only, and only when asked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitray.engine.failpoints import ENV_VAR

PROGRAM = """
import sys
from gitray.engine import failpoints
failpoints.hit(failpoints.Point.STEP_DONE, 3)
failpoints.hit(failpoints.Point.STEP_RECORDED, 2)
print("passed", flush=True)
failpoints.hit(failpoints.Point.STEP_RECORDED, 3)
print("resumed", flush=True)
"""


def state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def run(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


@pytest.mark.parametrize("env", [{}, {ENV_VAR: "/nonexistent/failpoints"}],
                         ids=["off", "file missing"])
def test_no_failpoint_no_stop(env: dict[str, str]) -> None:
    proc = run(env)
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["passed", "resumed"]


def test_the_matching_point_stops_the_process_until_continued(tmp_path: Path) -> None:
    wanted = tmp_path / "failpoints"
    wanted.write_text("step-done 1\nstep-recorded 3\n")
    proc = run({ENV_VAR: str(wanted)})
    try:
        deadline = time.monotonic() + 60
        while state(proc.pid) != "T":
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the process never stopped"
            time.sleep(0.02)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "passed"  # stopped after, not before
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=60)
        assert out.split() == ["resumed"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


THREADED = """
import sys, threading
from gitray.engine import failpoints

def work():
    failpoints.hit(failpoints.Point.STEP_DONE, 1)
    with open(sys.argv[1], "a") as fh:
        fh.write("after the failpoint\\n")

t = threading.Thread(target=work)
t.start()
t.join()
"""


def test_a_worker_thread_that_hits_the_failpoint_runs_no_further(tmp_path: Path) -> None:
    """The runs execute in worker threads: the thread at the failpoint stops there, not only
    when another thread of the process gets round to stopping it."""
    wanted, after = tmp_path / "failpoints", tmp_path / "after"
    wanted.write_text("step-done 1\n")
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", THREADED, str(after)],
                                env={**os.environ, ENV_VAR: str(wanted)})
        try:
            deadline = time.monotonic() + 60
            while state(proc.pid) != "T":
                assert proc.poll() is None, "the process ended without stopping"
                assert time.monotonic() < deadline, "the process never stopped"
                time.sleep(0.01)
            time.sleep(0.2)
            assert not after.exists(), after.read_text()
            os.kill(proc.pid, signal.SIGCONT)
            assert proc.wait(timeout=60) == 0
            assert after.read_text() == "after the failpoint\n"  # continued, it goes on
            after.unlink()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

