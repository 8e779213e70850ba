"""launchers.torch_distributed: torch.distributed.run per container with the master's rendezvous,
every worker wrapped in wrap_rank; failure semantics; overrides; two containers doing a real gloo
all-reduce; nested under another command."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import time

from launchers import _cluster, torch_distributed
from tests.launchers.conftest import WORKER, finish, gang_ports, gone, launcher_env, pids, start, write_info

MOD = "launchers.torch_distributed"


def env_lines(out: str) -> dict[int, dict]:
    found = {}
    for m in re.finditer(r"^\[rank=(\d+)\] env (\{.*?\}) (\[.*\])$", out, re.M):
        found[int(m.group(1))] = {**ast.literal_eval(m.group(2)), "argv": ast.literal_eval(m.group(3))}
    return found


def test_the_command_it_runs(tmp_path):
    info = write_info(tmp_path / "info", rank=1, counts=(2, 3), ports={"chief": 21000, "dist": [21001, 21002]})
    gang = _cluster.load({"DET_INFO_DIR": str(info)})
    own, overrides, script = _cluster.split_overrides(["--monitor-interval", "0.2", "--", "train.py", "--lr", "1"])
    cmd = torch_distributed.torchrun_command(gang, overrides, _cluster.worker_command(own, script, MOD))
    assert cmd == [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", "1",
                   "--nproc_per_node", "3", "--max_restarts", "0", "--master_addr", "127.0.0.1",
                   "--master_port", "21000", "--monitor-interval", "0.2", "--module", "launchers.wrap_rank", "RANK",
                   "--", sys.executable, "train.py", "--lr", "1"]
    env = torch_distributed.torchrun_env(gang, {"DET_LAUNCHER_GRACE_S": "3"})
    assert (env["DET_CHIEF_IP"], env["DET_DIST_PORTS"], env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"]) == (
        "127.0.0.1", "21001,21002", "3")
    # --trial runs the Trial harness; Determined's legacy form puts it after "--".
    for argv in (["--trial", "model_def:MyTrial"], ["--", "--trial", "model_def:MyTrial"]):
        own, overrides, script = _cluster.split_overrides(argv)
        assert _cluster.worker_command(own, script, MOD) == [
            sys.executable, "-m", "controlplane.exec.harness", "model_def:MyTrial"]
    own, overrides, script = _cluster.split_overrides(["--trial=m:T", "--nproc_per_node", "1", "--"])
    assert (own, overrides, script) == ({"--trial": "m:T"}, ["--nproc_per_node", "1"], [])
    assert _cluster.worker_command({}, ["python3", "-m", "pkg"], MOD) == ["python3", "-m", "pkg"]


def test_all_succeed_with_ranks_and_the_chiefs_ports(tmp_path):
    (tmp_path / "w.py").write_text(WORKER)
    ports = gang_ports(1)
    info = write_info(tmp_path / "info", counts=(3,), ports=ports)
    code, out, err = finish(start(MOD, ["w.py", "a b"], launcher_env(info), tmp_path))
    assert code == 0, err[-3000:]
    ranks = env_lines(out)
    assert sorted(ranks) == [0, 1, 2], out
    for r, e in ranks.items():
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["GROUP_RANK"]) == (
            str(r), str(r), "3", "3", "0")
        assert (e["MASTER_ADDR"], e["MASTER_PORT"], e["DET_CHIEF_IP"]) == (
            "127.0.0.1", str(ports["chief"]), "127.0.0.1")
        assert e["DET_DIST_PORTS"] == f"{ports['dist'][0]},{ports['dist'][1]}" and e["argv"] == ["a b"]


def test_one_worker_fails_and_the_launcher_stops_the_rest(tmp_path):
    (tmp_path / "w.py").write_text(WORKER)
    info = write_info(tmp_path / "info", counts=(3,))
    t0 = time.monotonic()
    code, out, err = finish(start(MOD, ["w.py"], launcher_env(info, MODE="fail", DET_LAUNCHER_GRACE_S="3"), tmp_path))
    assert code == 3, err[-3000:]
    assert "rank 1 exited 3: stopping the other workers" in err
    assert time.monotonic() - t0 < 60
    assert all(gone(pid) for pid in pids(tmp_path).values())


def test_a_worker_that_hangs_after_another_failed_is_killed(tmp_path):
    (tmp_path / "w.py").write_text(WORKER)
    info = write_info(tmp_path / "info", counts=(3,))
    proc = start(MOD, ["w.py"], launcher_env(info, MODE="hang", DET_LAUNCHER_GRACE_S="2"), tmp_path)
    code, out, err = finish(proc)
    assert code == 4, err[-3000:]
    workers = pids(tmp_path)
    assert sorted(workers) == [0, 1, 2] and all(gone(pid) for pid in workers.values())


def test_overrides_reach_torchrun_and_win(tmp_path):
    """``--nproc_per_node 2 --`` comes after the launcher's own flags: two workers, not three."""
    (tmp_path / "w.py").write_text(WORKER)
    info = write_info(tmp_path / "info", counts=(3,))
    code, out, err = finish(start(MOD, ["--nproc_per_node", "2", "--", "w.py"], launcher_env(info), tmp_path))
    assert code == 0, err[-3000:]
    assert sorted(env_lines(out)) == [0, 1] and env_lines(out)[0]["WORLD_SIZE"] == "2"


ALL_REDUCE = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.full((4,), float(dist.get_rank() + 1))
dist.all_reduce(t)
print("sum", dist.get_rank(), dist.get_world_size(), os.environ["GROUP_RANK"], t.tolist(), flush=True)
dist.destroy_process_group()
"""


def test_two_containers_all_reduce_over_gloo_nested_under_env(tmp_path):
    """Two containers of two slots on one host, each with its own launcher (started through
    ``env``, as a nested launcher would be): one 4-rank gloo all-reduce."""
    (tmp_path / "ar.py").write_text(ALL_REDUCE)
    ports = gang_ports(2)
    procs = []
    for rank in (0, 1):
        info = write_info(tmp_path / f"info{rank}", rank=rank, counts=(2, 2), ports=ports)
        env = launcher_env(info)
        procs.append(subprocess.Popen(["env", "NESTED=1", sys.executable, "-m", MOD, "ar.py"], env=env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [finish(p) for p in procs]
    assert [r[0] for r in results] == [0, 0], [r[2][-2000:] for r in results]
    lines = re.findall(r"^\[rank=(\d)\] sum (\d) 4 (\d) \[10\.0, 10\.0, 10\.0, 10\.0\]$", results[0][1] + results[1][1],
                       re.M)
    assert sorted((int(r), int(g)) for r, _, g in lines) == [(0, 0), (1, 0), (2, 1), (3, 1)], results


def test_without_torch_the_launcher_says_which_package_is_missing(tmp_path):
    code = ("import importlib.util, sys\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'torch' else real(name, *a)\n"
            "from launchers import torch_distributed\n"
            "sys.exit(torch_distributed.main(['w.py']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env=launcher_env(None))
    assert res.returncode == 1 and "'torch' package is not installed" in res.stderr
