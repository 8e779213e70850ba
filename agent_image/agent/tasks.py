"""Runs the master's tasks as local process groups and reports their life cycle.

For each ``StartTask``: prepare ``<work-dir>/tasks/<allocation id>/`` (context, info files),
spawn the entrypoint in a new session, ship its output, and queue ``TaskStarted`` /
``TaskLogs`` / ``TaskExited`` on the outbox, the exit strictly after the last log batch.
A task's process group is treated like a container: when its leader exits, or a kill's grace
runs out, whatever is left in the group gets SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.wire.agent_protocol import Slot, StartTask, TaskExited, TaskStarted

from .context_cache import ContextCache
from .log_shipper import READ_LIMIT, LogShipper
from .outbox import Outbox
from .safe_untar import safe_extract
from .task_setup import build_command, build_env, write_info_files

_PR_SET_PDEATHSIG = 1


def _die_with_agent() -> None:
    """In the child before exec: SIGKILL it if the agent dies.

    Nobody would ship its logs or report its exit, and the master re-queues its trial once
    the agent is declared lost, so a survivor would only run the trial twice.
    """
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

log = logging.getLogger(__name__)

_FINISHED_MEMORY = 1000


@dataclass
class TaskHandle:
    allocation_id: str
    grace: float
    process: asyncio.subprocess.Process | None = None
    kill_requested: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    killer: asyncio.Task[None] | None = None


def exit_code_of(returncode: int) -> int:
    """Negative returncodes (killed by signal N) become 128+N, as a shell reports them."""
    return 128 - returncode if returncode < 0 else returncode


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class TaskRunner:
    def __init__(
        self,
        *,
        master_url: str,
        agent_id: str,
        work_dir: Path,
        slots: list[Slot],
        outbox: Outbox,
        cluster_id: Callable[[], str],
    ) -> None:
        self._master_url = master_url
        self._agent_id = agent_id
        self._work_dir = work_dir
        self._slots = slots
        self._outbox = outbox
        self._cluster_id = cluster_id
        self._contexts = ContextCache(work_dir / "contexts")
        self._tasks: dict[str, TaskHandle] = {}
        self._finished: list[str] = []

    # -- queries ---------------------------------------------------------------------------
    def running_ids(self) -> list[str]:
        return [a for a, h in self._tasks.items() if not h.done.is_set()]

    # -- commands from the master ------------------------------------------------------------
    def start(self, msg: StartTask) -> None:
        if msg.allocation_id in self._tasks or msg.allocation_id in self._finished:
            log.warning("ignoring repeated StartTask for %s", msg.allocation_id)
            return
        handle = TaskHandle(allocation_id=msg.allocation_id, grace=msg.kill_grace_seconds)
        self._tasks[msg.allocation_id] = handle
        handle.runner = asyncio.create_task(self._run(handle, msg), name=f"task-{msg.allocation_id}")

    def kill(self, allocation_id: str, grace: float | None = None) -> None:
        handle = self._tasks.get(allocation_id)
        if handle is None:
            if allocation_id not in self._finished:
                log.info("kill for unknown allocation %s: reporting it as exited", allocation_id)
                self._outbox.put(TaskExited(allocation_id=allocation_id, exit_code=None, reason="killed"))
            return
        self._signal(handle, handle.grace if grace is None else grace)

    async def kill_all(self, max_grace: float = 10.0) -> None:
        handles = [h for h in self._tasks.values() if not h.done.is_set()]
        for h in handles:
            self._signal(h, min(h.grace, max_grace))
        waiters = [asyncio.create_task(h.done.wait()) for h in handles]
        if waiters:
            _, pending = await asyncio.wait(waiters, timeout=max_grace + 3.0)
            for w in pending:
                w.cancel()

    # -- internals -----------------------------------------------------------------------------
    def _signal(self, handle: TaskHandle, grace: float) -> None:
        handle.kill_requested = True
        proc = handle.process
        if proc is None or proc.returncode is not None:
            return  # not spawned yet (the runner checks kill_requested) or already gone
        log.info("killing %s (grace %.1fs)", handle.allocation_id, grace)
        _killpg(proc.pid, signal.SIGTERM)
        if handle.killer is None:
            handle.killer = asyncio.create_task(self._escalate(handle, proc.pid, grace))

    async def _escalate(self, handle: TaskHandle, pgid: int, grace: float) -> None:
        try:
            await asyncio.wait_for(handle.done.wait(), timeout=max(grace, 0.0))
        except TimeoutError:
            log.info("%s did not stop within %.1fs: SIGKILL", handle.allocation_id, grace)
            _killpg(pgid, signal.SIGKILL)

    def _prepare(self, msg: StartTask, task_dir: Path) -> list[str]:
        """Blocking: context, info files; returns argv. Runs in a worker thread."""
        task_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(task_dir, 0o700)
        tgz = self._contexts.get(self._master_url, msg.task_id, msg.session_token, msg.context_hash)
        context_dir = task_dir / "context"
        if context_dir.exists():
            shutil.rmtree(context_dir)
        safe_extract(tgz, context_dir)
        write_info_files(task_dir / "info", msg, self._master_url, self._cluster_id(), self._agent_id)
        return build_command(msg.entrypoint, context_dir)

    async def _spawn(self, msg: StartTask, task_dir: Path, handle: TaskHandle) -> asyncio.subprocess.Process | None:
        """The started process, or None when a kill arrived while preparing."""
        argv = await asyncio.to_thread(self._prepare, msg, task_dir)
        if handle.kill_requested:
            return None
        env = build_env(
            msg,
            master_url=self._master_url,
            cluster_id=self._cluster_id(),
            agent_id=self._agent_id,
            slots=self._slots,
            info_dir=task_dir / "info",
        )
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(task_dir / "context"),
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_agent,
            limit=READ_LIMIT,
        )

    async def _run(self, handle: TaskHandle, msg: StartTask) -> None:
        alloc = msg.allocation_id
        task_dir = self._work_dir / "tasks" / alloc
        try:
            try:
                proc = await self._spawn(msg, task_dir, handle)
            except Exception as exc:  # noqa: BLE001 - any failure is reported to the master
                log.warning("task %s failed to start: %s", alloc, exc)
                self._outbox.put(TaskExited(allocation_id=alloc, exit_code=None, reason=f"failed to start: {exc}"))
                return
            if proc is None:
                log.info("task %s killed before it started", alloc)
                self._outbox.put(TaskExited(allocation_id=alloc, exit_code=None, reason="killed"))
                return
            handle.process = proc
            log.info("task %s started, pid %d", alloc, proc.pid)
            self._outbox.put(TaskStarted(allocation_id=alloc, pid=proc.pid, started_at=time.time()))
            if handle.kill_requested:
                self._signal(handle, handle.grace)
            returncode = await self._supervise(alloc, proc, task_dir)
            reason = "killed" if handle.kill_requested else ""
            log.info("task %s exited with %d%s", alloc, exit_code_of(returncode), f" ({reason})" if reason else "")
            self._outbox.put(TaskExited(allocation_id=alloc, exit_code=exit_code_of(returncode), reason=reason))
        finally:
            handle.done.set()
            if handle.killer is not None:
                handle.killer.cancel()
            self._tasks.pop(alloc, None)
            self._finished.append(alloc)
            del self._finished[:-_FINISHED_MEMORY]

    async def _supervise(self, alloc: str, proc: asyncio.subprocess.Process, task_dir: Path) -> int:
        """Ship output until the process and its pipes are done; returns the returncode."""
        shipper = LogShipper(alloc, self._outbox, task_dir / "logs")
        shipper.start()
        assert proc.stdout is not None and proc.stderr is not None
        pumps = [
            asyncio.create_task(shipper.pump(proc.stdout, "stdout")),
            asyncio.create_task(shipper.pump(proc.stderr, "stderr")),
        ]
        try:
            returncode = await proc.wait()
        finally:
            _killpg(proc.pid, signal.SIGKILL)  # leftovers of the group die with the leader
            _, pending = await asyncio.wait(pumps, timeout=5.0)
            for p in pending:
                p.cancel()
            await shipper.close()
        return returncode
