"""Task environments on the agent: ``--environment NAME=PATH`` parsed and checked at start, offered
at register, a task's PATH/VIRTUAL_ENV built from its environment, and a real task under bubblewrap
running a venv kept in a directory its user could not otherwise enter."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_image.agent.config import parse_config, parse_environments
from agent_image.agent.environments import EnvironmentUnavailable, TaskEnvironment, load_environments, probe
from agent_image.agent.task_setup import build_env
from controlplane.wire.agent_protocol import StartTask

from .conftest import DET_AGENT, JOIN_TOKEN, AgentFactory
from .fake_master import FakeMaster
from .test_agent_integration import exited, lines_of, start_task

BASE = ["--master", "http://m:8080", "--join-token", "t", "--agent-id", "a"]

REPORT_PY = """\
import json, os, shutil, sys
import only_in_the_venv
print("REPORT " + json.dumps({"prefix": sys.prefix, "virtual_env": os.environ.get("VIRTUAL_ENV"),
                              "python3": shutil.which("python3"), "module": only_in_the_venv.WHERE,
                              "uid": os.getuid()}))
"""


def make_venv(parent: Path) -> Path:
    """A venv (no pip: fast) holding a module no other interpreter has."""
    venv = parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "only_in_the_venv.py").write_text("WHERE = 'venv'\n")
    return venv


@pytest.fixture
def closed_venv() -> Iterator[Path]:
    """A venv inside a 0700 directory outside /tmp, as one under /root would be."""
    closed = Path(tempfile.mkdtemp(prefix="env-test-", dir="/var/tmp"))
    try:
        yield make_venv(closed)
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_environment_options_are_parsed_and_checked():
    cfg = parse_config([*BASE, "--environment", "torch=/opt/venvs/torch", "--environment", "py=/usr/bin/python3"])
    assert cfg.environments == (("torch", Path("/opt/venvs/torch")), ("py", Path("/usr/bin/python3")))
    assert parse_config(BASE).environments == ()
    assert parse_environments(["determined-0.38.1=rel/venv"])[0][1] == Path.cwd() / "rel/venv"
    for bad, words in (("noequals", "NAME=PATH"), ("x=", "NAME=PATH"), ("default=/v", "always this agent's own"),
                       ("a b=/v", "a name is"), ("-x=/v", "a name is")):
        with pytest.raises(ValueError, match=words):
            parse_environments([bad])
    with pytest.raises(ValueError, match="given twice"):
        parse_environments(["a=/v", "a=/w"])


def test_parse_config_refuses_a_bad_environment_option(capsys):
    with pytest.raises(SystemExit):
        parse_config([*BASE, "--environment", "default=/x"])
    assert "default" in capsys.readouterr().err


def test_a_venv_is_probed_for_what_its_tasks_need(tmp_path: Path):
    venv = make_venv(tmp_path)
    env = probe("v", venv)
    assert env.python == venv / "bin" / "python3" and env.bin_dir == venv / "bin"
    assert env.virtual_env is not None and env.virtual_env.resolve() == venv.resolve()
    base = Path(sys.base_prefix).resolve()
    assert venv.resolve() in env.paths and base in env.paths  # the venv and the installation it links to
    assert Path(sysconfig.get_paths()["stdlib"]).resolve() in env.paths or any(p == base for p in env.paths)
    bare = probe("py", Path(sys.base_prefix) / "bin" / "python3")
    assert bare.virtual_env is None and bare.bin_dir == Path(sys.base_prefix) / "bin"


def test_an_environment_that_is_missing_or_does_not_run_stops_the_agent(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    for path, words in ((tmp_path / "nope", "does not exist"), (tmp_path / "empty", "without bin/python3"),
                        (fake, "does not run (exit 3)")):
        with pytest.raises(EnvironmentUnavailable, match=f"environment 'broken' .*{re.escape(words)}"):
            load_environments([("broken", path)])
    assert list(load_environments([])) == ["default"]


def test_build_env_puts_the_environment_first():
    msg = StartTask(allocation_id="a", task_id="t", task_type="TRIAL", entrypoint="x", env={}, slot_ids=[],
                    session_token="s")
    venv = TaskEnvironment("v", Path("/opt/v/bin/python3"), Path("/opt/v/bin"), Path("/opt/v"))
    base = {"PATH": "/usr/bin", "VIRTUAL_ENV": "/agents/own/venv", "PYTHONHOME": "/agents/home"}
    kw = {"master_url": "http://m", "cluster_id": "c", "agent_id": "a", "slots": [], "info_dir": Path("/i")}
    env = build_env(msg, base=base, environment=venv, **kw)
    assert env["PATH"] == "/opt/v/bin:/usr/bin" and env["VIRTUAL_ENV"] == "/opt/v" and "PYTHONHOME" not in env
    bare = TaskEnvironment("p", Path("/opt/py/bin/python3.12"), Path("/opt/py/bin"), None)
    env = build_env(msg, base=base, environment=bare, **kw)
    assert env["PATH"].startswith("/opt/py/bin:") and "VIRTUAL_ENV" not in env


def test_the_agent_refuses_to_start_naming_a_broken_environment(tmp_path: Path):
    done = subprocess.run([DET_AGENT, "--master", "http://127.0.0.1:9", "--join-token", JOIN_TOKEN, "--work-dir",
                           str(tmp_path / "work"), "--slots", "1", "--slot-type", "cpu", "--task-runtime", "process",
                           "--environment", f"gone={tmp_path / 'no-venv'}"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode != 0
    assert "environment 'gone'" in done.stderr and "does not exist" in done.stderr, done.stderr


@pytest.mark.parametrize("runtime", ["sandbox", "process"])
async def test_a_task_runs_in_its_environment(master: FakeMaster, start_agent: AgentFactory, closed_venv: Path,
                                              runtime: str) -> None:
    if runtime == "sandbox" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    start_agent(master, "--environment", f"venv={closed_venv}", "--task-runtime", runtime)
    await master.wait_until(lambda: master.registers)
    assert master.registers[0].environments == ["default", "venv"]

    msg = start_task(master, "e1", ["python3", "report.py"], files={"report.py": REPORT_PY})
    msg.environment = "venv"
    await master.send(msg)
    done = await master.wait_until(lambda: exited(master, "e1"), timeout=30)
    lines = [ln.message for ln in lines_of(master, "e1")]
    assert done.exit_code == 0, "\n".join(lines)
    report = json.loads(next(m for m in lines if m.startswith("REPORT "))[len("REPORT "):])
    assert Path(report["prefix"]).resolve() == closed_venv.resolve()
    assert report["virtual_env"] == str(closed_venv) and report["python3"] == str(closed_venv / "bin" / "python3")
    assert report["module"] == "venv"
    if runtime == "sandbox":
        assert report["uid"] != 0  # a dropped uid, yet it reached the venv through a 0700 directory

    unknown = start_task(master, "e2", ["python3", "report.py"], files={"report.py": REPORT_PY})
    unknown.environment = "tf-2"
    await master.send(unknown)
    done = await master.wait_until(lambda: exited(master, "e2"), timeout=30)
    assert done.exit_code is None
    assert "no environment 'tf-2'" in done.reason and "default, venv" in done.reason, done.reason


def test_an_environment_with_determineds_package_runs_trial_classes_with_its_launcher(tmp_path):
    venv = make_venv(tmp_path)
    assert probe("plain", venv).determined_harness is False
    purelib = subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "determined").mkdir()
    Path(purelib, "determined", "__init__.py").write_text("")
    assert probe("det", venv).determined_harness is True
