"""`det resource-pool describe` shows consolidation: its settings, its moves, what it is estimated
to have saved, and the latest moves with their reasons."""

from __future__ import annotations

REASON = ("consolidating: agent i-1 uses 1 of 2 slots; its trial fits on other instances' free slots "
          "(e1.t1.1 → i-2); terminating it saves $3.60/h, about $6.00 over the 2h its work is expected to run")


def test_describe_shows_consolidation_moves_and_reasons(fake_master, det):
    fake_master.state.autoscaler["gpu"] = {
        "pool": "gpu", "provider": "aws", "autoscaling": True, "minInstances": 0, "maxInstances": 8,
        "spentUsd": 1.0, "burnUsdPerHour": 0.0, "plan": [], "blocked": [], "lastErrors": [], "backoff": None,
        "shapes": [], "burn": [], "instances": [],
        "consolidation": {"enabled": True, "maxMovesPerTrial": 2, "moveCostS": 120.0, "moveCount": 3,
                          "savedUsd": 12.345,
                          "moves": [{"time": "2026-01-02T03:04:05.000000Z", "trialId": 7, "allocationId": "e1.t1.1",
                                     "fromInstance": "i-1", "toAgent": "i-2", "reason": REASON}]}}
    r = det("resource-pool", "describe", "gpu")
    assert r.rc == 0, r.err
    assert "Consolidation: on, at most 2 moves per trial, move cost 2m; 3 moves, estimated $12.35 saved" in r.out
    assert f"  - 2026-01-02T03:04:05.000000Z: trial 7 off i-1 -> i-2: {REASON}" in r.out


def test_describe_says_when_consolidation_is_off(fake_master, det):
    fake_master.state.autoscaler["gpu"] = {
        "pool": "gpu", "provider": "aws", "autoscaling": True, "minInstances": 0, "maxInstances": 8,
        "spentUsd": 0.0, "burnUsdPerHour": 0.0, "plan": [], "blocked": [], "lastErrors": [], "backoff": None,
        "shapes": [], "burn": [], "instances": [],
        "consolidation": {"enabled": False, "maxMovesPerTrial": 2, "moveCostS": 90.0, "moveCount": 0,
                          "savedUsd": 0.0, "moves": []}}
    out = det("resource-pool", "describe", "gpu").out
    assert "Consolidation: off; 0 moves, estimated $0.00 saved" in out
