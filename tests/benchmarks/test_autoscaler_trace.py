"""benchmarks/autoscaler_trace.py: a trace window priced per policy, on a small file of the real
trace's columns (the shared trace itself may not be beside a CI checkout)."""

from __future__ import annotations

import pytest

from benchmarks import autoscaler_trace as bench

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
DAY = 86_400


@pytest.fixture
def trace(tmp_path):
    rows = [  # (GPUs, created, deleted) in seconds of the trace
        (1, 2 * DAY + 100, 2 * DAY + 7300),   # 2 h on one GPU
        (1, 2 * DAY + 200, 2 * DAY + 3800),   # 1 h, sharing a GPU in the real trace (counts as one)
        (2, 2 * DAY + 300, 2 * DAY + 3900),   # 1 h on two GPUs of one instance
        (8, 2 * DAY + 400, 2 * DAY + 4000),   # 1 h on a whole 8-GPU instance
        (0, 2 * DAY + 500, 2 * DAY + 9000),   # CPU only: not a GPU job
        (1, 1 * DAY, 1 * DAY + 3600),         # before the window
    ]
    path = tmp_path / "pods.csv"
    path.write_text("\n".join([HEADER, *(f"p{i},1000,1024,{g},{1000 if g else 0},,LS,Succeeded,{c},{d},{c}"
                                         for i, (g, c, d) in enumerate(rows))]) + "\n")
    return path


def test_a_window_is_priced_per_policy_above_the_dollar_bound(trace, capsys):
    jobs = bench.load_trace(trace, 2, 3)
    assert [(j.gpus, j.arrival, j.duration) for j in jobs] == [
        (1, 100, 7200), (1, 200, 3600), (2, 300, 3600), (8, 400, 3600)]
    figures = bench.main(["--trace", str(trace), "--from-day", "2", "--to-day", "3", "--catalog", "aws-g5"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    for key in ("cost_usd", "p95_wait_s", "det_single_cost_usd", "det_per_shape_cost_usd", "oracle_cost_usd",
                "moves_max_per_job", "move_loss_fraction"):
        assert f"{key}=" in last
    # 3 GPU-hours on g5.xlarge's $1.006, 2 on g5.12xlarge's $5.672 / 4, 8 on g5.48xlarge's $16.288 / 8
    assert figures["oracle_cost_usd"] == pytest.approx(3 * 1.006 + 2 * 5.672 / 4 + 8 * 16.288 / 8)
    assert figures["oracle_cost_usd"] <= figures["det_per_shape_cost_usd"] < figures["det_single_cost_usd"]
    assert figures["oracle_cost_usd"] <= figures["cost_usd"]


def test_an_empty_window_says_so(trace):
    with pytest.raises(SystemExit, match="no GPU pod was created"):
        bench.main(["--trace", str(trace), "--from-day", "5", "--to-day", "6"])
