"""An OpenPAI task's $PAI_OUTPUT_DIR on the agent: a directory of the task's own, writable (also in the
sandbox, as the task's dropped uid), and what it holds when the task ends, however it ends, sent to the
master before the exit is reported; symlinks never followed; a master that cannot be reached costs the
outputs, not the exit report. A task runner in this process, a stand-in master on loopback."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent_image.agent.outbox import Outbox
from agent_image.agent.sandbox import Sandbox, SandboxUnavailable, find_bwrap
from agent_image.agent.tasks import TaskRunner
from controlplane.wire.agent_protocol import Slot, StartTask, TaskExited, TaskLogs

from .conftest import make_context

TOKEN = "alloc-token"


class StandIn(ThreadingHTTPServer):
    """Serves the task's context and takes its outputs (the agent sends them chunked)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.context = make_context({"noop.txt": ""})
        self.kept: dict[str, dict[str, bytes]] = {}
        self.params: list[str] = []
        self.failing = False  # answer every POST 502, as a master whose storage is down

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(200, {"b64Tgz": base64.b64encode(self.server.context).decode()})

    def do_POST(self) -> None:
        if self.server.failing:
            self._answer(502, {"message": "checkpoint storage is down"})
            self.close_connection = True
            return
        if self.headers.get("Grpc-Metadata-x-allocation-token") != f"Bearer {TOKEN}":
            self._answer(401, {"message": "invalid allocation token"})
            return
        body = b""
        while True:  # chunked transfer encoding
            size = int(self.rfile.readline().strip(), 16)
            if size == 0:
                self.rfile.readline()
                break
            body += self.rfile.read(size)
            self.rfile.readline()
        alloc = self.path.split("/")[4]
        self.server.params.append(self.path)
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            self.server.kept[alloc] = {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]
        self._answer(200, {"location": f"file:///kept/{alloc}"})


@pytest.fixture
def master():
    server = StandIn()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def sandbox_or_skip() -> Sandbox:
    bwrap = find_bwrap("bwrap")
    if bwrap is None:
        pytest.skip("bwrap is not installed")
    box = Sandbox(bwrap)
    try:
        box.probe()
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    return box


SCRIPT = ('echo "work $PAI_WORK_DIR $(pwd)"; echo "out $PAI_OUTPUT_DIR"; mkdir -p "$PAI_OUTPUT_DIR/model" && '
          'echo weights > "$PAI_OUTPUT_DIR/model/w.txt" && ln -s /etc/hostname "$PAI_OUTPUT_DIR/leak" && exit 3')


async def run(master: StandIn, tmp_path: Path, sandbox: Sandbox | None, alloc: str,
              script: str = SCRIPT) -> list[Any]:
    outbox = Outbox()
    runner = TaskRunner(master_url=master.url, agent_id="agent-1", work_dir=tmp_path / "work",
                        slots=[Slot(id=0, type="cpu")], outbox=outbox, cluster_id=lambda: "c", sandbox=sandbox)
    runner.start(StartTask(allocation_id=alloc, task_id=alloc.rpartition(".")[0], task_type="PAI",
                           entrypoint=["sh", "-c", script], env={"PAI_JOB_NAME": "job-1"}, slot_ids=[],
                           session_token=TOKEN, collect_outputs=True))
    for _ in range(600):
        items = list(outbox._items)
        if any(isinstance(m, TaskExited) for m in items):
            await runner.kill_all(1.0)
            return items
        await asyncio.sleep(0.05)
    raise AssertionError(f"the task did not end: {list(outbox._items)}")


def lines(items: list[Any]) -> list[str]:
    return [ln.message for m in items if isinstance(m, TaskLogs) for ln in m.lines]


@pytest.mark.parametrize("sandboxed", [False, True], ids=["process", "sandbox"])
async def test_a_failed_tasks_output_dir_is_kept_before_its_exit_is_reported(master, tmp_path, sandboxed):
    sandbox = sandbox_or_skip() if sandboxed else None
    items = await run(master, tmp_path, sandbox, "pai-1-worker-0.1")
    said = lines(items)
    work = next(s for s in said if s.startswith("work "))
    _, work_dir, cwd = work.split()
    assert work_dir == cwd == ("/run/determined/workdir" if sandboxed else str(tmp_path / "work/tasks/pai-1-worker-0.1"
                                                                              "/context"))
    assert f"out {'/run/determined/output' if sandboxed else tmp_path / 'work/tasks/pai-1-worker-0.1/output'}" in said
    assert master.kept["pai-1-worker-0.1"] == {"model/w.txt": b"weights\n"}  # the link is not followed
    assert "leftOut=1+symlinks" in master.params[0]
    kept_line = next(s for s in said if "kept 1 file" in s)
    assert kept_line == ("det-agent agent-1: kept 1 file (8 B) of $PAI_OUTPUT_DIR at file:///kept/pai-1-worker-0.1 "
                         "(det pai output job-1); left out: 1 symlinks (never followed)")
    exit_at = next(i for i, m in enumerate(items) if isinstance(m, TaskExited))
    kept_at = next(i for i, m in enumerate(items) if isinstance(m, TaskLogs) and any("kept" in ln.message
                                                                                      for ln in m.lines))
    assert kept_at < exit_at and items[exit_at].exit_code == 3


async def test_a_master_that_cannot_keep_them_costs_the_outputs_not_the_exit_report(master, tmp_path):
    master.failing = True
    items = await run(master, tmp_path, None, "pai-2-worker-0.1", "echo x > $PAI_OUTPUT_DIR/x")
    assert ("det-agent agent-1: keeping $PAI_OUTPUT_DIR failed: the master answered 502: checkpoint storage is down"
            in lines(items))
    assert next(m for m in items if isinstance(m, TaskExited)).exit_code == 0


async def test_an_empty_output_dir_sends_nothing(master, tmp_path):
    items = await run(master, tmp_path, None, "pai-3-worker-0.1", "true")
    assert "det-agent agent-1: $PAI_OUTPUT_DIR is empty: nothing kept" in lines(items)
    assert master.kept == {}
