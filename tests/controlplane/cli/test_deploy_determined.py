"""Determined's `det deploy local` verbs (master-up, agent-up, agent-down, logs, master-down,
cluster-down) on this project's local cluster, with the stand-ins of test_deploy.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from controlplane.cli import deploy_determined, deploy_procs
from tests.controlplane.cli.test_deploy import free_port, mode, stand_ins  # noqa: F401 (a fixture)


def test_master_up_agent_up_logs_and_the_downs(cli_env, det, tmp_path, stand_ins):  # noqa: F811
    data, port = tmp_path / "cluster", free_port()
    at = ("--data-dir", str(data))
    try:
        r = det("deploy", "local", "master-up", "--master-port", str(port), "--initial-user-password", "Secr3tPw",
                "--det-version", "0.38.1", *at)
        assert r.rc == 0, r.err
        assert "--det-version ignored" in r.err
        pids = json.loads((data / "pids.json").read_text())
        assert pids["agents"] == [] and deploy_procs.pid_alive(pids["master"])
        written = yaml.safe_load((data / "master.yaml").read_text())
        assert written["security"]["initial_user_password"] == "Secr3tPw" and mode(data / "master.yaml") == 0o600
        assert mode(data / "master-overrides.yaml") == 0o600

        wrong = det("deploy", "local", "agent-up", "127.0.0.1", "--master-port", str(port + 1), *at)
        assert wrong.rc != 0 and f"listens on port {port}" in wrong.err
        r = det("deploy", "local", "agent-up", "127.0.0.1", "--master-port", str(port), *at)
        assert r.rc == 0, r.err
        assert "Agent local-agent-0" in r.out
        agent = json.loads((data / "pids.json").read_text())["agents"][0]
        assert deploy_procs.pid_alive(agent)

        assert "fake master" in det("deploy", "local", "logs", "--no-follow", *at).out

        unnamed = det("deploy", "local", "agent-down", *at)
        assert unnamed.rc != 0 and "--agent-name" in unnamed.err
        r = det("deploy", "local", "agent-down", "--agent-name", "local-agent-0", *at)
        assert r.rc == 0 and "Stopped agent local-agent-0" in r.out
        assert not deploy_procs.pid_alive(agent)

        r = det("deploy", "local", "master-down", *at)
        assert r.rc == 0 and "Stopped master" in r.out
        assert not deploy_procs.pid_alive(pids["master"])
        (data / "master.db").write_text("")  # the fake master keeps none: stands for the database
    finally:
        down = det("deploy", "local", "cluster-down", "--delete-db", *at)
    assert down.rc == 0, down.err
    assert not (data / "master.db").exists()


def test_the_cluster_name_picks_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def of(name: str, data_dir: str | None = None) -> Path:
        return deploy_determined.data_dir_of(argparse.Namespace(cluster_name=name, data_dir=data_dir))

    assert of("determined") == tmp_path / ".det-local"  # Determined's default: `up`'s default dir
    assert of("gpu-box") == tmp_path / ".det-local-gpu-box"
    assert of("determined", str(tmp_path / "x")) == tmp_path / "x"
