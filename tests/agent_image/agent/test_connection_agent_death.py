"""An agent that exits says why in its log: an unexpected error, a signal, a rejected token."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

from .conftest import DET_AGENT, JOIN_TOKEN, AgentFactory
from .fake_master import FakeMaster


async def test_an_agent_that_dies_logs_the_reason(master: FakeMaster, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    run = await asyncio.to_thread(
        subprocess.run, [DET_AGENT, "--master", master.url, "--join-token", JOIN_TOKEN, "--agent-id", "doomed",
                         "--slots", "1", "--slot-type", "cpu", "--work-dir", str(not_a_dir / "work"),
                         "--task-runtime", "process"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    died = [line for line in run.stderr.splitlines() if "agent doomed died:" in line]
    assert died and "NotADirectoryError" in died[0] and "CRITICAL" in died[0], run.stderr


async def test_a_clean_shutdown_says_so(master: FakeMaster, start_agent: AgentFactory, tmp_path: Path) -> None:
    proc = start_agent(master)
    await master.wait_until(lambda: master.registers)
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 20) == 0
    log = (tmp_path / "agent-0.log").read_text()
    assert "agent agent-under-test shutting down cleanly on SIGTERM: killing 0 task(s)" in log
    assert "agent agent-under-test exited with status 0" in log


async def test_a_rejected_token_is_the_stated_reason(master: FakeMaster, start_agent: AgentFactory,
                                                     tmp_path: Path) -> None:
    proc = start_agent(master, token="wrong")
    assert await asyncio.to_thread(proc.wait, 20) == 2
    assert "exiting: the master rejected the join token" in (tmp_path / "agent-0.log").read_text()

