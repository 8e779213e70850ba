"""Many experiments for the read benchmarks (``webui.py``, ``read_scale.py``): the one experiment a
benchmark creates through the API (``CONFIG``, ``MODEL_DEF``), copied in SQL to ids 2..count with
states mixed (active, paused, completed, canceled), each with a copy of its trial; and how a read is
timed."""

from __future__ import annotations

import base64
import time
from typing import Any

import requests

CONFIG = {"name": "bench", "entrypoint": "python3 train.py",
          "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
          "searcher": {"name": "random", "metric": "loss", "smaller_is_better": True, "max_trials": 1,
                       "max_length": {"batches": 100}}}
MODEL_DEF = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print('hi')\n").decode(), "mtime": "0",
              "uid": 0, "gid": 0, "mode": 0o644}]
EXP_COLUMNS = ("description, labels, config, original_config, owner_id, searcher_type, searcher_state, "
               "context_hash, resource_pool, priority, weight, max_slots, queue_position, "
               "project_id, progress, progress_basis, archived, notes, start_time")
TRIAL_COLUMNS = "request_id, hparams, seed, state, restarts, run_id, total_batches, runner_state, progress, start_time"


def series(dialect: str) -> str:
    """A CTE ``n(i)`` of 2..:count."""
    if dialect == "postgresql":
        return "n(i) AS (SELECT generate_series(2, :count))"
    return "n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < :count)"


async def copy_first_experiment(conn: Any, dialect: str, count: int, trial_id_offset: int) -> None:
    """Experiments 2..count as copies of experiment 1, each with a copy of trial 1 (id: the
    experiment's plus ``trial_id_offset``)."""
    from sqlalchemy import text

    state = "CASE n.i % 4 WHEN 0 THEN 'ACTIVE' WHEN 1 THEN 'PAUSED' WHEN 2 THEN 'COMPLETED' ELSE 'CANCELED' END"
    await conn.execute(text(
        f"WITH RECURSIVE {series(dialect)} INSERT INTO experiments (id, name, state, job_id, {EXP_COLUMNS}) "
        f"SELECT n.i, 'bench-' || n.i, {state}, 'job-' || n.i, {EXP_COLUMNS} "
        "FROM n, experiments AS e WHERE e.id = 1"), {"count": count})
    await conn.execute(text(
        f"WITH RECURSIVE {series(dialect)} INSERT INTO trials (id, experiment_id, task_id, "
        f"searcher_metric_value, {TRIAL_COLUMNS}) SELECT n.i + :offset, n.i, 'task-' || n.i, "
        f"(n.i % 97) / 100.0, {TRIAL_COLUMNS} FROM n, trials AS t WHERE t.id = 1"),
        {"count": count, "offset": trial_id_offset})


def timed(session: requests.Session, url: str, reps: int, timeout_s: float) -> list[float]:
    """Milliseconds of each of ``reps`` GETs of ``url``."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = session.get(url, timeout=timeout_s)
        out.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return out
