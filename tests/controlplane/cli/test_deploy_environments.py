"""`det deploy local up --agent-environment NAME=PATH`: every agent it starts offers the environment
(det-agent --environment), and `up` restarting a dead agent passes it again from pids.json."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from controlplane.cli import deploy_procs
from tests.controlplane.cli.test_deploy import free_port, stand_ins, up

__all__ = ["stand_ins"]  # the fixture, used by name


def argv_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def test_agents_get_the_environments_and_keep_them_across_a_restart(cli_env, det, tmp_path, stand_ins):
    data = tmp_path / "cluster"
    port = free_port()
    venv = tmp_path / "venvs" / "torch"
    try:
        r = up(det, data, port, "--agent-environment", f"torch={venv}", "--agent-environment", "py=rel/python3")
        assert r.rc == 0, r.err
        pids = json.loads((data / "pids.json").read_text())
        specs = [f"torch={venv}", f"py={Path.cwd() / 'rel/python3'}"]
        assert pids["agentEnvironments"] == specs
        argv = argv_of(pids["agents"][0])
        assert [argv[i + 1] for i, a in enumerate(argv) if a == "--environment"] == specs

        [dead] = pids["agents"]
        os.killpg(dead, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while deploy_procs.pid_alive(dead) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert up(det, data, port).rc == 0  # no options this time: the recorded ones are used
        [new] = json.loads((data / "pids.json").read_text())["agents"]
        argv = argv_of(new)
        assert [argv[i + 1] for i, a in enumerate(argv) if a == "--environment"] == specs
    finally:
        det("deploy", "local", "down", "--data-dir", str(data))


def test_a_malformed_environment_or_one_with_autoscale_is_refused(cli_env, det, tmp_path):
    r = det("deploy", "local", "up", "--data-dir", str(tmp_path / "c"), "--agent-environment", "torch")
    assert r.rc != 0 and "--agent-environment 'torch': expected NAME=PATH" in r.err
    r = det("deploy", "local", "up", "--data-dir", str(tmp_path / "c"), "--autoscale",
            "--agent-environment", "torch=/v")
    assert r.rc != 0 and "with --autoscale" in r.err
    assert not (tmp_path / "c" / "pids.json").exists()
