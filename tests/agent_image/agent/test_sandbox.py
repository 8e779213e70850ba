"""A real ``det-agent`` runs its tasks under bubblewrap: what the task can and cannot see."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_image.agent.sandbox import SHARED_FS_CONTAINER_PATH

from .conftest import DET_AGENT, JOIN_TOKEN, AgentFactory
from .fake_master import FakeMaster
from .test_agent_integration import exited, lines_of, start_task

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

PROBE_PY = """\
import json, os, sys

def attempt(what, fn):
    try:
        fn()
        return "allowed"
    except OSError as e:
        return type(e).__name__

def seen(fn):
    try:
        return fn()
    except FileNotFoundError:
        return None  # not there at all

report = {
    "uid": os.getuid(),
    "cwd": os.getcwd(),
    "info_dir": os.environ["DET_INFO_DIR"],
    "cluster": json.load(open("/run/determined/info/cluster.json"))["allocation_id"],
    "token_env": "DET_AGENT_JOIN_TOKEN" in os.environ,
    "master_db": attempt("read", lambda: open(sys.argv[1] + "/master.db").read()),
    "master_dir": seen(lambda: sorted(os.listdir(sys.argv[1]))),
    "join_token": seen(lambda: open(sys.argv[2]).read()),
    "work_dir": seen(lambda: sorted(os.listdir(sys.argv[3]))),
    "write_etc": attempt("write", lambda: open("/etc/sandbox-probe", "w")),
    "write_info": attempt("write", lambda: open("/run/determined/info/x", "w")),
    "shadow": attempt("read", lambda: open("/etc/shadow").read()),
    "pid1": open("/proc/1/cmdline").read().split("\\0")[0],
}
open("made-in-workdir", "w").write("ok")
with open(os.path.join(sys.argv[4], "written-by-task"), "w") as f:
    f.write("checkpoint bytes")
print("REPORT " + json.dumps(report))
"""


@pytest.fixture
def secrets(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A stand-in master data dir holding a database and the join token file; outside /tmp
    (which every sandbox replaces anyway) so that it is ``--hide`` that hides it."""
    outside = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else tmp_path
    data = Path(tempfile.mkdtemp(prefix="sandbox-test-master-", dir=outside))
    (data / "master.db").write_text("secret rows")
    token = data / "join-token"
    token.write_text(JOIN_TOKEN)
    token.chmod(0o600)
    host_path = tmp_path / "checkpoints"
    yield {"data": data, "token": token, "host_path": host_path}
    shutil.rmtree(data, ignore_errors=True)


async def test_task_is_confined_and_sees_the_determined_layout(
        master: FakeMaster, start_agent: AgentFactory, secrets: dict[str, Path], tmp_path: Path) -> None:
    start_agent(master, "--join-token-file", str(secrets["token"]), "--hide", str(secrets["data"]))
    await master.wait_until(lambda: master.registers)
    msg = start_task(master, "s1", ["python3", "probe.py", str(secrets["data"]), str(secrets["token"]),
                                    str(tmp_path / "work"), SHARED_FS_CONTAINER_PATH],
                     files={"probe.py": PROBE_PY})
    msg.trial_info = {"trial_id": 7, "experiment_id": 3,
                      "config": {"checkpoint_storage": {"type": "shared_fs", "host_path": str(secrets["host_path"])}}}
    await master.send(msg)
    done = await master.wait_until(lambda: exited(master, "s1"))
    lines = [ln.message for ln in lines_of(master, "s1")]
    assert done.exit_code == 0, "\n".join(lines)
    report = json.loads(next(m for m in lines if m.startswith("REPORT "))[len("REPORT "):])

    assert report["uid"] != 0
    assert report["cwd"] == "/run/determined/workdir"
    assert report["info_dir"] == "/run/determined/info" and report["cluster"] == "s1"
    assert report["token_env"] is False
    # the master's data dir, the join token and the agent's work dir are invisible (empty or absent)
    assert report["master_db"] == "FileNotFoundError" and report["master_dir"] in ([], None)
    assert report["join_token"] in ("", None)
    assert report["work_dir"] in ([], None)
    # the host is read-only, and so are the info files; root-only files stay closed
    assert report["write_etc"] != "allowed" and report["write_info"] != "allowed"
    assert report["shadow"] != "allowed"
    assert report["pid1"] != "" and "det-agent" not in report["pid1"]  # its own PID namespace
    assert not Path("/etc/sandbox-probe").exists()
    # the shared_fs container path is the host path
    assert (secrets["host_path"] / "written-by-task").read_text() == "checkpoint bytes"
    # and the task directory is gone once the allocation has ended
    await master.wait_until(lambda: not (tmp_path / "work" / "tasks" / "s1").exists())


async def test_kill_before_the_task_is_up_still_gets_its_grace(master: FakeMaster, start_agent: AgentFactory) -> None:
    """A SIGTERM sent while bwrap is still setting up would reach only bwrap: it is held until
    the task can receive it, so the task still ends by SIGTERM, well before a long grace."""
    from controlplane.wire.agent_protocol import KillTask, TaskStarted

    start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "early", "sleep 100"))
    await master.wait_until(lambda: master.of_type(TaskStarted, "early"))
    await master.send(KillTask(allocation_id="early", grace_seconds=60))
    done = await master.wait_until(lambda: exited(master, "early"), timeout=20)
    assert done.reason == "killed" and done.exit_code == 128 + 15


def _run_agent(tmp_path: Path, *extra: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DET_AGENT, "--master", "http://127.0.0.1:9", "--join-token", JOIN_TOKEN,
                           "--work-dir", str(tmp_path / "work"), "--slots", "1", "--slot-type", "cpu", *extra],
                          capture_output=True, text=True, timeout=timeout)


def test_agent_refuses_to_start_without_bubblewrap(tmp_path: Path) -> None:
    done = _run_agent(tmp_path, "--bwrap", str(tmp_path / "no-such-bwrap"))
    assert done.returncode != 0
    assert "bubblewrap" in done.stderr and "--task-runtime process" in done.stderr


async def test_process_runtime_must_be_asked_for_and_says_what_it_loses(
        master: FakeMaster, start_agent: AgentFactory, tmp_path: Path) -> None:
    start_agent(master, "--bwrap", str(tmp_path / "no-such-bwrap"), "--task-runtime", "process")
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "p1", ["python3", "-c", "import os; print('uid', os.getuid())"]))
    done = await master.wait_until(lambda: exited(master, "p1"))
    assert done.exit_code == 0
    assert f"uid {os.geteuid()}" in [ln.message for ln in lines_of(master, "p1")]
    log = (tmp_path / "agent-0.log").read_text()
    assert "NOT sandboxed" in log and "join token" in log


def test_read_only_paths_stay_inside_the_context(tmp_path: Path) -> None:
    from agent_image.agent.sandbox import WORKDIR, read_only_mounts

    context = tmp_path / "context"
    (context / "code" / "sub").mkdir(parents=True)
    (context / "file.txt").write_text("x")
    (tmp_path / "outside").mkdir()
    (context / "escape").symlink_to(tmp_path / "outside")
    mounts = read_only_mounts(context, ["code", "code/sub", "../outside", "/etc", "escape", "file.txt", "missing"])
    assert [(m.target, m.writable) for m in mounts] == [(f"{WORKDIR}/code", False), (f"{WORKDIR}/code/sub", False)]
