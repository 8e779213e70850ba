"""Schemathesis against the schema the master serves: no 5xx, and answers that match it.

A real det-master process (on SQLite and on PostgreSQL) with some work in it: an experiment
with a trial, a model. The fuzzer signs in as admin (the role that reaches every route) and
runs its example, coverage, fuzzing and stateful phases with a fixed seed and a bounded number
of cases per operation (about 6,000 requests over 126 operations: a minute or so, more on a
loaded machine), so the run is repeatable. It keeps no example database (``--generation-database
none``): nothing an earlier run left in the checkout is replayed, and Hypothesis keeps no Pareto
front of examples to save (a tenth of the run from an empty database, a third of the fuzzing phase
with the one earlier runs had left). It runs in ``tmp_path``, so it writes nothing into the checkout.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.cluster import MasterProcess, login

# Both databases: NUL bytes, 64-bit limits and text types reach them differently. The test's own
# timeout stays above the fuzzer's (FUZZ_TIMEOUT_S), so a slow run fails with the fuzzer's output:
# the fuzzer gets at most what the master's start and the seeding left of TIMEOUT_S, less STOP_S
# for stopping the master (SIGTERM, 15 s, SIGKILL, 5 s).
FUZZ_TIMEOUT_S = 420
TIMEOUT_S = FUZZ_TIMEOUT_S + 120
STOP_S = 30
pytestmark = [pytest.mark.e2e, pytest.mark.both_databases, pytest.mark.timeout(TIMEOUT_S)]

ST = Path(sys.executable).parent / "st"
SEED = 20261123
# CI time: at 25 each database's run took ~170 s of CI's 2-core machine (stop 35), a tenth of the suite.
MAX_EXAMPLES = 15
# One worker: Python 3.11.7's ast.parse keeps its recursion depth in global state (CPython
# gh-106905, fixed in 3.11.8), and hypothesis parses lambda sources while describing strategies,
# so two worker threads parsing at once made the coverage phase fail with "AST constructor
# recursion depth mismatch" (a CI run on this machine's Python did).
# Logout would end the fuzzer's own session halfway through the run.
EXCLUDED = ["Logout"]
# A followed log stream stays open until its trial ends (by design), so the fuzzer reads logs
# without following; the follow path's inputs are covered by test_logs_api.py.
CONFIG_TOML = """
[[operations]]
include-operation-id = "TrialLogs"
parameters = { "query.follow" = false }
"""

CONFIG = {
    "name": "fuzz-seed",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _seed(url: str, token: str) -> None:
    h = {"Authorization": f"Bearer {token}"}
    files = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print('hi')\n").decode(),
              "mtime": "0", "uid": 0, "gid": 0, "mode": 0o644}]
    r = requests.post(f"{url}/api/v1/experiments", headers=h, timeout=30,
                      json={"config": yaml.safe_dump(CONFIG), "modelDefinition": files})
    assert r.status_code == 200, r.text
    r = requests.post(f"{url}/api/v1/models", headers=h, timeout=30, json={"name": "fuzz-model"})
    assert r.status_code == 200, r.text


def _summary(out: str) -> str:
    keep = [line for line in out.splitlines()
            if re.search(r"Selected:|Tested:|generated|failures|errors|passed", line)]
    return "\n".join(keep)


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def test_no_5xx_and_answers_match_the_schema(db_url, tmp_path):
    deadline = time.monotonic() + TIMEOUT_S - STOP_S
    master = MasterProcess(tmp_path / "master", db_url).start()
    try:
        token = login(master.url, "admin")
        _seed(master.url, token)
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG_TOML)
        cmd = [str(ST), "--config-file", str(config), "run", f"{master.url}/docs/openapi.json",
               "-H", f"Authorization: Bearer {token}",
               "--checks", "not_a_server_error,response_schema_conformance",
               "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1",
               "--generation-database", "none", "--no-color"]
        for op in EXCLUDED:
            cmd += ["--exclude-operation-id", op]
        budget = min(FUZZ_TIMEOUT_S, deadline - time.monotonic())
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, cwd=tmp_path)
        except subprocess.TimeoutExpired as e:
            out = _text(e.stdout) + _text(e.stderr)
            pytest.fail(f"schemathesis did not finish in {budget:.0f} s:\n{_summary(out)}\n{out[-6000:]}\n"
                        f"--- master log ---\n{master.log_tail(40)}")
        out = run.stdout + run.stderr
        print(_summary(out))
        assert run.returncode == 0, (f"schemathesis found failures:\n{out[-12000:]}\n"
                                     f"--- master log ---\n{master.log_tail(80)}")
        assert "Tested:" in out
    finally:
        master.stop()
