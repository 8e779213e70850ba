"""`det experiment list` and `describe` show the searcher's progress as trials train, against the
real master app (the trials' reports are written into its database, as the ingest path stores them)."""

from __future__ import annotations

import re
import sqlite3

RANDOM = """\
name: progress
entrypoint: python3 train.py
hyperparameters:
  lr:
    type: double
    minval: 0.001
    maxval: 0.1
searcher:
  name: random
  metric: loss
  max_trials: 2
  max_length:
    batches: 100
"""


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")] for line in out.rstrip("\n").splitlines()[2:]]


def trained(real_master, exp_id: str, batches: int) -> None:
    """Every trial of the experiment has stored a report at this many batches."""
    db = sqlite3.connect(real_master.app.state.runtime.settings.resolved_db_url().split("///", 1)[1])
    try:
        with db:
            db.execute("UPDATE trials SET total_batches = ? WHERE experiment_id = ?", (batches, int(exp_id)))
    finally:
        db.close()


def test_list_and_describe_show_progress_as_trials_train(real_master, det, tmp_path):
    (tmp_path / "exp.yaml").write_text(RANDOM)
    (tmp_path / "ctx").mkdir()
    r = det("experiment", "create", str(tmp_path / "exp.yaml"), str(tmp_path / "ctx"))
    exp_id = re.fullmatch(r"Created experiment (\d+)\n", r.out).group(1)

    def shown() -> tuple[str, str]:
        listed = {row[0]: row[4] for row in table_rows(det("experiment", "list").out)}
        described = re.search(r"Progress:\s+(\S+)", det("experiment", "describe", exp_id).out)
        return listed[exp_id], described.group(1) if described else ""

    assert shown() == ("0.0%", "0.0%")
    trained(real_master, exp_id, 25)
    assert shown() == ("25.0%", "25.0%")
    trained(real_master, exp_id, 60)
    assert shown() == ("60.0%", "60.0%")
