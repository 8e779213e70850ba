"""launchers.deepspeed with the real DeepSpeed (CPU): the runner's command, the failure semantics,
and two containers on one host whose second one is reached over SSH with the allocation's key."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from controlplane.master.orchestration.rendezvous import new_ssh_key
from launchers import _cluster, _ssh, _worker
from launchers import deepspeed as ds
from tests.launchers.conftest import (
    WORKER,
    finish,
    gang_ports,
    gone,
    launcher_env,
    own_python,
    pids,
    start,
    wait_listening,
    write_info,
)
from tests.launchers.test_torch_distributed import ALL_REDUCE, env_lines

pytest.importorskip("deepspeed")
pytest.importorskip("asyncssh")

MOD = "launchers.deepspeed"


def test_the_runner_command_hostfile_and_host_map(tmp_path):
    ports = {"chief": 21000, "dist": [21001, 21002], "ssh": [0, 21003]}
    info = write_info(tmp_path / "info", counts=(2, 3), ports=ports, ssh_key="k")
    gang = _cluster.load({"DET_INFO_DIR": str(info)})
    assert ds.hostfile_text(gang) == "det-container-0 slots=2\ndet-container-1 slots=3\n"
    assert gang.ssh_hosts() == {"det-container-0": {"addr": "127.0.0.1", "port": 0, "self": True},
                                  "det-container-1": {"addr": "127.0.0.1", "port": 21003, "self": False}}
    assert ds.runner_command(gang, "/h", ["--bind_cores_to_rank"], [sys.executable, "t.py"]) == [
        sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", "/h", "--master_addr", "127.0.0.1",
        "--master_port", "21000", "--no_ssh_check", "--no_python", "--no_local_rank", "--bind_cores_to_rank",
        sys.executable, "-m", "launchers._worker", "deepspeed", "--", sys.executable, "t.py"]
    assert ds.gang_env(gang)["DET_DIST_PORTS"] == "21001,21002"


def test_worker_env_from_deepspeeds_names():
    env = _worker.fill_env("deepspeed", {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_SIZE": "2",
                                         "CROSS_RANK": "1", "CROSS_SIZE": "2", "MASTER_ADDR": "10.0.0.1"})
    assert (env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["DET_CHIEF_IP"]) == (
        "2", "1", "2", "10.0.0.1")


def test_all_succeed(tmp_path):
    (tmp_path / "w.py").write_text(WORKER)
    info = write_info(tmp_path / "info", counts=(3,))
    code, out, err = finish(start(MOD, ["w.py", "x"], launcher_env(info), tmp_path), timeout=240)
    assert code == 0, err[-3000:]
    ranks = env_lines(out)
    assert sorted(ranks) == [0, 1, 2], out
    assert all(e["LOCAL_WORLD_SIZE"] == "3" and e["GROUP_RANK"] == "0" and e["argv"] == ["x"] for e in ranks.values())


@pytest.mark.parametrize("mode,want", [("fail", 3), ("hang", 4)])
def test_a_failure_stops_every_worker(tmp_path, mode, want):
    (tmp_path / "w.py").write_text(WORKER)
    info = write_info(tmp_path / "info", counts=(3,))
    t0 = time.monotonic()
    code, out, err = finish(start(MOD, ["w.py"], launcher_env(info, MODE=mode, DET_LAUNCHER_GRACE_S="2"), tmp_path),
                            timeout=240)
    assert code == want, err[-3000:]
    assert f"rank 1 exited {want}: stopping the other workers" in err
    assert time.monotonic() - t0 < 120
    workers = pids(tmp_path)
    assert sorted(workers) == [0, 1, 2] and all(gone(pid) for pid in workers.values())


def _gang(tmp_path, mode: str = "ok", script: str = "w.py") -> list[tuple[int, str, str]]:
    key = new_ssh_key()
    ports = gang_ports(2)
    python = own_python(tmp_path)  # DeepSpeed's stop (pkill -f) then reaches this gang only
    procs = []
    for rank in (1, 0):  # the worker container first, as an agent might start it
        info = write_info(tmp_path / f"info{rank}", rank=rank, counts=(2, 2), ports=ports, ssh_key=key)
        procs.append(start(MOD, [script], launcher_env(info, MODE=mode, DET_LAUNCHER_GRACE_S="2"), tmp_path,
                           python=python))
    deadline = time.monotonic() + 240  # both launchers, within the test's 300 s
    return [finish(p, timeout=max(1.0, deadline - time.monotonic())) for p in reversed(procs)]


def test_two_containers_over_ssh_all_reduce(tmp_path):
    (tmp_path / "ar.py").write_text(ALL_REDUCE)
    (chief_code, chief_out, chief_err), (other_code, _, other_err) = _gang(tmp_path, script="ar.py")
    assert (chief_code, other_code) == (0, 0), (chief_err[-3000:], other_err[-3000:])
    lines = re.findall(r"^\[rank=(\d)\] sum (\d) 4 (\d) \[10\.0, 10\.0, 10\.0, 10\.0\]$", chief_out, re.M)
    assert sorted((int(r), int(g)) for r, _, g in lines) == [(0, 0), (1, 0), (2, 1), (3, 1)], chief_out
    assert "serves SSH on port" in other_err


def test_two_containers_a_remote_failure_stops_both(tmp_path):
    (tmp_path / "w.py").write_text(WORKER)
    (chief_code, _, chief_err), (other_code, _, other_err) = _gang(tmp_path, mode="hang")
    assert chief_code != 0 and other_code != 0, (chief_err[-3000:], other_err[-3000:])
    assert "rank 1 exited 4" in chief_err
    assert all(gone(pid) for pid in pids(tmp_path).values())


def test_a_worker_container_without_a_chief_gives_up(tmp_path):
    ports = gang_ports(2)
    info = write_info(tmp_path / "info", rank=1, counts=(1, 1), ports=ports, ssh_key=new_ssh_key())
    proc = start(MOD, ["w.py"], launcher_env(info, DET_LAUNCHER_SSH_WAIT_S="1"), tmp_path)
    code, _, err = finish(proc, timeout=120)
    assert code == 1 and "the chief did not connect within 1s" in err


def test_an_unknown_ssh_key_is_refused(tmp_path):
    ports = gang_ports(2)
    server_info = write_info(tmp_path / "s", rank=1, counts=(1, 1), ports=ports, ssh_key=new_ssh_key())
    server = start(MOD, ["w.py"], launcher_env(server_info, DET_LAUNCHER_SSH_WAIT_S="20"), tmp_path)
    try:
        wait_listening(ports["ssh"][1], server)  # the refusal below is the server's, not a closed port's
        hosts = {"det-container-1": {"addr": "127.0.0.1", "port": ports["ssh"][1], "self": False}}
        (tmp_path / "stranger").write_text(new_ssh_key())
        # The client retries a refused key until this deadline (at least one attempt reaches the server).
        env = {**launcher_env(None, DET_LAUNCHER_SSH_WAIT_S="1"),
               **_ssh.write_tool_dir(tmp_path / "tools", hosts, str(tmp_path / "stranger"))}
        res = subprocess.run([str(tmp_path / "tools/bin/ssh"), "det-container-1", "echo", "in"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 255 and "in" not in res.stdout.split(), res
    finally:
        server.terminate()
        server.wait(30)
