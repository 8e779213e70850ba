"""An agent cut off from the master past its reconnect window kills its tasks (the master has
re-queued them), and reports their exits once it reaches the master again; a master that is
merely down (connections refused) re-queues nothing, so its restart keeps the tasks."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

from agent_image.agent.connection import DEFAULT_RECONNECT_WAIT_S, OrphanWatch, refused
from controlplane.wire.agent_protocol import TaskStarted

from .conftest import AgentFactory, group_alive
from .fake_master import FakeMaster
from .test_agent_integration import exited, start_task


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_tasks_are_orphans_a_margin_before_the_masters_window_ends() -> None:
    clock = Clock()
    watch = OrphanWatch(clock)
    assert watch.window_s == DEFAULT_RECONNECT_WAIT_S  # a master that did not say
    watch.told_window(0)
    assert watch.window_s == DEFAULT_RECONNECT_WAIT_S
    watch.told_window(10.0)
    watch.heard()
    clock.t += 7.9
    assert not watch.orphaned()
    clock.t += 0.1  # 8 s of silence: 10 s window less its 2 s margin
    assert watch.orphaned()
    watch.killed = True
    assert not watch.orphaned()  # killed once per silence
    watch.heard()
    assert not watch.orphaned() and not watch.killed
    watch.told_window(300.0)
    clock.t += 294.9
    assert not watch.orphaned()  # the margin is at most 5 s
    clock.t += 0.1
    assert watch.orphaned()


def test_silence_while_no_master_runs_does_not_count() -> None:
    clock = Clock()
    watch = OrphanWatch(clock)
    watch.told_window(10.0)
    watch.heard()
    clock.t += 3
    watch.refused()  # the master process is gone: nobody is counting
    clock.t += 60
    assert not watch.orphaned()
    watch.refused()  # every attempt is refused while it is down
    clock.t += 1
    watch.unreachable()  # now the network fails and a master may be up: the silence counts
    assert not watch.orphaned()  # from the last refusal, when no master ran
    clock.t += 7
    assert watch.orphaned()


def test_refusals_are_told_from_other_failures() -> None:
    assert refused(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert refused(OSError(f"Multiple exceptions: [Errno 111] Connect call failed ('::1', 8080, 0, 0), "
                           f"[Errno 111] {os.strerror(errno.ECONNREFUSED)}"))
    assert not refused(TimeoutError("timed out during opening handshake"))
    assert not refused(OSError(errno.EHOSTUNREACH, os.strerror(errno.EHOSTUNREACH)))


async def wait_gone(pgid: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while group_alive(pgid):
        assert loop.time() < deadline, f"process group {pgid} still alive: {group_alive(pgid)}"
        await asyncio.sleep(0.1)


async def test_an_agent_cut_off_past_its_window_kills_its_orphaned_tasks(
        master: FakeMaster, start_agent: AgentFactory, tmp_path: Path) -> None:
    master.reconnect_wait_s = 2.0
    proc = start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "orphan", "sleep 600", grace=60))
    started = await master.wait_until(lambda: master.of_type(TaskStarted, "orphan"))
    pgid = started[0].pid
    await master.wait_until(lambda: group_alive(pgid))

    await master.blackhole()  # a partition: the master (still up) re-queues the task after 2 s
    await wait_gone(pgid, 30)
    log = (tmp_path / "agent-0.log").read_text()
    assert "killing 1 orphaned task(s): orphan" in log and "reconnect window is 2.0s" in log
    assert proc.poll() is None  # the agent itself keeps trying to reach the master

    await master.start()
    done = await master.wait_until(lambda: exited(master, "orphan"), timeout=30)
    assert done.exit_code is None or done.exit_code != 0
    assert master.registers[-1].running == []


async def test_a_master_restart_keeps_the_tasks(master: FakeMaster, start_agent: AgentFactory,
                                                tmp_path: Path) -> None:
    master.reconnect_wait_s = 4.0
    start_agent(master)
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "kept", "sleep 600"))
    started = await master.wait_until(lambda: master.of_type(TaskStarted, "kept"))
    pgid = started[0].pid

    await master.stop()  # the master process is gone: connections are refused
    await asyncio.sleep(8)  # twice the window: a running master would have re-queued by now
    assert group_alive(pgid), (tmp_path / "agent-0.log").read_text()[-3000:]
    await master.start()
    await master.wait_until(lambda: len(master.registers) == 2, timeout=30)
    assert master.registers[-1].running == ["kept"]
    assert "orphaned" not in (tmp_path / "agent-0.log").read_text()
