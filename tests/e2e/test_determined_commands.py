"""The unmodified Determined 0.38.1 CLI's commands, shells, notebooks and TensorBoards on this
master's cluster (`det deploy local up`: one agent of two slots that also offers the determined
0.38.1 venv as the task environment `determined-0.38.1`).

- `det cmd run`: a shell command line in one argument (`for x in a b; ...`), a command in the
  Determined environment (whose python has no `controlplane`), `det cmd list`, `det cmd logs`,
  `det task logs` (the command's id is its task id), `det cmd kill`.
- `det shell start -- CMD`: waits until the shell is ready and runs CMD over ssh through the
  master's tunnel; `det shell show-ssh-command` prints a command that does the same.
- `det notebook start`, `det tensorboard start EXP` and `-t TRIAL`: each waits until it is ready,
  then `kill`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

import pytest

from tests.e2e.conftest import shared_local_cluster
from tests.support.cluster import wait_for
from tests.support.deadline import bounded
from tests.support.determined_venv import ENVIRONMENT_NAME

# PostgreSQL: the real Determined client drives the master as Determined's users run it, on PostgreSQL.
# The module shares a cluster (below): its tests run on one worker.
pytestmark = [pytest.mark.e2e, pytest.mark.one_database("postgres"),
              pytest.mark.xdist_group("test_determined_commands")]

# Each test launches and kills its own commands, shells, notebooks and TensorBoards.
local_cluster = shared_local_cluster

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture
def real(local_cluster, determined_venv, determined_cli, tmp_path):
    """The cluster, and the real `det` as user `determined` with a home of the test's own."""
    cluster = local_cluster(agents=1, slots=2, environments={ENVIRONMENT_NAME: determined_venv})
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "DET_MASTER": cluster.url, "DET_USER": "determined", "DET_PASS": "",
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache")}

    def det(*args: str, timeout: float = 180) -> str:
        proc = subprocess.run([str(determined_cli), *args], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=bounded(timeout))
        assert proc.returncode == 0, f"det {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.stdout

    det.env, det.venv = env, determined_venv  # type: ignore[attr-defined]
    return cluster, det


def launched_id(out: str, kind: str) -> str:
    found = re.search(rf"Launched {kind} \(id: ({UUID})", out)
    assert found, out
    return found.group(1)


def test_cmd_run_list_logs_and_kill(real):
    cluster, det = real
    out = det("cmd", "run", "for x in a b; do echo $x; done")
    assert re.search(r"\|\| INFO: a$", out, re.M) and re.search(r"\|\| INFO: b$", out, re.M), out
    cmd_id = launched_id(out, "command")

    # Determined's own environment: its python runs the command, this platform's wrapper runs anyway
    out = det("cmd", "run", "--config", f"environment.image={ENVIRONMENT_NAME}",
              "python3", "-c", "import determined, sys; print('DET', determined.__version__, sys.prefix)")
    found = re.search(r"DET 0\.38\.1 (\S+)$", out, re.M)
    assert found and os.path.realpath(found.group(1)) == os.path.realpath(det.venv), out
    env_cmd = launched_id(out, "command")

    listed = det("cmd", "list")
    assert cmd_id in listed and env_cmd in listed and "TERMINATED" in listed, listed
    for args in (("cmd", "logs", cmd_id), ("task", "logs", cmd_id)):
        logs = det(*args)
        assert re.search(r"\|\| INFO: a$", logs, re.M) and re.search(r"\|\| INFO: b$", logs, re.M), logs
    assert "DET 0.38.1" in det("task", "logs", env_cmd)

    sleeper = det("cmd", "run", "-d", "sleep", "600").strip()
    assert re.fullmatch(UUID, sleeper), sleeper
    wait_for(lambda: json.loads(cluster.det("cmd", "describe", sleeper, "--json").stdout)["state"] == "STATE_RUNNING",
             bounded(120), "the command to run")
    assert f"Killed command {sleeper}" in det("cmd", "kill", sleeper)
    wait_for(lambda: json.loads(cluster.det("cmd", "describe", sleeper, "--json").stdout)["state"]
             == "STATE_TERMINATED", bounded(60), "the command to end")


def test_shell_start_and_show_ssh_command(real):
    cluster, det = real
    out = det("shell", "start", "--", "echo", "hello-from-shell", timeout=240)
    assert "hello-from-shell" in out, out
    shell_id = re.search(rf"det shell open ({UUID})", out).group(1)

    shown = det("shell", "show-ssh-command", shell_id, "echo", "again")
    argv = shlex.split(shown.strip().splitlines()[-1])
    assert argv[0] == "ssh" and f"det@{shell_id}" in argv and argv[-2:] == ["echo", "again"], argv
    assert any(a.startswith("ProxyCommand=") and "determined.cli.tunnel" in a for a in argv), argv
    ran = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=bounded(60),
                         env=det.env)
    assert ran.returncode == 0 and "again" in ran.stdout, ran.stdout + ran.stderr

    assert f"Killed shell {shell_id}" in det("shell", "kill", shell_id)


def test_notebook_start_and_kill(real):
    cluster, det = real
    out = det("notebook", "start", "--no-browser", timeout=300)
    assert "Jupyter Notebook is running at:" in out, out
    nb_id = launched_id(out, "notebook")
    assert f"{cluster.url}/proxy/{nb_id}/lab" in out, out
    assert nb_id in det("notebook", "list")
    assert f"Killed notebook {nb_id}" in det("notebook", "kill", nb_id)


def test_tensorboard_start_for_an_experiment_and_for_a_trial(real, tmp_path):
    cluster, det = real
    (tmp_path / "ctx").mkdir()
    (tmp_path / "exp.yaml").write_text("name: tb\nentrypoint: python3 -c pass\nsearcher:\n  name: single\n"
                                       "  metric: loss\n  max_length: 1\nmax_restarts: 0\n")
    exp_id = json.loads(cluster.det("experiment", "create", str(tmp_path / "exp.yaml"), str(tmp_path / "ctx"),
                                    "--json").stdout)["id"]
    trials = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["trials"]

    out = det("tensorboard", "start", str(exp_id), "--no-browser", timeout=300)
    assert "Tensorboard is running at:" in out, out
    board = launched_id(out, "tensorboard")
    out = det("tensorboard", "start", "-t", str(trials[0]["id"]), "-d")
    by_trial = out.strip()
    assert re.fullmatch(UUID, by_trial), out
    described = json.loads(cluster.det("tensorboard", "describe", by_trial, "--json").stdout)
    assert described["trialIds"] == [trials[0]["id"]] and described["experimentIds"] == [exp_id], described
    listed = det("tensorboard", "list")
    assert board in listed and by_trial in listed, listed
    for tid in (board, by_trial):
        assert f"Killed tensorboard {tid}" in det("tensorboard", "kill", tid)
