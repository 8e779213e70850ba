"""Exponential backoff on launch errors that do not name an option, and its explanation."""

from __future__ import annotations

import pytest

from controlplane.autoscaler.failures import backoff_delay, on_launch_error
from controlplane.autoscaler.model import Blocked, LaunchFailure
from tests.controlplane.autoscaler.scenarios import NOW, idle, inst, launched, pool, run, said, terminated


@pytest.mark.parametrize(("n", "delay"), [(0, 0), (1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (50, 600)])
def test_backoff_delay_doubles_from_10s_capped_at_10m(n, delay):
    assert backoff_delay(n) == delay


@pytest.mark.parametrize("kind", ["transient", "invalid_config", "fatal"])
def test_non_capacity_errors_back_off_and_block_nothing(kind):
    cfg = pool()
    failures = LaunchFailure()
    blocked: list[Blocked] = []
    for k in range(3):
        blocked, failures = on_launch_error(cfg, kind, "us-west-2a", "g5.xlarge", False, f"boom {k}",  # type: ignore[arg-type]
                                            blocked, failures, NOW)
    assert blocked == []
    assert failures.consecutive_failures == 3
    assert failures.next_attempt_at == NOW + 40
    assert failures.last_error.endswith("boom 2")


def test_backoff_stops_launches_and_is_explained_then_lifts():
    cfg = pool()
    failures = LaunchFailure(3, "transient error: RequestLimitExceeded", NOW + 40)
    d = run(cfg, gangs=[4], failures=failures)
    assert launched(d) == 0
    assert said(d, "backing off after 3 launch errors until t=100040 (in 40s)", "RequestLimitExceeded",
                "1 pending gang")
    assert launched(run(cfg, gangs=[4], failures=failures, now=NOW + 40)) == 1


def test_backoff_does_not_stop_terminations():
    cfg = pool()
    failures = LaunchFailure(2, "fatal error: x", NOW + 20)
    d = run(cfg, instances=[inst("i-1"), inst("i-s", "stopped")], agents=[idle("i-1", 3600)], failures=failures)
    assert sorted(terminated(d)) == ["i-1", "i-s"]
