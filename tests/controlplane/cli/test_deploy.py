"""`det deploy local` with stand-ins for det-master (the fake master as a process) and det-agent:
what `down` may stop (only processes proven to be the cluster's), `up` restarting what died, and
the modes of the files that hold secrets."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from controlplane.cli import deploy, deploy_local_config, deploy_procs, deploy_records

FAKE_MASTER = Path(__file__).with_name("fake_master.py")
SLEEPER = ["-c", "import time; time.sleep(600)"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_master_config_merges_user_settings(tmp_path):
    token = deploy_local_config.ensure_join_token(tmp_path)
    cfg = deploy_local_config.master_config(tmp_path, 9000, token, {
        "db": {"url": "postgresql://x/y"}, "checkpoint_storage": {"type": "directory", "container_path": "/c"},
        "security": {"join_token": "inline"}, "agent_reconnect_wait": "4s", "port": 1234})
    assert cfg["port"] == 9000
    assert cfg["db"] == {"url": "postgresql://x/y"}
    assert cfg["checkpoint_storage"] == {"type": "directory", "container_path": "/c"}
    assert cfg["security"] == {"join_token_file": str(token)}
    assert cfg["agent_reconnect_wait"] == "4s" and cfg["data_dir"] == str(tmp_path)
    default = deploy_local_config.master_config(tmp_path, 8080, token, {})
    assert default["db"]["url"] == f"sqlite:///{tmp_path}/master.db"
    assert default["checkpoint_storage"] == {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")}


def test_join_token_is_private_and_reused(tmp_path):
    path = deploy_local_config.ensure_join_token(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    assert len(first.strip()) >= 32
    assert deploy_local_config.ensure_join_token(tmp_path).read_text() == first


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


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def up(det, data: Path, port: int, *extra: str):
    return det("deploy", "local", "up", "--port", str(port), "--agents", "1", "--slots-per-agent", "2",
               "--data-dir", str(data), *extra)


def test_up_is_idempotent_and_down_stops_everything(cli_env, det, tmp_path, stand_ins):
    data = tmp_path / "cluster"
    port = free_port()
    user_cfg = tmp_path / "user-master.yaml"
    user_cfg.write_text(yaml.safe_dump({"db": {"url": "sqlite:////tmp/x.db"}, "preemption_timeout": "30s"}))
    user_cfg.chmod(0o644)
    try:
        r = up(det, data, port, "--master-config", str(user_cfg))
        assert r.rc == 0, r.err
        url = f"http://127.0.0.1:{port}"
        assert f"Master running at {url}" in r.out and f"export DET_MASTER={url}" in r.out
        pids = json.loads((data / "pids.json").read_text())
        assert pids["url"] == url and len(pids["agents"]) == 1
        assert all(deploy_procs.pid_alive(p) for p in [pids["master"], *pids["agents"]])
        assert set(pids["startTimes"]) == {str(pids["master"]), str(pids["agents"][0])}
        written = yaml.safe_load((data / "master.yaml").read_text())
        assert written["port"] == port and written["db"]["url"] == "sqlite:////tmp/x.db"
        assert written["security"]["join_token_file"] == str(data / "join-token")
        assert "fake master" in (data / "logs" / "master.log").read_text()

        again = up(det, data, port, "--master-config", str(user_cfg))
        assert again.rc == 0 and f"already running at {url}" in again.out
        assert json.loads((data / "pids.json").read_text()) == pids
    finally:
        down = det("deploy", "local", "down", "--data-dir", str(data))
    assert down.rc == 0
    assert "Stopped agent local-agent-0" in down.out and "Stopped master" in down.out
    assert not any(deploy_procs.pid_alive(p) for p in [pids["master"], *pids["agents"]])
    assert not (data / "pids.json").exists()
    assert "Nothing was running." in det("deploy", "local", "down", "--data-dir", str(data)).out


def test_secrets_are_private(cli_env, det, tmp_path, stand_ins):
    """The data dir is 0700 and what it holds 0600, whatever the umask and the source file's mode."""
    data = tmp_path / "cluster"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    user_cfg = tmp_path / "x.yaml"
    user_cfg.write_text(yaml.safe_dump({"db": {"url": "postgresql://u:secret@db/x"}}))
    user_cfg.chmod(0o644)
    (data / "master.yaml").write_text("stale: true\n")
    (data / "master.yaml").chmod(0o644)
    old = os.umask(0o022)
    try:
        assert up(det, data, free_port(), "--master-config", str(user_cfg)).rc == 0
    finally:
        os.umask(old)
        det("deploy", "local", "down", "--data-dir", str(data))
    assert mode(data) == 0o700
    for sub in ("logs", "agents"):
        assert mode(data / sub) == 0o700, sub
    for name in ("master.yaml", "join-token", "local-cluster-id", "logs/master.log", "logs/agent-0.log"):
        assert mode(data / name) == 0o600, name
    assert "secret" in (data / "master.yaml").read_text()


def sleeper(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process whose command line mentions `args` (paths, say) and that does nothing."""
    return subprocess.Popen([sys.executable, *SLEEPER, *args], cwd=cwd, env={**os.environ, **(env or {})},
                            start_new_session=True)


@pytest.fixture
def reap():
    started: list[subprocess.Popen] = []
    yield started.append
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_down_stops_only_its_own_cluster(cli_env, det, tmp_path, stand_ins, reap):
    """A sibling cluster whose data dir path starts with ours, and processes that merely mention
    our data dir or run inside it, survive `down`; an orphan with our cluster id does not."""
    ours, sibling = tmp_path / "c", tmp_path / "c-sibling"
    try:
        assert up(det, ours, free_port()).rc == 0
        assert up(det, sibling, free_port()).rc == 0
        mine, theirs = (json.loads((d / "pids.json").read_text()) for d in (ours, sibling))
        lookalike = sleeper(str(ours), "--data-dir", str(ours), cwd=ours)
        reap(lookalike)
        orphan = sleeper(env={deploy_procs.CLUSTER_ENV: mine["clusterId"]})  # a trial whose agent died
        reap(orphan)
        for p in (lookalike, orphan):
            assert deploy_procs.pid_alive(p.pid)

        r = det("deploy", "local", "down", "--data-dir", str(ours))
        assert r.rc == 0
        assert not any(deploy_procs.pid_alive(p) for p in [mine["master"], *mine["agents"]])
        assert f"Stopped 1 leftover process(es) of this cluster: {orphan.pid}" in r.out
        assert orphan.wait(10) is not None
        assert all(deploy_procs.pid_alive(p) for p in [theirs["master"], *theirs["agents"]]), "sibling cluster touched"
        assert deploy_procs.pid_alive(lookalike.pid), "a process that only mentions the data dir was stopped"
    finally:
        det("deploy", "local", "down", "--data-dir", str(sibling))
        det("deploy", "local", "down", "--data-dir", str(ours))
    assert not any(deploy_procs.pid_alive(p) for p in [theirs["master"], *theirs["agents"]])


def test_down_in_the_home_directory_touches_nothing_it_did_not_start(cli_env, det, tmp_path, reap):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    work = home / "project"
    work.mkdir()
    bystander = sleeper(str(work), cwd=work, env={"DET_CHECKPOINT": str(work / "x")})
    reap(bystander)
    r = det("deploy", "local", "down", "--data-dir", "~")
    assert r.rc == 0 and "Nothing was running." in r.out
    assert deploy_procs.pid_alive(bystander.pid)


def test_a_reused_pid_is_not_taken_for_the_recorded_process(cli_env, det, tmp_path, reap):
    """pids.json names a live process that started at another time: it is someone else's now."""
    data = tmp_path / "cluster"
    data.mkdir()
    stranger = sleeper(str(data))
    reap(stranger)
    real_start = deploy_procs.start_time(stranger.pid)
    assert real_start is not None
    (data / "pids.json").write_text(json.dumps({
        "url": "http://127.0.0.1:1", "clusterId": "abc", "master": stranger.pid, "agents": [stranger.pid],
        "startTimes": {str(stranger.pid): real_start - 1}}))
    r = det("deploy", "local", "down", "--data-dir", str(data))
    assert f"Master (pid {stranger.pid}) was not running" in r.out and "Nothing was running." in r.out
    assert deploy_procs.pid_alive(stranger.pid)


def test_up_restarts_a_dead_agent(cli_env, det, tmp_path, stand_ins):
    data = tmp_path / "cluster"
    port = free_port()
    try:
        assert up(det, data, port).rc == 0
        before = json.loads((data / "pids.json").read_text())
        [dead] = before["agents"]
        os.killpg(dead, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while deploy_procs.pid_alive(dead) and time.monotonic() < deadline:
            time.sleep(0.05)

        r = up(det, data, port)
        assert r.rc == 0, r.err
        after = json.loads((data / "pids.json").read_text())
        [new] = after["agents"]
        assert new != dead and deploy_procs.pid_alive(new)
        assert f"Restarted agent local-agent-0 (pid {new})" in r.out and "already running" not in r.out
        assert f"Agent local-agent-0 (pid {dead}) is not running" in r.err
        assert after["master"] == before["master"]  # the master was fine: it kept running
        assert str(new) in after["startTimes"]
        assert "already running" in up(det, data, port).out
    finally:
        det("deploy", "local", "down", "--data-dir", str(data))
    assert not deploy_procs.pid_alive(new)


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
    assert deploy_records.leftover_processes(data.resolve()) == []


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


def kill_master(data: Path) -> dict:
    """kill -9 the recorded master (a crash: only the master, not its agents); the record."""
    record = json.loads((data / "pids.json").read_text())
    os.kill(record["master"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while deploy_procs.pid_alive(record["master"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not deploy_procs.pid_alive(record["master"])
    return record


def test_up_after_a_master_crash_starts_only_the_master(cli_env, det, tmp_path, stand_ins):
    data = tmp_path / "cluster"
    port = free_port()
    try:
        assert up(det, data, port).rc == 0
        before = kill_master(data)

        r = up(det, data, port)
        assert r.rc == 0, r.err
        after = json.loads((data / "pids.json").read_text())
        assert after["agents"] == before["agents"] and deploy_procs.pid_alive(before["agents"][0]), \
            "the agent was stopped"
        assert after["startTimes"][str(before["agents"][0])] == before["startTimes"][str(before["agents"][0])]
        assert after["master"] != before["master"] and deploy_procs.pid_alive(after["master"])
        assert str(before["master"]) not in after["startTimes"]
        assert f"Restarted the master (pid {after['master']})" in r.out
        assert f"Agent local-agent-0 (pid {before['agents'][0]}) kept running" in r.out
        assert mode(data / "pids.json") == 0o600
        assert "already running" in up(det, data, port).out
    finally:
        det("deploy", "local", "down", "--data-dir", str(data))
    assert not deploy_procs.pid_alive(after["master"]) and not deploy_procs.pid_alive(before["agents"][0])


def listener(port: int) -> subprocess.Popen:
    """Another program listening on `port` (a master started by hand, say)."""
    p = subprocess.Popen([sys.executable, "-c", (
        "import socket, sys, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('127.0.0.1', {port})); s.listen(); print('listening', flush=True); time.sleep(600)")],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "listening"
    return p


def test_up_with_another_process_on_the_masters_port_stops_nothing(cli_env, det, tmp_path, stand_ins, reap):
    data = tmp_path / "cluster"
    port = free_port()
    try:
        assert up(det, data, port).rc == 0
        record = kill_master(data)
        recorded = (data / "pids.json").read_bytes()
        squatter = listener(port)
        reap(squatter)

        r = up(det, data, port)
        assert r.rc == 1
        assert f"port {port} is already in use by pid {squatter.pid}" in r.err and "Traceback" not in r.err
        assert "Nothing was stopped" in r.err
        assert deploy_procs.pid_alive(record["agents"][0]), "up stopped the surviving agent"
        assert squatter.poll() is None, "up stopped a process it did not start"
        assert (data / "pids.json").read_bytes() == recorded
    finally:
        det("deploy", "local", "down", "--data-dir", str(data))
    assert not deploy_procs.pid_alive(record["agents"][0])


def test_logs_of_earlier_runs_are_kept(cli_env, det, tmp_path, stand_ins, monkeypatch):
    """Each start rotates master.log (and agent-N.log) instead of writing over it, keeping LOG_KEEP."""
    monkeypatch.setattr(deploy_records, "LOG_KEEP", 2)
    data = tmp_path / "cluster"
    logs = data / "logs"
    ports = [free_port() for _ in range(3)]
    for port in ports:
        try:
            assert up(det, data, port).rc == 0
        finally:
            det("deploy", "local", "down", "--data-dir", str(data))
    assert f"fake master on port {ports[2]}" in (logs / "master.log").read_text()
    assert f"fake master on port {ports[1]}" in (logs / "master.log.1").read_text()
    assert f"fake master on port {ports[0]}" in (logs / "master.log.2").read_text()
    assert not (logs / "master.log.3").exists()
    assert (logs / "agent-0.log.2").exists() and not (logs / "agent-0.log.3").exists()
    for name in ("master.log", "master.log.1", "master.log.2", "agent-0.log.1"):
        assert mode(logs / name) == 0o600, name
