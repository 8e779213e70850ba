"""Fixtures for agent integration tests: a fake master and a real ``det-agent`` process."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from .fake_master import FakeMaster

JOIN_TOKEN = "join-secret"
DET_AGENT = str(Path(sys.executable).parent / "det-agent")


def make_context(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            alive.append(int(entry))
    return alive


@pytest.fixture
async def master() -> AsyncIterator[FakeMaster]:
    m = FakeMaster(JOIN_TOKEN)
    await m.start()
    yield m
    await m.stop()


AgentFactory = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[AgentFactory]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(master: FakeMaster, *extra: str, token: str = JOIN_TOKEN) -> subprocess.Popen[bytes]:
        log_file = open(tmp_path / f"agent-{len(procs)}.log", "wb")  # closed with the process
        argv = [
            DET_AGENT,
            "--master",
            master.url,
            "--join-token",
            token,
            "--agent-id",
            "agent-under-test",
            "--slots",
            "2",
            "--slot-type",
            "cpu",
            "--work-dir",
            str(tmp_path / "work"),
            "--log-level",
            "DEBUG",
            *extra,
        ]
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
        log_file.close()
        procs.append(proc)
        return proc

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
