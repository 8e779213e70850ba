"""The real ``det-agent`` process against a fake master: register, run, log, kill, reconnect."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path

from agent_image.agent.slots import available_cpus
from controlplane.wire.agent_protocol import (
    KillTask,
    StartTask,
    TaskExited,
    TaskLogs,
    TaskStarted,
)

from .conftest import AgentFactory, group_alive, make_context
from .fake_master import FakeMaster

RUN_PY = """\
import json, os, sys
print("[rank=0] INFO: hi")
print("trial", os.environ["DET_TRIAL_ID"])
print("hook", os.environ.get("HOOK_VAR", "-"))
print("slots", os.environ["DET_SLOT_IDS"], "cuda=" + os.environ["CUDA_VISIBLE_DEVICES"])
info_dir = os.environ["DET_INFO_DIR"]
info = json.load(open(os.path.join(info_dir, "cluster.json")))
print("cluster", info["cluster_id"], info["allocation_id"])
print("info", json.dumps({name: json.load(open(os.path.join(info_dir, name + ".json")))
                          for name in ("cluster", "trial", "rendezvous", "ports", "resources")}, sort_keys=True))
print("mode", oct(os.stat(os.path.join(info_dir, "cluster.json")).st_mode & 0o777))
print("WARNING: to stderr", file=sys.stderr)
"""


def start_task(master: FakeMaster, alloc: str, entrypoint: str | list[str], **kw: object) -> StartTask:
    task_id = kw.pop("task_id", f"task-{alloc}")
    files = kw.pop("files", {"run.py": RUN_PY})
    token = f"session-{alloc}"
    master.contexts[str(task_id)] = (token, make_context(files))  # type: ignore[arg-type]
    return StartTask(
        allocation_id=alloc,
        task_id=str(task_id),
        task_type="TRIAL",
        entrypoint=entrypoint,
        env={"DET_TRIAL_ID": "7", "DET_EXPERIMENT_ID": "3"},
        slot_ids=[0, 1],
        session_token=token,
        context_hash=str(kw.pop("context_hash", "")),
        trial_info={"trial_id": 7, "experiment_id": 3},
        kill_grace_seconds=float(kw.pop("grace", 10.0)),  # type: ignore[arg-type]
    )


def lines_of(master: FakeMaster, alloc: str) -> list:
    return [ln for batch in master.of_type(TaskLogs, alloc) for ln in batch.lines]


def exited(master: FakeMaster, alloc: str) -> TaskExited | None:
    found = master.of_type(TaskExited, alloc)
    return found[0] if found else None


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    return await asyncio.to_thread(proc.wait, timeout)


async def test_register_run_logs_and_exit(master: FakeMaster, start_agent: AgentFactory, tmp_path: Path) -> None:
    start_agent(master)
    await master.wait_until(lambda: master.registers)
    reg = master.registers[0]
    assert reg.agent_id == "agent-under-test"
    assert [(s.id, s.type) for s in reg.slots] == [(0, "cpu"), (1, "cpu")]
    assert reg.version == "0.38.1" and reg.pool == "default" and "127.0.0.1" in reg.addresses
    assert reg.running == []
    assert reg.cpus == available_cpus() >= 1  # what an OpenPAI task's cpuNumber is booked against

    msg = start_task(
        master,
        "a1",
        "python3 run.py && exit 3",
        context_hash="ctx1",
        files={"run.py": RUN_PY, "startup-hook.sh": "export HOOK_VAR=from-hook\n"},
    )
    await master.send(msg)
    done = await master.wait_until(lambda: exited(master, "a1"))
    assert done.exit_code == 3 and done.reason == ""

    started = master.of_type(TaskStarted, "a1")
    assert len(started) == 1 and started[0].pid > 0
    lines = lines_of(master, "a1")
    by_msg = {ln.message: ln for ln in lines}
    hi = by_msg["[rank=0] INFO: hi"]
    assert hi.rank == 0 and hi.level == "LOG_LEVEL_INFO" and hi.stdtype == "stdout"
    assert "trial 7" in by_msg
    assert "hook from-hook" in by_msg
    assert 'slots [0, 1] cuda=' in by_msg
    assert "cluster cluster-under-test a1" in by_msg
    warn = by_msg["WARNING: to stderr"]
    assert warn.stdtype == "stderr" and warn.level == "LOG_LEVEL_WARNING"
    # every log batch of the allocation precedes its exit
    order = [type(m) for m in master.messages if getattr(m, "allocation_id", None) == "a1"]
    assert order[0] is TaskStarted and order[-1] is TaskExited and order.count(TaskExited) == 1

    info = json.loads(next(m for m in by_msg if m.startswith("info "))[len("info "):])
    cluster = info["cluster"]
    assert cluster["session_token"] == "session-a1" and cluster["slot_ids"] == [0, 1]
    assert cluster["latest_checkpoint"] is None and cluster["task_type"] == "TRIAL"
    assert info["trial"] == {"trial_id": 7, "experiment_id": 3}
    rdv = info["rendezvous"]
    assert rdv == {"container_addrs": ["127.0.0.1"], "container_rank": 0, "container_slot_counts": [2]}
    assert info["ports"] == {"chief_port": 0, "dist_ports": [], "ssh_ports": [], "ssh_key_file": None,
                             "ssh_host_key_file": None}
    assert info["resources"] == {"gpu_uuids": []}
    assert "mode 0o600" in by_msg
    # the task directory goes once the allocation has ended; its logs reached the master first
    task_dir = tmp_path / "work" / "tasks" / "a1"
    await master.wait_until(lambda: not task_dir.exists())

    # a warm agent reuses the cached context: no second download for the same hash
    assert master.downloads == ["task-a1"]
    again = start_task(master, "a2", ["python3", "run.py"], task_id="task-a1", context_hash="ctx1")
    master.contexts["task-a1"] = ("other-token", b"")  # a download would now fail
    await master.send(again)
    done2 = await master.wait_until(lambda: exited(master, "a2"))
    assert done2.exit_code == 0
    assert master.downloads == ["task-a1"]


async def test_start_failure_is_reported(master: FakeMaster, start_agent: AgentFactory) -> None:
    start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "bad", "true", files={"../escape.txt": "x"}))
    done = await master.wait_until(lambda: exited(master, "bad"))
    assert done.exit_code is None and done.reason.startswith("failed to start:")
    await master.send(start_task(master, "noexec", ["/nonexistent/binary"]))
    done = await master.wait_until(lambda: exited(master, "noexec"))
    assert done.exit_code is None and done.reason.startswith("failed to start:")
    assert not master.of_type(TaskStarted)
    # the trial's logs say why, since no process printed anything
    [line] = lines_of(master, "noexec")
    assert "the task failed to start" in line.message and "/nonexistent/binary" in line.message
    assert (line.stdtype, line.level) == ("stderr", "LOG_LEVEL_ERROR")


async def test_kill_task_within_grace_and_escalation(master: FakeMaster, start_agent: AgentFactory) -> None:
    start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "k1", "sleep 100"))
    await master.send(start_task(master, "k2", "trap '' TERM; echo trapped; sleep 100 & wait; sleep 100"))
    await master.wait_until(lambda: len(master.of_type(TaskStarted)) == 2)
    # k2 ignores SIGTERM only once its trap is set: kill it after that, not before
    await master.wait_until(lambda: "trapped" in [ln.message for ln in lines_of(master, "k2")])
    # k1 obeys SIGTERM, so its long grace never runs out: its exit code says SIGTERM ended it
    # (an escalation would say SIGKILL). k2 ignores SIGTERM and is escalated after its 1 s grace.
    # The exit codes prove the order of events; no clock is read, so a loaded machine cannot fail it.
    await master.send(KillTask(allocation_id="k1", grace_seconds=120))
    await master.send(KillTask(allocation_id="k2", grace_seconds=1))
    e1 = await master.wait_until(lambda: exited(master, "k1"), timeout=60)
    e2 = await master.wait_until(lambda: exited(master, "k2"), timeout=60)
    assert e1.reason == "killed" and e1.exit_code == 128 + signal.SIGTERM
    assert e2.reason == "killed" and e2.exit_code == 128 + signal.SIGKILL
    # The leftovers of each group got SIGKILL when their leader exited; the kernel takes a moment
    # to finish them on a busy machine.
    for s in master.of_type(TaskStarted):
        await master.wait_until(lambda pid=s.pid: group_alive(pid) == [], timeout=30)


async def test_bad_token_exits_with_2(master: FakeMaster, start_agent: AgentFactory) -> None:
    proc = start_agent(master, token="wrong")
    assert await wait_exit(proc, 20) == 2
    assert master.rejected == 1 and master.registers == []


async def test_reconnect_keeps_tasks_and_replays_outbox(master: FakeMaster, start_agent: AgentFactory,
                                                        tmp_path: Path) -> None:
    start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "live", "sleep 100"))
    await master.send(start_task(master, "short", "sleep 1.5; echo late; exit 4"))
    await master.wait_until(lambda: len(master.of_type(TaskStarted)) == 2)
    live_pid = master.of_type(TaskStarted, "live")[0].pid

    await master.stop()  # the master goes away while "short" finishes
    log = tmp_path / "agent-0.log"
    await master.wait_until(lambda: "task short exited with 4" in log.read_text(), timeout=30)  # the agent saw it
    assert exited(master, "short") is None
    await master.start()
    await master.wait_until(lambda: len(master.registers) == 2, timeout=30)
    assert master.registers[1].running == ["live"]
    assert group_alive(live_pid) != []

    done = await master.wait_until(lambda: exited(master, "short"))
    assert done.exit_code == 4
    assert any(ln.message == "late" for ln in lines_of(master, "short"))

    await master.send(KillTask(allocation_id="live", grace_seconds=2))
    killed = await master.wait_until(lambda: exited(master, "live"))
    assert killed.reason == "killed"


async def test_registered_kill_list(master: FakeMaster, start_agent: AgentFactory) -> None:
    start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "gone", "sleep 100", grace=1))
    await master.wait_until(lambda: master.of_type(TaskStarted, "gone"))
    await master.stop()
    master.kill_on_register = ["gone"]
    await master.start()
    done = await master.wait_until(lambda: exited(master, "gone"), timeout=30)
    assert done.reason == "killed"
    assert master.registers[-1].running == ["gone"]


async def test_sigterm_kills_tasks_and_exits_0(master: FakeMaster, start_agent: AgentFactory) -> None:
    proc = start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "t1", "sleep 100 & sleep 100; wait", grace=2))
    started = await master.wait_until(lambda: master.of_type(TaskStarted, "t1"))
    pgid = started[0].pid
    await master.wait_until(lambda: len(group_alive(pgid)) >= 3)
    proc.send_signal(signal.SIGTERM)
    assert await wait_exit(proc, 20) == 0
    assert group_alive(pgid) == []
    await master.wait_until(lambda: exited(master, "t1"), timeout=5)
    assert exited(master, "t1").reason == "killed"  # type: ignore[union-attr]
