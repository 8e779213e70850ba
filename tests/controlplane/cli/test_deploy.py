"""`det deploy local` with stand-ins for det-master (the fake master as a process) and det-agent."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controlplane.cli import deploy

FAKE_MASTER = Path(__file__).with_name("fake_master.py")
SLEEPER = ["-c", "import time; time.sleep(600)"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_master_config_merges_user_settings(tmp_path):
    token = deploy.ensure_join_token(tmp_path)
    cfg = deploy.master_config(tmp_path, 9000, token, {
        "db": {"url": "postgresql://x/y"}, "checkpoint_storage": {"type": "directory", "container_path": "/c"},
        "security": {"join_token": "inline"}, "agent_reconnect_wait": "4s", "port": 1234})
    assert cfg["port"] == 9000
    assert cfg["db"] == {"url": "postgresql://x/y"}
    assert cfg["checkpoint_storage"] == {"type": "directory", "container_path": "/c"}
    assert cfg["security"] == {"join_token_file": str(token)}
    assert cfg["agent_reconnect_wait"] == "4s" and cfg["data_dir"] == str(tmp_path)
    default = deploy.master_config(tmp_path, 8080, token, {})
    assert default["db"]["url"] == f"sqlite:///{tmp_path}/master.db"
    assert default["checkpoint_storage"] == {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")}


def test_join_token_is_private_and_reused(tmp_path):
    path = deploy.ensure_join_token(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    assert len(first.strip()) >= 32
    assert deploy.ensure_join_token(tmp_path).read_text() == first


def test_down_when_nothing_runs(cli_env, det, tmp_path):
    r = det("deploy", "local", "down", "--data-dir", str(tmp_path / "none"))
    assert r.rc == 0 and "Nothing was running." in r.out


@pytest.fixture
def stand_ins(monkeypatch):
    def console_command(name: str, module: str) -> list[str]:
        if name == "det-master":
            return [sys.executable, str(FAKE_MASTER)]
        return [sys.executable, *SLEEPER]

    monkeypatch.setattr(deploy, "console_command", console_command)


def test_up_is_idempotent_and_down_stops_everything(cli_env, det, tmp_path, stand_ins):
    data = tmp_path / "cluster"
    port = free_port()
    user_cfg = tmp_path / "user-master.yaml"
    user_cfg.write_text(yaml.safe_dump({"db": {"url": "sqlite:////tmp/x.db"}, "preemption_timeout": "30s"}))
    args = ["deploy", "local", "up", "--port", str(port), "--agents", "1", "--slots-per-agent", "2",
            "--data-dir", str(data), "--master-config", str(user_cfg)]
    try:
        r = det(*args)
        assert r.rc == 0, r.err
        url = f"http://127.0.0.1:{port}"
        assert f"Master running at {url}" in r.out and f"export DET_MASTER={url}" in r.out
        pids = json.loads((data / "pids.json").read_text())
        assert pids["url"] == url and len(pids["agents"]) == 1
        assert all(deploy.pid_alive(p) for p in [pids["master"], *pids["agents"]])
        written = yaml.safe_load((data / "master.yaml").read_text())
        assert written["port"] == port and written["db"]["url"] == "sqlite:////tmp/x.db"
        assert written["security"]["join_token_file"] == str(data / "join-token")
        assert stat.S_IMODE((data / "join-token").stat().st_mode) == 0o600
        assert "fake master" in (data / "logs" / "master.log").read_text()

        again = det(*args)
        assert again.rc == 0 and f"already running at {url}" in again.out
        assert json.loads((data / "pids.json").read_text()) == pids
    finally:
        down = det("deploy", "local", "down", "--data-dir", str(data))
    assert down.rc == 0
    assert "Stopped agent local-agent-0" in down.out and "Stopped master" in down.out
    assert not any(deploy.pid_alive(p) for p in [pids["master"], *pids["agents"]])
    assert not (data / "pids.json").exists()
    assert "Nothing was running." in det("deploy", "local", "down", "--data-dir", str(data)).out


def test_failed_master_start_shows_log_and_cleans_up(cli_env, det, tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "console_command", lambda name, module: [
        sys.executable, "-c", "import sys; print('boom: bad config'); sys.exit(3)"])
    data = tmp_path / "cluster"
    r = det("deploy", "local", "up", "--port", str(free_port()), "--data-dir", str(data))
    assert r.rc == 1
    assert "exited with status 3" in r.err and "boom: bad config" in r.err
    assert "Traceback" not in r.err
    assert not (data / "pids.json").exists()


def test_failed_agent_stops_the_master(cli_env, det, tmp_path, monkeypatch):
    def console_command(name: str, module: str) -> list[str]:
        if name == "det-master":
            return [sys.executable, str(FAKE_MASTER)]
        return [sys.executable, "-c", "import sys; print('agent cannot start'); sys.exit(4)"]

    monkeypatch.setattr(deploy, "console_command", console_command)
    data = tmp_path / "cluster"
    r = det("deploy", "local", "up", "--port", str(free_port()), "--agents", "2", "--data-dir", str(data))
    assert r.rc == 1
    assert "exited with status 4" in r.err and "agent cannot start" in r.err
    assert not (data / "pids.json").exists()
    assert deploy.leftover_processes(data.resolve()) == []


def test_port_in_use_is_refused(cli_env, det, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = det("deploy", "local", "up", "--port", str(port), "--data-dir", str(tmp_path / "c"))
    assert r.rc == 1 and f"port {port} is already in use" in r.err


def test_stale_pids_file_is_replaced(cli_env, det, tmp_path, stand_ins):
    data = tmp_path / "cluster"
    data.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (data / "pids.json").write_text(json.dumps({"master": dead.pid, "agents": [], "url": "http://127.0.0.1:1"}))
    port = free_port()
    try:
        r = det("deploy", "local", "up", "--port", str(port), "--agents", "0", "--data-dir", str(data))
        assert r.rc == 0, r.err
        assert json.loads((data / "pids.json").read_text())["url"] == f"http://127.0.0.1:{port}"
    finally:
        det("deploy", "local", "down", "--data-dir", str(data))
