"""Local provisioner: real processes, found by tags, SIGTERM to the whole process group."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioners.base import InvalidConfig, LaunchRequest, Provisioner, QuotaExceeded
from provisioners.local import LocalProvisioner

# Starts a child that also sleeps, so terminating must reach the whole group.
SCRIPT = (
    "import os, subprocess, sys, time;"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
    "open(sys.argv[1], 'w').write(f\"{os.environ['DET_AGENT_ID']} {c.pid}\");"
    "time.sleep(60)"
)


def req(rid: str = "r1", count: int = 1, pool: str = "gpu") -> LaunchRequest:
    return LaunchRequest(rid, "c1", pool, count, "local", None, False, "")


@pytest.fixture
def prov(tmp_path: Path) -> Iterator[LocalProvisioner]:
    p = LocalProvisioner(
        lambda iid, r: [sys.executable, "-c", SCRIPT, str(tmp_path / f"{iid}.pid")],
        max_processes=3, log_dir=tmp_path, stop_timeout_s=5,
    )
    yield p
    p.close()


def _wait_for(path: Path) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_launch_list_terminate_group(prov: LocalProvisioner, tmp_path: Path) -> None:
    assert isinstance(prov, Provisioner)
    a, b = prov.launch(req(count=2))
    prov.launch(req("r2", pool="cpu"))
    assert {i.instance_id for i in prov.list_instances("c1", "gpu")} == {a.instance_id, b.instance_id}
    agent_id, child = _wait_for(tmp_path / f"{a.instance_id}.pid").split()
    assert agent_id == a.instance_id
    prov.terminate([a.instance_id])
    deadline = time.monotonic() + 5
    while _alive(int(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(child))
    assert [i.instance_id for i in prov.list_instances("c1", "gpu")] == [b.instance_id]


def test_quota_and_bad_command(prov: LocalProvisioner, tmp_path: Path) -> None:
    prov.launch(req(count=3))
    with pytest.raises(QuotaExceeded):
        prov.launch(req("r2"))
    bad = LocalProvisioner(lambda iid, r: [str(tmp_path / "no-such-binary")])
    with pytest.raises(InvalidConfig):
        bad.launch(req())


def test_exited_process_disappears(tmp_path: Path) -> None:
    p = LocalProvisioner(lambda iid, r: [sys.executable, "-c", "pass"])
    (inst,) = p.launch(req())
    deadline = time.monotonic() + 10
    while p.list_instances("c1", "gpu") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.list_instances("c1", "gpu") == []
    p.close()
