"""A task cannot fill the agent's disk: over its quota it is stopped, saying why, and its /tmp is bounded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent_image.agent.disk_quota import disk_usage, parse_size

from .conftest import AgentFactory
from .fake_master import FakeMaster
from .test_agent_integration import exited, lines_of, start_task

# Writes a MiB a step into its work dir (where training output goes) and never stops on its own.
FILL_PY = """\
import time
with open("filler", "wb") as f:
    while True:
        f.write(b"x" * (1 << 20)); f.flush()
        time.sleep(0.02)
"""

TMP_PY = """\
import errno
try:
    with open("/tmp/big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20)); f.flush()
    print("TMP wrote 64 MiB")
except OSError as e:
    print("TMP", errno.errorcode[e.errno])
"""


async def test_a_task_over_its_disk_quota_is_stopped_and_told_why(
        master: FakeMaster, start_agent: AgentFactory) -> None:
    start_agent(master, "--task-disk-quota", "8M", "--task-runtime", "process")
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "fill", ["python3", "fill.py"], files={"fill.py": FILL_PY}))
    done = await master.wait_until(lambda: exited(master, "fill"), timeout=60)
    assert done.exit_code != 0
    assert done.reason.startswith("disk quota exceeded") and "quota of 8.0 MiB" in done.reason
    assert any("disk quota exceeded" in ln.message for ln in lines_of(master, "fill"))


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_a_sandboxed_tasks_tmp_is_as_large_as_its_quota(master: FakeMaster, start_agent: AgentFactory) -> None:
    start_agent(master, "--task-disk-quota", "16M")
    await master.wait_until(lambda: master.registers)
    await master.send(start_task(master, "tmp", ["python3", "tmp.py"], files={"tmp.py": TMP_PY}))
    done = await master.wait_until(lambda: exited(master, "tmp"), timeout=60)
    lines = [ln.message for ln in lines_of(master, "tmp")]
    assert done.exit_code == 0, lines
    assert "TMP ENOSPC" in lines


def test_sizes_read_like_the_flag_documents_them() -> None:
    assert parse_size("20G") == 20 << 30 and parse_size("512M") == 512 << 20
    assert parse_size("1.5GiB") == 3 << 29 and parse_size("4096") == 4096
    with pytest.raises(ValueError, match="'lots' is not a size"):
        parse_size("lots")


def test_usage_counts_a_hard_linked_file_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * (1 << 20))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").hardlink_to(tmp_path / "a")
    assert (1 << 20) <= disk_usage([tmp_path]) < (1 << 20) + (64 << 10)
