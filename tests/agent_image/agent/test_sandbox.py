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
    # the shared_fs container path is the allocation's staging directory in host_path
    assert (secrets["host_path"] / ".staging" / "s1" / "written-by-task").read_text() == "checkpoint bytes"
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


TAMPER_PY = """\
import json, os, sys

base, other, own = sys.argv[1], sys.argv[2], sys.argv[3]

def attempt(fn):
    try:
        fn()
        return "allowed"
    except OSError as e:
        return type(e).__name__

def overwrite(path):
    with open(path, "wb") as f:
        f.write(b"planted pickle")

report = {
    "listing": attempt(lambda: os.listdir(base)) == "allowed" and sorted(os.listdir(base)),
    "read": attempt(lambda: open(os.path.join(base, other, "state.pt"), "rb").read()),
    "overwrite": attempt(lambda: overwrite(os.path.join(base, other, "state.pt"))),
    "add": attempt(lambda: overwrite(os.path.join(base, other, "extra.pt"))),
    "replace": attempt(lambda: os.rename(os.path.join(base, other), os.path.join(base, "moved"))),
    "own_read": open(os.path.join(base, own, "state.pt"), "rb").read().decode(),
    "own_overwrite": attempt(lambda: overwrite(os.path.join(base, own, "state.pt"))),
}
os.makedirs(os.path.join(base, "bobs-own"))
overwrite(os.path.join(base, "bobs-own", "state.pt"))
print("REPORT " + json.dumps(report))
"""


def _completed_checkpoint(host_path: Path, uuid: str) -> str:
    """A checkpoint as another user's trial left it (owned by the task uid, 0644): its sha256."""
    import hashlib

    ckpt = host_path / uuid
    ckpt.mkdir(parents=True)
    (ckpt / "state.pt").write_bytes(b"admin's weights")
    if os.geteuid() == 0:
        os.chown(host_path, 65534, 65534)
        chown = [ckpt, ckpt / "state.pt"]
        for p in chown:
            os.chown(p, 65534, 65534)
    return hashlib.sha256((ckpt / "state.pt").read_bytes()).hexdigest()


async def test_a_task_can_neither_read_nor_change_another_trials_checkpoint(
        master: FakeMaster, start_agent: AgentFactory, tmp_path: Path) -> None:
    """Bob's trial, on the shared_fs storage admin's trial wrote to: admin's completed checkpoint
    is not there for it (not listed, not readable, not writable, not replaceable); its own trial's
    checkpoint that the master names is there read-only; what it writes stays in its own
    allocation's staging directory."""
    import hashlib

    host_path = tmp_path / "checkpoints"
    other = "0b1e4a8e-0000-4000-8000-000000000001"
    own = "0b1e4a8e-0000-4000-8000-000000000002"
    digest = _completed_checkpoint(host_path, other)
    _completed_checkpoint(host_path, own)
    start_agent(master)
    await master.wait_until(lambda: master.registers)
    msg = start_task(master, "bob1", ["python3", "tamper.py", SHARED_FS_CONTAINER_PATH, other, own],
                     files={"tamper.py": TAMPER_PY})
    msg.readable_checkpoints = [own]
    msg.trial_info = {"trial_id": 8, "experiment_id": 4,
                      "config": {"checkpoint_storage": {"type": "shared_fs", "host_path": str(host_path)}}}
    await master.send(msg)
    done = await master.wait_until(lambda: exited(master, "bob1"))
    lines = [ln.message for ln in lines_of(master, "bob1")]
    assert done.exit_code == 0, "\n".join(lines)
    report = json.loads(next(m for m in lines if m.startswith("REPORT "))[len("REPORT "):])

    assert report["listing"] == [own], report
    assert report["read"] == "FileNotFoundError"
    assert report["overwrite"] != "allowed" and report["add"] != "allowed" and report["replace"] != "allowed"
    assert hashlib.sha256((host_path / other / "state.pt").read_bytes()).hexdigest() == digest
    assert report["own_read"] == "admin's weights" and report["own_overwrite"] != "allowed"
    assert sorted(p.name for p in (host_path / other).iterdir()) == ["state.pt"]
    assert not (host_path / "bobs-own").exists()
    staged = host_path / ".staging" / "bob1" / "bobs-own" / "state.pt"
    assert staged.read_bytes() == b"planted pickle"
