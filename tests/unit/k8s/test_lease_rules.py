"""Leader-election rules that need no API server: durations, local expiry, the next record.

Time here is a plain number standing for the local monotonic clock.
"""

from __future__ import annotations

import os
import random
import re
import socket

import pytest

from gitray.core.errors import ConfigError
from gitray.k8s.election import (
    LeaseRecord,
    LeaseSettings,
    Observation,
    check_durations,
    default_identity,
    next_record,
    released_record,
    renew_is_fresh,
    renew_stall,
    retry_delay,
)

# ---- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(("lease", "renew", "retry"), [
    pytest.param(15, 10, 2, id="client-go defaults"),
    pytest.param(35, 30, 5, id="Flux defaults"),
    pytest.param(3, 2, 0.5, id="short test durations"),
])
def test_valid_durations_are_accepted(lease: int, renew: float, retry: float) -> None:
    check_durations(lease, renew, retry)
    settings = LeaseSettings(namespace="gitray", lease_duration_s=lease, renew_deadline_s=renew,
                             retry_period_s=retry)
    assert settings.name == "gitray"


@pytest.mark.parametrize(("lease", "renew", "retry"), [
    pytest.param(10, 10, 2, id="lease duration equal to the renew deadline"),
    pytest.param(9, 10, 2, id="lease duration shorter than the renew deadline"),
    pytest.param(15, 2.4, 2, id="renew deadline exactly 1.2 retry periods"),
    pytest.param(15, 10, 9, id="retry period too long for the renew deadline"),
    pytest.param(15, 10, 0, id="zero retry period"),
    pytest.param(0, -1, -2, id="non-positive everything"),
])
def test_invalid_durations_are_refused_in_one_line(lease: int, renew: float,
                                                   retry: float) -> None:
    with pytest.raises(ConfigError) as info:
        LeaseSettings(namespace="gitray", lease_duration_s=lease, renew_deadline_s=renew,
                      retry_period_s=retry)
    message = str(info.value)
    assert "\n" not in message
    assert str(retry) in message


def test_lease_duration_must_be_whole_seconds() -> None:
    with pytest.raises(ConfigError, match="whole seconds"):
        LeaseSettings(namespace="gitray", lease_duration_s=15.5)  # type: ignore[arg-type]


def test_settings_need_a_namespace() -> None:
    with pytest.raises(ConfigError, match="namespace"):
        LeaseSettings(namespace="")


def test_default_identity_is_host_pid_random_and_unique() -> None:
    a, b = default_identity(), default_identity()
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}_{os.getpid()}_[0-9a-f]{{8}}", a)
    assert a != b
    assert LeaseSettings(namespace="n").identity != LeaseSettings(namespace="n").identity


# ---- local expiry ---------------------------------------------------------------------------

OTHER = "other_1_aaaa"
ME = "me_2_bbbb"


def held_by(holder: str, transitions: int = 3, renew: str = "t1",
            duration: int = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration_s=duration, acquire_time="t0", renew_time=renew,
                       transitions=transitions)


def test_another_holders_claim_lapses_a_lease_duration_after_first_seen() -> None:
    seen = Observation(default_duration_s=15)
    seen.see(held_by(OTHER), now=100.0)
    assert not seen.claimable(ME, now=114.9)
    assert seen.claimable(ME, now=115.0)


def test_reading_the_same_record_again_does_not_extend_the_claim() -> None:
    seen = Observation(default_duration_s=15)
    seen.see(held_by(OTHER), now=100.0)
    seen.see(held_by(OTHER), now=110.0)
    assert seen.claimable(ME, now=115.0)


def test_a_renewed_record_restarts_the_claim_whatever_its_remote_timestamps_say() -> None:
    seen = Observation(default_duration_s=15)
    seen.see(held_by(OTHER, renew="2020-01-01T00:00:00.000000Z"), now=100.0)
    # the holder's clock is years behind: only the change matters, not the timestamp
    seen.see(held_by(OTHER, renew="2020-01-01T00:00:02.000000Z"), now=112.0)
    assert not seen.claimable(ME, now=126.9)
    assert seen.claimable(ME, now=127.0)


def test_the_records_own_duration_is_used() -> None:
    seen = Observation(default_duration_s=15)
    seen.see(held_by(OTHER, duration=40), now=0.0)
    assert not seen.claimable(ME, now=39.0)
    assert seen.claimable(ME, now=40.0)


def test_a_record_without_duration_falls_back_to_ours() -> None:
    seen = Observation(default_duration_s=15)
    seen.see(held_by(OTHER, duration=0), now=0.0)
    assert not seen.claimable(ME, now=14.0)
    assert seen.claimable(ME, now=15.0)


def test_a_released_lease_is_free_at_once() -> None:
    seen = Observation(default_duration_s=15)
    seen.see(LeaseRecord(holder="", duration_s=1, transitions=3), now=50.0)
    assert seen.claimable(ME, now=50.0)


def test_a_release_clears_the_holder_and_keeps_the_epoch() -> None:
    held = LeaseRecord(holder=ME, duration_s=15, acquire_time="a", renew_time="r", transitions=4)
    released = released_record(held, "2026-12-05T07:00:00.000000Z")
    assert released == LeaseRecord(holder="", duration_s=1, acquire_time=released.renew_time,
                                   renew_time="2026-12-05T07:00:00.000000Z", transitions=4)
    assert "holderIdentity" not in released.to_spec()


def test_our_own_record_is_always_ours_to_write() -> None:
    seen = Observation(default_duration_s=15)
    seen.see(held_by(ME), now=50.0)
    assert seen.claimable(ME, now=50.0)
    assert not seen.claimable(OTHER, now=50.0)


def test_nothing_seen_yet_is_claimable() -> None:
    assert Observation(default_duration_s=15).claimable(ME, now=0.0)


@pytest.mark.parametrize(("age", "fresh"), [
    (0.0, True), (9.99, True), (10.0, False), (60.0, False),
])
def test_a_renew_covers_the_renew_deadline_and_no_longer(age: float, fresh: bool) -> None:
    assert renew_is_fresh(last_renew=1000.0, renew_deadline_s=10.0, now=1000.0 + age) is fresh


# ---- the record to write --------------------------------------------------------------------


def test_renewing_keeps_the_epoch_and_acquire_time() -> None:
    new = next_record(held_by(ME, transitions=4), ME, renewing=True, duration_s=15, now_wall="t9")
    assert new == LeaseRecord(holder=ME, duration_s=15, acquire_time="t0", renew_time="t9",
                              transitions=4)


def test_taking_over_starts_a_new_epoch() -> None:
    new = next_record(held_by(OTHER, transitions=4), ME, renewing=False, duration_s=15,
                      now_wall="t9")
    assert new == LeaseRecord(holder=ME, duration_s=15, acquire_time="t9", renew_time="t9",
                              transitions=5)


def test_taking_a_released_lease_starts_a_new_epoch() -> None:
    released = LeaseRecord(holder="", duration_s=1, acquire_time="t5", renew_time="t5",
                           transitions=4)
    assert next_record(released, ME, renewing=False, duration_s=15, now_wall="t9"
                       ).transitions == 5


def test_taking_back_our_own_lease_after_stepping_down_starts_a_new_epoch() -> None:
    # work begun in the old term must be fenced off even though the holder name is the same
    assert next_record(held_by(ME, transitions=4), ME, renewing=False, duration_s=15,
                       now_wall="t9").transitions == 5


def test_lease_spec_round_trip_and_released_spec_has_no_holder() -> None:
    record = held_by(ME, transitions=2)
    spec = record.to_spec()
    assert spec == {"holderIdentity": ME, "leaseDurationSeconds": 15, "acquireTime": "t0",
                    "renewTime": "t1", "leaseTransitions": 2}
    assert LeaseRecord.from_spec(spec) == record
    assert "holderIdentity" not in LeaseRecord(duration_s=1, transitions=2).to_spec()
    assert LeaseRecord.from_spec(None) == LeaseRecord()


def test_acquire_retries_are_jittered_between_one_and_two_point_two_periods() -> None:
    rng = random.Random(7)
    delays = [retry_delay(2.0, rng) for _ in range(2000)]
    assert all(2.0 <= d < 4.4 for d in delays)
    assert max(delays) - min(delays) > 2.0  # really jittered, not a constant


# ---- why a step-down happened ---------------------------------------------------------------


def test_a_step_down_says_a_renew_was_waiting_for_the_api_server() -> None:
    assert renew_stall("", started=100.0, now=108.25) == (
        "a renew request has waited 8.2 s for the API server")


def test_a_step_down_names_the_last_error_beside_the_renew_in_flight() -> None:
    assert renew_stall("reading Lease: API server unreachable", started=None, now=5.0) == (
        "last error: reading Lease: API server unreachable")
    assert renew_stall("409 conflict", started=3.0, now=5.0) == (
        "a renew request has waited 2.0 s for the API server; last error: 409 conflict")


def test_a_step_down_with_no_renew_running_says_the_process_was_starved() -> None:
    assert "starved of CPU" in renew_stall("", started=None, now=5.0)
