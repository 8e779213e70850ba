"""Launchers on a real cluster: a 4-rank gloo all-reduce over two 2-slot agents through
launchers.torch_distributed (a plain script), in the gang's own network across the agents, one
worker's lines with `det trial logs --rank`, a failing rank that stops the whole gang across
agents, and the seeds' `determined.launch.torch_distributed --trial` config run unmodified."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.e2e.conftest import EXAMPLE, shared_local_cluster

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
# The module shares a cluster (below): its tests run on one worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_launchers")]

# Both tests run their own 4-rank experiment, one after the other, on the same two 2-slot agents.
local_cluster = shared_local_cluster

ALL_REDUCE = """\
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((1024,), float(rank + 1))
dist.all_reduce(t)
print(f"all-reduce rank {rank} of {size} group {os.environ['GROUP_RANK']} local {os.environ['LOCAL_RANK']} "
      f"on {os.environ['DET_AGENT_ID']} sum {t[0].item():g} chief {os.environ['DET_CHIEF_IP']} "
      f"dist {os.environ['DET_DIST_PORTS']}", flush=True)
if os.environ.get("FAIL_RANK") == str(rank):
    print("failing on purpose", flush=True)
    # os._exit, not sys.exit: tearing down a live gloo process group at interpreter exit may
    # abort (exit 134) on a loaded machine, and the test names the exit code it expects.
    os._exit(3)
dist.barrier() if os.environ.get("FAIL_RANK") is None else time.sleep(600)
dist.destroy_process_group()
"""


def _experiment(cluster, tmp_path, name: str, extra: str = "") -> tuple[int, int]:
    context = tmp_path / name
    context.mkdir()
    (context / "ar.py").write_text(ALL_REDUCE)
    config = tmp_path / f"{name}.yaml"
    config.write_text(f"name: {name}\nentrypoint: python3 -m launchers.torch_distributed ar.py\n"
                      "resources:\n  slots_per_trial: 4\nsearcher:\n  name: single\n  metric: x\n  max_length: 1\n"
                      + extra)
    exp_id = json.loads(cluster.det("experiment", "create", str(config), str(context), "--json").stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=300, check=False)
    trial_id = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["trials"][0]["id"]
    return exp_id, trial_id


def test_four_ranks_all_reduce_over_two_agents(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=2)
    exp_id, trial_id = _experiment(cluster, tmp_path, "allreduce")
    logs = cluster.det("trial", "logs", str(trial_id)).stdout
    state = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["experiment"]["state"]
    assert state == "STATE_COMPLETED", logs[-4000:]
    # Determined's format: the rank before "||", the level after it ("[rank=0] || INFO: all-reduce ...")
    found = re.findall(r"\[rank=(\d)\] \|\| \w+: all-reduce rank (\d) of 4 group (\d) local (\d) "
                       r"on (local-agent-\d) sum 10 chief (\S+) dist (\d+),(\d+)", logs)
    assert sorted(int(f[0]) for f in found) == [0, 1, 2, 3], logs[-4000:]
    for prefix, rank, group, local, _agent, _chief, _p1, _p2 in found:
        assert prefix == rank and int(group) == int(rank) // 2 and int(local) == int(rank) % 2
    assert len({f[4] for f in found}) == 2, "the ranks ran on both agents"
    assert len({(f[5], f[6], f[7]) for f in found}) == 1, "every rank was told the same chief and ports"
    # the agents make task networks (scripts/setup.sh installs what they need): the gang's ranks
    # reach each other in one of their own, not on the hosts' network
    assert found[0][5].startswith("100.96."), found[0][5]

    only = cluster.det("trial", "logs", str(trial_id), "--rank", "3").stdout
    assert "all-reduce rank 3 of 4" in only
    assert not re.search(r"\[rank=[012]\]", only) and "rank 0 of 4" not in only, only


def test_a_failing_rank_stops_the_gang_on_both_agents(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=2)
    exp_id, trial_id = _experiment(cluster, tmp_path, "failing",
                                   "max_restarts: 0\nenvironment:\n  environment_variables:\n    - FAIL_RANK=3\n")
    state = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["experiment"]["state"]
    logs = cluster.det("trial", "logs", str(trial_id)).stdout
    assert state == "STATE_ERROR", logs[-4000:]
    assert re.search(r"\[rank=3\] \|\| \w+: failing on purpose", logs), logs[-4000:]
    assert "rank 3 exited 3: stopping the other workers" in logs


def test_determineds_launcher_name_as_the_seeds_write_it_runs_a_trial_class(local_cluster, tmp_path):
    """``entrypoint: python3 -m determined.launch.torch_distributed --trial model_def:MyTrial`` on
    agents whose environment has no Determined package: this project's launcher runs it."""
    cluster = local_cluster(agents=2, slots=2)
    context = tmp_path / "seed"
    shutil.copytree(EXAMPLE.parent / "pytorch_trial", context)
    config = (context / "distributed.yaml").read_text().replace(
        "python3 -m launchers.torch_distributed", "python3 -m determined.launch.torch_distributed")
    config = config.replace("epochs: 4", "epochs: 1")  # the length only: CI time
    (tmp_path / "seed.yaml").write_text(config)
    exp_id = json.loads(cluster.det("experiment", "create", str(tmp_path / "seed.yaml"), str(context),
                                    "--json").stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=300, check=False)
    described = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)
    logs = cluster.det("trial", "logs", str(described["trials"][0]["id"])).stdout
    assert described["experiment"]["state"] == "STATE_COMPLETED", logs[-4000:]
    assert "No module named 'determined'" not in logs and "[rank=1]" in logs, logs[-4000:]
