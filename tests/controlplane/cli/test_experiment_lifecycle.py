"""`det e list-trials`, `archive`, `unarchive`, `continue` and `delete` (Determined's commands)
against the real master app."""

from __future__ import annotations

import json
import re

from tests.support.cluster import wait_for

SINGLE = """\
name: lifecycle
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length:
    batches: 100
"""


def test_list_trials_archive_continue_and_delete(real_master, det, tmp_path):
    (tmp_path / "exp.yaml").write_text(SINGLE)
    (tmp_path / "ctx").mkdir()
    exp_id = re.fullmatch(r"Created experiment (\d+)\n",
                          det("experiment", "create", str(tmp_path / "exp.yaml"), str(tmp_path / "ctx")).out).group(1)

    def state() -> str:
        return json.loads(det("experiment", "describe", exp_id, "--json").out)["experiment"]["state"]

    trials = json.loads(det("e", "lt", exp_id, "--json").out)
    assert len(trials) == 1
    table = det("experiment", "list-trials", exp_id).out
    assert table.splitlines()[0].split("|")[0].strip() == "Trial ID" and str(trials[0]["id"]) in table

    refused = det("experiment", "archive", exp_id)
    assert refused.rc != 0  # only an ended experiment is archived
    assert det("experiment", "kill", exp_id).rc == 0
    wait_for(lambda: state() in ("STATE_CANCELED", "STATE_COMPLETED", "STATE_ERROR"), 30, "the kill to end it")
    assert det("experiment", "archive", exp_id).out == f"Archived experiment {exp_id}\n"
    assert exp_id not in [row.split("|")[0].strip() for row in det("experiment", "list").out.splitlines()[2:]]
    assert exp_id in [row.split("|")[0].strip() for row in det("experiment", "list", "--all").out.splitlines()[2:]]
    assert det("experiment", "unarchive", exp_id).out == f"Unarchived experiment {exp_id}\n"

    r = det("experiment", "continue", exp_id, "--config", "max_restarts=2")
    assert r.rc == 0 and r.out == f"Continued experiment {exp_id}\n", r.err
    assert state() == "STATE_ACTIVE"
    assert json.loads(det("experiment", "describe", exp_id, "--json").out)["experiment"]["config"]["max_restarts"] == 2
    assert det("experiment", "kill", exp_id).rc == 0
    wait_for(lambda: state() in ("STATE_CANCELED", "STATE_COMPLETED", "STATE_ERROR"), 30, "the kill to end it")

    r = det("experiment", "delete", exp_id, "--yes")
    assert r.rc == 0 and r.out == f"Deleted experiment {exp_id}\n", r.err
    assert det("experiment", "describe", exp_id).rc != 0
