"""The unmodified Determined 0.38.1 CLI, in its own virtualenv, drives this master."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.e2e.conftest import EXAMPLE
from tests.support.deadline import bounded

# PostgreSQL: the real Determined client drives the master as Determined's users run it, on PostgreSQL.
pytestmark = [pytest.mark.e2e, pytest.mark.one_database("postgres")]


def test_determined_cli_create_list_describe_logs(local_cluster, determined_cli, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "DET_MASTER": cluster.url}

    def real_det(*args: str) -> str:
        proc = subprocess.run([str(determined_cli), *args], capture_output=True, text=True, env=env,
                              timeout=bounded(300))
        assert proc.returncode == 0, f"det {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.stdout

    config = tmp_path / "short.yaml"
    config.write_text((EXAMPLE / "const.yaml").read_text().replace("batches: 300", "batches: 50"))
    out = real_det("experiment", "create", str(config), str(EXAMPLE))
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))

    cluster.det("experiment", "wait", str(exp_id), timeout=600)
    listed = real_det("experiment", "list")
    assert re.search(rf"^\s*{exp_id}\s", listed, re.M), listed
    described = real_det("experiment", "describe", str(exp_id))
    assert "COMPLETED" in described
    trials = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["trials"]
    logs = real_det("trial", "logs", str(trials[0]["id"]))
    assert "done:" in logs
