"""`det experiment create` prints the master's create warnings (a grid cut short by max_trials) on
stderr and still creates the experiment; against the real master app."""

from __future__ import annotations

import re

GRID = """\
name: grid
entrypoint: python3 train.py
hyperparameters:
  lr:
    type: categorical
    vals: [0.1, 0.01, 0.001]
searcher:
  name: grid
  metric: loss
  max_trials: 2
  max_length:
    batches: 10
"""


def test_create_prints_the_grid_subset_warning(real_master, det, tmp_path):
    (tmp_path / "grid.yaml").write_text(GRID)
    (tmp_path / "ctx").mkdir()
    r = det("experiment", "create", str(tmp_path / "grid.yaml"), str(tmp_path / "ctx"))
    assert r.rc == 0, r.err
    assert re.fullmatch(r"Created experiment \d+\n", r.out)
    assert r.err == ("Warning: searcher.max_trials: 2 is below the grid's 3 points: only the first 2 (in grid order) "
                     "will be trained; raise max_trials to 3 to search the whole grid\n")
    (tmp_path / "grid.yaml").write_text(GRID.replace("max_trials: 2", "max_trials: 3"))
    r = det("experiment", "create", str(tmp_path / "grid.yaml"), str(tmp_path / "ctx"))
    assert r.rc == 0 and r.err == ""
