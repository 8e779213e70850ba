"""Task environments on a real local cluster: agents offer the determined 0.38.1 venv as the
environment `determined-0.38.1`, a trial naming it runs that venv's python3 under the sandbox
(its base interpreter lives under /root/.pyenv, which the task's user cannot enter otherwise) and
imports determined, torch and tensorboard; an environment no agent offers is refused at create
with the names that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.support.cluster import wait_for
from tests.support.determined_venv import ENVIRONMENT_NAME

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = pytest.mark.e2e

CHECK_PY = """\
import os, shutil, sys
print("PREFIX", sys.prefix)
print("VIRTUAL_ENV", os.environ.get("VIRTUAL_ENV"))
print("PIP", shutil.which("pip"))
import determined, tensorboard, torch
print("IMPORTED determined", determined.__version__, "torch", torch.__version__, "uid", os.getuid())
"""


def context(tmp_path: Path, image: str | None) -> tuple[Path, Path]:
    ctx = tmp_path / "ctx"
    ctx.mkdir(exist_ok=True)
    (ctx / "check_env.py").write_text(CHECK_PY)
    config = {"name": "environments", "entrypoint": "python3 check_env.py", "max_restarts": 0,
              "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
              "resources": {"slots_per_trial": 1}}
    if image is not None:
        config["environment"] = {"image": image}
    path = tmp_path / f"config-{image}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, ctx


def test_a_trial_runs_in_the_determined_environment(local_cluster, determined_venv, tmp_path):
    cluster = local_cluster(agents=1, slots=1, environments={ENVIRONMENT_NAME: determined_venv})
    [agent] = json.loads(cluster.det("agent", "list", "--json").stdout)
    assert agent["environments"] == ["default", ENVIRONMENT_NAME]
    assert ENVIRONMENT_NAME in cluster.det("agent", "list").stdout  # the Environments column

    config, ctx = context(tmp_path, ENVIRONMENT_NAME)
    exp_id = json.loads(cluster.det("experiment", "create", str(config), str(ctx), "--json").stdout)["id"]

    def trial_logs() -> str | None:
        trials = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["trials"]
        if not trials:
            return None
        logs = cluster.det("trial", "logs", str(trials[0]["id"]), check=False).stdout
        return logs if "IMPORTED" in logs or trials[0]["state"] in ("STATE_ERROR", "STATE_COMPLETED") else None

    logs = wait_for(trial_logs, 300, "the trial to import determined")
    assert "IMPORTED determined 0.38.1" in logs, logs[-3000:]
    prefix = re.search(r"^.*PREFIX (\S+)$", logs, re.M)
    assert prefix and Path(prefix.group(1)).resolve() == determined_venv.resolve(), logs[-3000:]
    assert f"VIRTUAL_ENV {determined_venv}" in logs, logs[-3000:]
    # pip is the task's own writable layer's (agent_image/agent/task_python.py), over this environment.
    assert "PIP /run/determined/python/bin/pip" in logs, logs[-3000:]
    assert re.search(r"uid (?!0\b)\d+", logs), logs[-3000:]  # a dropped uid, as every sandboxed task

    unknown, ctx = context(tmp_path, "tf-2")
    refused = cluster.det("experiment", "create", str(unknown), str(ctx), check=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "environment.image" in said, said
    assert f"environments offered: default, {ENVIRONMENT_NAME}" in said, said
