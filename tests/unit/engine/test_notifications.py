"""Notifications: the events a pass gives rise to and their payloads (pure), receivers from
gitray.yaml, and delivery to a real HTTP receiver on 127.0.0.1 (retried, de-duplicated, never
blocking, never showing a secret)."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gitray.core.config import NotificationSettings, Receiver, ReceiverType
from gitray.core.errors import ConfigError
from gitray.core.model import ObjectKey
from gitray.core.notices import EventKind, Notice
from gitray.engine.executor import Outcome, StepEvent, WorkloadOutcome
from gitray.engine.notices import (
    cluster_capacity,
    health_notices,
    healthy,
    outcome_notices,
    refused_notice,
    step_notices,
)
from gitray.hosts import notify
from gitray.hosts.notify import Notifier, payload, resolve, routes
from gitray.parsing.config import parse_config
from gitray.plans.plan import Step
from gitray.plans.steptypes import StepType

SVC = ObjectKey("RayService", "ml", "fruit")
JOB = ObjectKey("RayJob", "ml", "train")
SHA = "0123456789abcdef0123456789abcdef01234567"

CLUSTER = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {
    "headGroupSpec": {"template": {"spec": {"containers": [
        {"name": "head", "resources": {"requests": {"cpu": "500m"}}}]}}},
    "workerGroupSpecs": [{"replicas": 2, "template": {"spec": {"containers": [
        {"name": "w", "resources": {"limits": {"cpu": "2"}}}]}}}]}}


def event(step: Step, phase: str, detail: str = "", key: ObjectKey = SVC) -> StepEvent:
    return StepEvent(key, 3, 9, step, phase, detail)


# ---- events -----------------------------------------------------------------------------

def test_cluster_capacity_counts_pods_and_cpu() -> None:
    assert cluster_capacity(CLUSTER) == "1 head + 2 worker pods, 4.5 CPU"
    assert cluster_capacity({"spec": {"workerGroupSpecs": [{"minReplicas": 1}]}}) == \
        "1 head + 1 worker pod"


def test_upgrade_started_carries_the_extra_capacity() -> None:
    step = Step("c", StepType.CREATE_CLUSTER, "fruit-14f9f", {"manifest": CLUSTER})
    [n] = step_notices(event(step, "start"), SHA)
    assert n.event is EventKind.UPGRADE_STARTED and n.workload == SVC
    assert "fruit-14f9f" in n.summary and "4.5 CPU" in n.summary
    assert ("extra capacity", "1 head + 2 worker pods, 4.5 CPU") in n.fields
    assert step_notices(event(step, "done"), SHA) == []  # once, at the start
    # a RayCluster workload's create-cluster is no upgrade
    assert step_notices(event(step, "start", key=ObjectKey("RayCluster", "ml", "c")), SHA) == []


def test_traffic_steps_say_the_share_on_the_new_cluster() -> None:
    step = Step("t", StepType.SHIFT_TRAFFIC, "fruit-route",
                {"percent": 25, "cluster": "fruit-new", "from": "fruit-old"})
    [n] = step_notices(event(step, "done"), SHA)
    assert n.event is EventKind.TRAFFIC_STEP and "25 % to fruit-new" in n.summary
    assert ("percent", "25") in n.fields
    last = Step("t", StepType.SHIFT_TRAFFIC, "fruit-route",
                {"percent": 100, "cluster": "fruit-new", "from": "fruit-new"})
    assert step_notices(event(last, "done"), SHA)[0].fields[0] == ("percent", "100")
    assert step_notices(event(step, "start"), SHA) == []


def test_failed_analysis_carries_the_measured_value() -> None:
    step = Step("a", StepType.RUN_ANALYSIS, "fruit-new", {"percent": 25})
    detail = ("analysis failed (1 of failureLimit 2): success-rate 91.2 % < 99 % (114 of 125 "
              "requests) on fruit-new at 25 %; holding the weight and analysing again")
    [n] = step_notices(event(step, "progress", detail), SHA)
    assert n.event is EventKind.ANALYSIS_FAILED and "91.2 %" in n.summary
    [final] = step_notices(event(step, "failed", "success-rate 90 % < 99 %"), SHA)
    assert final.event is EventKind.ANALYSIS_FAILED
    assert step_notices(event(step, "progress", "waiting 10 s"), SHA) == []
    assert step_notices(event(step, "done", "analysis passed"), SHA) == []


def test_outcomes_converged_failed_rolled_back_and_drift() -> None:
    rolled = "rolled back: all traffic to fruit-old at full Serve capacity, fruit-new deleted"
    outcomes = [
        WorkloadOutcome(SVC, Outcome.FAILED, f"step 7/12 run-analysis failed: x; {rolled}", 6,
                        12, ("a", rolled)),
        WorkloadOutcome(JOB, Outcome.FAILED, "step 2/2 wait-job failed: RayJob train FAILED: "
                        "ValueError: boom", 1, 2),
        WorkloadOutcome(ObjectKey("RayCluster", "ml", "c"), Outcome.SUCCEEDED, "", 2, 2),
        WorkloadOutcome(ObjectKey("RayCluster", "ml", "idle"), Outcome.SUCCEEDED, "", 0, 0),
        WorkloadOutcome(ObjectKey("RayService", "ml", "s"), Outcome.SUPERSEDED, "newer", 1, 5),
    ]
    got = [(n.event, n.workload) for n in outcome_notices(SHA, "commit", outcomes)]
    assert got == [(EventKind.RUN_FAILED, SVC), (EventKind.ROLLED_BACK, SVC),
                   (EventKind.RUN_FAILED, JOB),
                   (EventKind.CONVERGED, ObjectKey("RayCluster", "ml", "c"))]
    job = outcome_notices(SHA, "commit", outcomes[1:2])[0]
    assert "ValueError: boom" in job.summary  # Ray's error
    drift = outcome_notices(SHA, "drift", outcomes[2:3])
    assert [n.event for n in drift] == [EventKind.DRIFT_HEALED]
    assert outcome_notices(SHA, "deletions", outcomes[2:3]) == []


def test_refused_and_health_changes() -> None:
    n = refused_notice(SHA, "invalid revision: ml/a.yaml:3:1: spec: required")
    assert n.event is EventKind.CHANGE_REFUSED and n.summary.startswith("0123456 not applied")
    assert healthy("greeter RUNNING") is True
    assert healthy("greeter UNHEALTHY") is False
    assert healthy("train-x: FAILED (Failed): boom") is False
    assert healthy("ready, head ready, 2/2 workers ready") is True
    assert healthy("-") is None
    assert healthy("unknown (connection failed)") is None
    lines = {SVC: "greeter UNHEALTHY", JOB: "train-1: SUCCEEDED (Complete)"}
    got = health_notices(SHA, {}, lines)
    assert [(x.event, x.workload) for x in got] == [(EventKind.HEALTH_DEGRADED, SVC)]
    back = health_notices(SHA, {SVC: False, JOB: True}, {SVC: "greeter RUNNING", JOB: "-"})
    assert [(x.event, x.workload) for x in back] == [(EventKind.HEALTH_RECOVERED, SVC)]


# ---- payloads and routes ----------------------------------------------------------------

NOTICE = Notice(EventKind.RUN_FAILED, SHA, "RayJob ml/train: failed", JOB,
                (("reason", "boom"),))


def test_payloads() -> None:
    generic = payload(ReceiverType.WEBHOOK, NOTICE)
    assert generic == {"event": "run-failed", "revision": SHA, "summary": "RayJob ml/train: "
                       "failed", "fields": {"reason": "boom"},
                       "workload": {"kind": "RayJob", "namespace": "ml", "name": "train"}}
    slack = payload(ReceiverType.SLACK, NOTICE)
    assert slack["text"] == "*gitray: run-failed*: RayJob ml/train: failed"
    assert slack["attachments"] == [{"color": "#d93f0b", "fallback": "RayJob ml/train: failed",
                                     "fields": [{"title": "reason", "value": "boom",
                                                 "short": True}]}]
    teams = payload(ReceiverType.TEAMS, NOTICE)
    assert teams["@type"] == "MessageCard" and teams["themeColor"] == "d93f0b"
    assert teams["sections"] == [{"activityTitle": "RayJob ml/train: failed",
                                  "facts": [{"name": "reason", "value": "boom"}]}]
    json.dumps([generic, slack, teams])


def test_routes_by_event() -> None:
    every = Receiver("all", url="http://x")
    failures = Receiver("oncall", url="http://y", events=("run-failed", "rolled-back"))
    others = Receiver("deploys", url="http://z", events=("converged",))
    assert routes([every, failures, others], NOTICE) == [every, failures]


def test_receivers_from_gitray_yaml() -> None:
    config = parse_config(b"""apiVersion: gitray.io/v1alpha1
kind: Config
notifications:
  receivers:
    - {name: oncall, type: slack, urlEnv: GITRAY_NOTIFY_SLACK, events: [run-failed]}
    - {name: audit, url: "https://audit.example/hook", tokenFile: audit-token}
""")
    assert config.notifications.receivers == (
        Receiver("oncall", ReceiverType.SLACK, url_env="GITRAY_NOTIFY_SLACK",
                 events=("run-failed",)),
        Receiver("audit", url="https://audit.example/hook", token_file="audit-token"))
    assert parse_config(None).notifications == NotificationSettings()


@pytest.mark.parametrize(("receiver", "message"), [
    ("{name: a, urlEnv: HOME}", "urlEnv: 'HOME' does not match"),
    ("{name: a, urlFile: ../../var/run/secrets/token}", "urlFile: '../../var/run/secrets/token'"),
    ("{name: a, urlFile: /etc/passwd}", "urlFile: '/etc/passwd' does not match"),
    ("{name: a}", "notifications.receivers[0]"),
    ("{name: a, url: 'https://x', urlEnv: GITRAY_NOTIFY_X}", "notifications.receivers[0]"),
    ("{name: a, url: 'https://x', events: [deployed]}", "events[0]"),
    ("{name: a, url: 'file:///etc/passwd'}", "url: 'file:///etc/passwd' is not valid"),
])
def test_receivers_that_could_leak_a_secret_are_refused(receiver: str, message: str) -> None:
    text = ("apiVersion: gitray.io/v1alpha1\nkind: Config\nnotifications:\n  receivers:\n"
            f"    - {receiver}\n").encode()
    with pytest.raises(ConfigError, match=r"gitray\.yaml:5:") as raised:
        parse_config(text)
    assert message in str(raised.value)


def test_resolve_reads_env_and_files_and_never_says_a_value(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("https://hooks.example/T0/B0/secretpart\n")
    (tmp_path / "tok").write_text("s3cr3t\n")
    target = resolve(Receiver("a", ReceiverType.TEAMS, url_file="url", token_file="tok"), {},
                     tmp_path)
    assert (target.url, target.token) == ("https://hooks.example/T0/B0/secretpart", "s3cr3t")
    assert "secret" not in repr(target) and "s3cr3t" not in repr(target)
    env = resolve(Receiver("b", url_env="GITRAY_NOTIFY_B"),
                  {"GITRAY_NOTIFY_B": "http://127.0.0.1:1/x"}, tmp_path)
    assert env.url == "http://127.0.0.1:1/x"
    with pytest.raises(ValueError, match="GITRAY_NOTIFY_C is not set"):
        resolve(Receiver("c", url_env="GITRAY_NOTIFY_C"), {}, tmp_path)
    with pytest.raises(ValueError, match="cannot read missing in"):
        resolve(Receiver("d", url_file="missing"), {}, tmp_path)
    (tmp_path / "ftp").write_text("ftp://x")
    with pytest.raises(ValueError, match="not http"):
        resolve(Receiver("e", url_file="ftp"), {}, tmp_path)


# ---- delivery to a real receiver on 127.0.0.1 ------------------------------------------

class Receiving:
    """A real HTTP server that records what it gets; answers ``codes`` in turn, then 200. A
    post to ``/hang...`` gets no answer until ``release`` is set (a receiver that hangs)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, object], str]] = []
        self.codes: list[int] = []
        self.arrived = threading.Condition()
        self.hanging, self.release = threading.Event(), threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.startswith("/hang"):
                    outer.hanging.set()
                    outer.release.wait(60)
                code = outer.codes.pop(0) if outer.codes else 200
                # recorded before answering: once answered, the sender's next request may be
                # handled by another thread, which must not record ahead of this one
                with outer.arrived:
                    if code == 200:
                        outer.got.append((self.path, json.loads(body),
                                          self.headers.get("Authorization") or ""))
                    outer.arrived.notify_all()
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[tuple[str, dict[str, object],
                                                                       str]]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.got) >= count, timeout)
            return list(self.got)


@pytest.fixture
def receiver() -> Iterator[Receiving]:
    r = Receiving()
    yield r
    r.release.set()
    r.server.shutdown()
    r.server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the with ends: nobody listens


def notice(n: int, event: EventKind = EventKind.TRAFFIC_STEP) -> Notice:
    return Notice(event, SHA, f"step {n}", SVC, (("n", str(n)),))


def test_delivery_in_order_with_token_and_payloads(receiver: Receiving, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cr3t")
    counts: list[tuple[str, str]] = []
    notifier = Notifier(lambda r, result: counts.append((r, result)),
                        {"GITRAY_NOTIFY_SLACK": receiver.url + "/slack"}, tmp_path)
    notifier.configure(NotificationSettings((
        Receiver("generic", url=receiver.url + "/generic", token_file="token"),
        Receiver("slack", ReceiverType.SLACK, url_env="GITRAY_NOTIFY_SLACK",
                 events=("run-failed",)))))
    for n in range(3):
        notifier.notify(notice(n))
    notifier.notify(NOTICE)
    got = receiver.wait_for(5)
    generic = [(body["summary"], auth) for path, body, auth in got if path == "/generic"]
    assert generic == [("step 0", "Bearer s3cr3t"), ("step 1", "Bearer s3cr3t"),
                       ("step 2", "Bearer s3cr3t"), ("RayJob ml/train: failed", "Bearer s3cr3t")]
    assert [body["text"] for path, body, _ in got if path == "/slack"] == \
        ["*gitray: run-failed*: RayJob ml/train: failed"]
    assert notifier.flush(10)
    assert sorted(counts) == sorted([("generic", "sent")] * 4 + [("slack", "sent")])


def test_retried_with_backoff_and_deduplicated(receiver: Receiving, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "FIRST_PAUSE_S", 0.05)
    receiver.codes = [503, 500]
    counts: list[str] = []
    notifier = Notifier(lambda _r, result: counts.append(result), {}, tmp_path)
    notifier.configure(NotificationSettings((Receiver("generic", url=receiver.url),)))
    notifier.notify(notice(1))
    notifier.notify(notice(1))  # the same event again: sent once
    [(_, body, _)] = receiver.wait_for(1)
    assert body["summary"] == "step 1"
    assert notifier.flush(10)
    assert counts == ["deduplicated", "retried", "retried", "sent"]
    assert len(receiver.got) == 1


def test_a_receiver_that_is_down_holds_back_nothing(receiver: Receiving, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(notify, "FIRST_PAUSE_S", 0.05)
    monkeypatch.setattr(notify, "ATTEMPTS", 3)
    down = f"http://127.0.0.1:{closed_port()}/hook/T000/secretpath"
    counts: list[tuple[str, str]] = []
    notifier = Notifier(lambda r, result: counts.append((r, result)),
                        {"GITRAY_NOTIFY_DOWN": down, "GITRAY_NOTIFY_TOKEN": "tok3n"}, tmp_path)
    notifier.configure(NotificationSettings((
        Receiver("down", url_env="GITRAY_NOTIFY_DOWN", token_env="GITRAY_NOTIFY_TOKEN"),
        Receiver("up", url=receiver.url))))
    caplog.set_level(logging.DEBUG, logger="gitray.notify")
    for n in range(3):
        notifier.notify(notice(n))  # returns at once: delivery is in the background
    # the receiver that is up gets everything while the other is retried
    assert [b["summary"] for _, b, _ in receiver.wait_for(3)] == ["step 0", "step 1", "step 2"]
    assert notifier.flush(30)
    assert counts.count(("down", "failed")) == 3
    assert counts.count(("down", "retried")) == 6
    assert counts.count(("up", "sent")) == 3
    assert "failed after 3 attempts" in caplog.text
    assert "secretpath" not in caplog.text and "tok3n" not in caplog.text


def test_a_receiver_that_hangs_holds_back_only_itself(receiver: Receiving, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver that takes the connection and never answers (its post waits for the whole
    timeout): the other receiver gets every notice meanwhile, in order."""
    monkeypatch.setattr(notify, "TIMEOUT", httpx.Timeout(60.0, connect=2.0))
    counts: list[tuple[str, str]] = []
    notifier = Notifier(lambda r, result: counts.append((r, result)), {}, tmp_path)
    notifier.configure(NotificationSettings((
        Receiver("hangs", url=receiver.url + "/hang"), Receiver("up", url=receiver.url + "/up"))))
    for n in range(3):
        notifier.notify(notice(n))
    assert receiver.hanging.wait(10), "the hanging receiver got its first post"
    up = [b["summary"] for path, b, _ in receiver.wait_for(3) if path == "/up"]
    assert up == ["step 0", "step 1", "step 2"]
    assert receiver.release.is_set() is False  # (all while the first post still hangs)
    assert ("hangs", "sent") not in counts
    receiver.release.set()
    assert notifier.flush(30)
    hung = [b["summary"] for path, b, _ in receiver.got if path == "/hang"]
    assert hung == ["step 0", "step 1", "step 2"]  # late, but in order


def test_a_retried_notice_stays_before_the_later_ones(receiver: Receiving, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "FIRST_PAUSE_S", 0.05)
    receiver.codes = [503, 503]
    notifier = Notifier(None, {}, tmp_path)
    notifier.configure(NotificationSettings((Receiver("generic", url=receiver.url),)))
    for n in range(3):
        notifier.notify(notice(n))
    assert notifier.flush(10)
    assert [b["summary"] for _, b, _ in receiver.got] == ["step 0", "step 1", "step 2"]


def test_unresolvable_receiver_is_off_and_named(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier(None, {}, tmp_path)
    notifier.configure(NotificationSettings((Receiver("gone", url_env="GITRAY_NOTIFY_GONE"),)))
    assert "notifications to gone off: environment variable GITRAY_NOTIFY_GONE is not set" \
        in caplog.text
    notifier.notify(NOTICE)  # nowhere to go: nothing queued
    assert notifier.flush(1)


def test_a_full_queue_drops_and_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "QUEUE_MAX", 2)
    counts: list[str] = []
    notifier = Notifier(lambda _r, result: counts.append(result), {}, tmp_path)
    notifier.configure(NotificationSettings((
        Receiver("down", url=f"http://127.0.0.1:{closed_port()}"),)))
    notifier.stop()  # nothing is delivered: the queue fills
    for n in range(4):
        notifier.notify(notice(n))
    assert counts == ["dropped", "dropped"]
