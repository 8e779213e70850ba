"""Runs the master's tasks as local process groups and reports their life cycle.

For each ``StartTask``: prepare ``<work-dir>/tasks/<allocation id>/`` (context, info files),
spawn the entrypoint in a new session (under bubblewrap unless the agent runs tasks as plain
processes, see ``sandbox.py``), ship its output, and queue ``TaskStarted`` / ``TaskLogs`` /
``TaskExited`` on the outbox, the exit strictly after the last log batch; then the task
directory is removed (its logs are already in the outbox). A task's process group is treated
like a container: when its leader exits, or a kill's grace runs out, whatever is left in the
group gets SIGKILL. A task that holds more than its disk quota in the directories it writes is
stopped (``disk_quota.py``). A task gets a writable Python layer of its own, and its
``environment.pip_requirements`` are installed, or found installed, before it starts (``task_python.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.wire.agent_protocol import (
    DEFAULT_ENVIRONMENT,
    LogLine,
    Slot,
    StartTask,
    TaskExited,
    TaskLogs,
    TaskStarted,
)

from . import overlay, pai_outputs, task_python
from .context_cache import ContextCache
from .disk_quota import enforce, format_size
from .environments import TaskEnvironment, default_environment
from .log_shipper import READ_LIMIT, LogShipper
from .netns import resolv_conf, setns
from .outbox import Outbox
from .safe_untar import safe_extract
from .sandbox import (
    INFO_DIR,
    MODEL_COPY_DIR,
    RESOURCES_TYPE,
    WORKDIR,
    Mount,
    Sandbox,
    block_sigterm,
    chown_tree,
    read_only_mounts,
    shared_fs_mounts,
)
from .task_network import TaskNetworks
from .task_setup import build_command, build_env, check_executable, make_staging_dir, write_info_files
from .unsandboxed_storage import staged_view

_PR_SET_PDEATHSIG = 1


def _die_with_agent() -> None:
    """In the child before exec: SIGKILL it if the agent dies.

    Nobody would ship its logs or report its exit, and the master re-queues its trial once
    the agent is declared lost, so a survivor would only run the trial twice.
    """
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

def _sandboxed_preexec() -> None:
    block_sigterm()
    _die_with_agent()
    # bwrap creates the layout's directories (/run/determined, ...) with the process umask; an
    # agent started under umask 077 (the boot script's) would leave them untraversable by the
    # task's uid. The task's own files live in its private, 0700 task directory anyway.
    os.umask(0o022)


def _sandboxed_in_network(ns_fd: int) -> None:
    setns(ns_fd)  # the sandbox, and so the task, starts in the task's network namespace
    _sandboxed_preexec()


def remove_tree(path: Path) -> None:
    """Remove ``path`` even where the task took away its own write or search permissions."""
    def fix(func: Callable[..., Any], target: str, _exc: Any) -> None:
        parent = os.path.dirname(target)
        with contextlib.suppress(OSError):
            os.chmod(parent, 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
        with contextlib.suppress(FileNotFoundError):
            if func in (os.rmdir, os.unlink, os.remove):
                func(target)
            else:
                shutil.rmtree(target, ignore_errors=True)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=fix)


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
    # set once a SIGTERM to the group reaches the task (at once for a plain process; for a
    # sandbox when its shim says so: an earlier one would only reach bwrap and be lost)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # the host directories it writes (its work dir, its checkpoint staging directory)
    written: list[Path] = field(default_factory=list)
    exit_reason: str = ""  # why the agent stopped it, when it did so on its own
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # set with kill_requested
    started: bool = False  # TaskStarted is sent (at its first process: the requirements' install)
    launches: int = 0  # processes started (a late "ready" of an earlier one is not the current one's)
    layer_key: str = ""  # the requirements layer it holds (task_python.RequirementLayers)


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
        sandbox: Sandbox | None = None,
        environments: dict[str, TaskEnvironment] | None = None,
        disk_quota: int | None = None,
        networks: TaskNetworks | None = None,
    ) -> None:
        self._master_url = master_url
        self._agent_id = agent_id
        self._work_dir = work_dir
        self._slots = slots
        self._outbox = outbox
        self._cluster_id = cluster_id
        self._contexts = ContextCache(work_dir / "contexts")
        self._layers = task_python.RequirementLayers(work_dir / "python-layers")
        self._sandbox = sandbox
        self._disk_quota = disk_quota  # bytes a task may hold in what it writes; None: no limit
        self._networks = networks  # None: sandboxed tasks share the host's network
        # What StartTask.environment may name; "default" (the agent's interpreter) is always there.
        self._environments = environments or {}
        if DEFAULT_ENVIRONMENT not in self._environments:
            self._environments = {DEFAULT_ENVIRONMENT: default_environment(), **self._environments}
        self._tasks: dict[str, TaskHandle] = {}
        self._finished: list[str] = []
        self._cleanups: set[asyncio.Task[None]] = set()
        # A new agent process runs no task yet: what an earlier one left behind is garbage.
        remove_tree(work_dir / "tasks")

    # -- queries ---------------------------------------------------------------------------
    def running_ids(self) -> list[str]:
        return [a for a, h in self._tasks.items() if not h.done.is_set()]

    def environment_names(self) -> list[str]:
        """The environments it offers, ``default`` first."""
        return [DEFAULT_ENVIRONMENT, *sorted(n for n in self._environments if n != DEFAULT_ENVIRONMENT)]

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
        if self._cleanups:
            await asyncio.wait(set(self._cleanups), timeout=10.0)

    # -- internals -----------------------------------------------------------------------------
    def _signal(self, handle: TaskHandle, grace: float) -> None:
        handle.kill_requested = True
        handle.stop.set()
        proc = handle.process
        if proc is None or proc.returncode is not None:
            return  # not spawned yet (the runner checks kill_requested) or already gone
        log.info("killing %s (grace %.1fs)", handle.allocation_id, grace)
        if handle.ready.is_set():
            _killpg(proc.pid, signal.SIGTERM)
        else:
            asyncio.create_task(self._term_when_ready(handle, proc.pid))  # ends with the task
        if handle.killer is None:
            handle.killer = asyncio.create_task(self._escalate(handle, proc.pid, grace))

    async def _term_when_ready(self, handle: TaskHandle, pgid: int) -> None:
        waiters = [asyncio.create_task(handle.ready.wait()), asyncio.create_task(handle.done.wait())]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        if not handle.done.is_set():
            _killpg(pgid, signal.SIGTERM)

    async def _escalate(self, handle: TaskHandle, pgid: int, grace: float) -> None:
        try:
            await asyncio.wait_for(handle.done.wait(), timeout=max(grace, 0.0))
        except TimeoutError:
            log.info("%s did not stop within %.1fs: SIGKILL", handle.allocation_id, grace)
            _killpg(pgid, signal.SIGKILL)

    def _prepare(self, msg: StartTask, task_dir: Path) -> tuple[list[str], list[Mount]]:
        """Blocking: context, info files; returns the entrypoint's argv and the sandbox's mounts.
        Runs in a worker thread."""
        task_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(task_dir, 0o700)
        tgz = self._contexts.get(self._master_url, msg.task_id, msg.session_token, msg.context_hash)
        context_dir = task_dir / "context"
        if context_dir.exists():
            shutil.rmtree(context_dir)
        safe_extract(tgz, context_dir)
        write_info_files(task_dir / "info", msg, self._master_url, self._cluster_id(), self._agent_id,
                         self._slots)
        argv = build_command(msg.entrypoint, context_dir, sum(msg.container_slot_counts) or len(msg.slot_ids),
                             self.environment_for(msg).determined_harness)
        pai_outputs.prepare(msg, task_dir, self._sandbox.owner if self._sandbox is not None else None)
        layer = self._task_layer(msg, task_dir)  # its own Python layer (task_python.py)
        if self._sandbox is None:
            return argv, []
        # Determined's harness saves the model definition into each checkpoint from a clean,
        # read-only copy of the context (not the workdir, which training may fill).
        model_copy = task_dir / "model"
        if model_copy.exists():
            shutil.rmtree(model_copy)
        safe_extract(tgz, model_copy)
        mounts = [Mount(task_dir / "info", INFO_DIR), Mount(context_dir, WORKDIR, writable=True),
                  Mount(model_copy, MODEL_COPY_DIR)]
        mounts += read_only_mounts(context_dir, msg.read_only_paths)
        mounts += pai_outputs.mounts(msg, task_dir)  # $PAI_OUTPUT_DIR: written, so counted in its disk quota
        mounts.append(layer)
        shared = shared_fs_mounts(msg.trial_info, msg.allocation_id, msg.readable_checkpoints)
        owner = self._sandbox.owner
        if shared:
            # bwrap would make the read-only checkpoints' parents (a storage_path) as root: not writable
            subdirs = {str(Path(m.target).parent.relative_to(shared[0].target)) for m in shared[1:]} - {"."}
            make_staging_dir(shared[0].source, owner, sorted(subdirs))
            mounts += shared
        if owner is not None:  # the task runs as this uid: give it its workdir and info files
            chown_tree(context_dir, *owner)
            chown_tree(model_copy, *owner)
            chown_tree(task_dir / "info", *owner)
        # bwrap enters the workdir before the shim drops root, with its capabilities already
        # dropped: under an agent's umask 077 a 0700 workdir owned by the task is closed to it.
        os.chmod(context_dir, 0o755)
        os.chmod(model_copy, 0o755)
        return argv, mounts

    async def _spawn(self, msg: StartTask, task_dir: Path, handle: TaskHandle) -> asyncio.subprocess.Process | None:
        """The started process, or None when a kill arrived while preparing."""
        environment = self.environment_for(msg)
        if self._sandbox is None:  # still writes its checkpoints where the master publishes them from
            msg = await asyncio.to_thread(staged_view, msg)
        entry, mounts = await asyncio.to_thread(self._prepare, msg, task_dir)
        handle.written = [m.source for m in mounts if m.writable] or [
            task_dir / "context", *([pai_outputs.host_dir(task_dir)] if msg.collect_outputs else [])]
        if handle.kill_requested:
            return None
        if self._sandbox is None:
            plain_env = self._env(msg, task_dir, environment, sandboxed=False)

            async def plain(argv: list[str], _mounts: list[Mount], env: dict[str, str]) -> asyncio.subprocess.Process:
                handle.ready.set()
                return await self._exec(argv, task_dir / "context", env, _die_with_agent)

            if msg.pip_requirements and not await self._install_requirements(msg, handle, environment, plain_env,
                                                                             plain):
                return None
            return await plain(entry, [], plain_env)
        env = self._env(msg, task_dir, environment, sandboxed=True)
        # "failed to start" as for a plain process, not an exit 127 from inside the sandbox
        check_executable(entry[0], task_dir / "context", env.get("PATH", ""))
        preexec: Callable[[], None] = _sandboxed_preexec
        network = self._networks.plan(msg, self._master_url, env) if self._networks is not None else None
        if network is not None and self._networks is not None:
            if network.overlay is not None:
                env.update(overlay.TASK_ENV)
            ns_fd = await self._networks.join(msg.allocation_id, network)
            mounts = [*mounts, *self._resolv_mount(task_dir)]
            preexec = functools.partial(_sandboxed_in_network, ns_fd)

        async def sandboxed(argv: list[str], extra: list[Mount], env: dict[str, str]) -> asyncio.subprocess.Process:
            return await self._exec_sandboxed(handle, argv, [*mounts, *extra], task_dir, env, preexec, environment)

        if msg.pip_requirements:
            if not await self._install_requirements(msg, handle, environment, env, sandboxed):
                return None
            return await sandboxed(entry, [Mount(self._layers.layer(handle.layer_key), task_python.REQUIREMENTS_LAYER)],
                                   env)
        return await sandboxed(entry, [], env)

    async def _exec_sandboxed(self, handle: TaskHandle, entry: list[str], mounts: list[Mount], task_dir: Path,
                              env: dict[str, str], preexec: Callable[[], None],
                              environment: TaskEnvironment) -> asyncio.subprocess.Process:
        assert self._sandbox is not None
        handle.ready.clear()
        handle.launches += 1
        launch = handle.launches
        ready_r, ready_w = os.pipe()
        try:
            argv = self._sandbox.command(entry, mounts, WORKDIR, ready_fd=ready_w,
                                         environment_paths=environment.paths)
            proc = await self._exec(argv, task_dir, env, preexec, pass_fds=(ready_w,))
        except BaseException:
            os.close(ready_r)
            raise
        finally:
            os.close(ready_w)

        async def wait_ready() -> None:
            try:
                await asyncio.to_thread(os.read, ready_r, 1)  # a byte, or EOF if it died first
            finally:
                os.close(ready_r)
                if handle.launches == launch:  # not an earlier process's (the requirements' install)
                    handle.ready.set()

        asyncio.create_task(wait_ready())  # ends with the sandbox's shim
        return proc

    def _task_layer(self, msg: StartTask, task_dir: Path) -> Mount:
        """Blocking: the task's own Python layer, ``<task dir>/python`` (task_python.py)."""
        environment = self.environment_for(msg)
        seen_as = task_python.TASK_LAYER if self._sandbox is not None else str(task_dir / "python")
        requirements = self._requirements_seen(msg, self._sandbox is not None)
        behind = [task_python.site_dir(requirements, environment)] if requirements is not None else []
        task_python.make_layer(task_dir / "python", seen_as, environment, behind=behind)
        if self._sandbox is not None and self._sandbox.owner is not None:
            chown_tree(task_dir / "python", *self._sandbox.owner)
        return Mount(task_dir / "python", task_python.TASK_LAYER, writable=True)

    def _requirements_seen(self, msg: StartTask, sandboxed: bool) -> str | None:
        """Where the task sees its requirements layer; None without environment.pip_requirements."""
        if not msg.pip_requirements:
            return None
        if sandboxed:
            return task_python.REQUIREMENTS_LAYER
        key = task_python.requirements_key(msg, self.environment_for(msg), self._cluster_id())
        return str(self._layers.layer(key))

    def _say(self, alloc: str, message: str, error: bool = False) -> None:
        """A line of the agent's own in the task's logs."""
        self._outbox.put(TaskLogs(allocation_id=alloc, lines=[LogLine(
            timestamp=time.time(), message=f"det-agent {self._agent_id}: {message}",
            stdtype="stderr" if error else "stdout", level="LOG_LEVEL_ERROR" if error else "LOG_LEVEL_INFO")]))

    async def _install_requirements(
            self, msg: StartTask, handle: TaskHandle, environment: TaskEnvironment, env: dict[str, str],
            launch: Callable[[list[str], list[Mount], dict[str, str]], Awaitable[asyncio.subprocess.Process]]) -> bool:
        """environment.pip_requirements into the requirements layer its key names (task_python.py),
        installed here unless an earlier task of the key did. False when a kill (or the disk quota)
        stopped it; raises SetupFailed when pip fails, its lines already in the task's logs."""
        alloc = msg.allocation_id
        key = task_python.requirements_key(msg, environment, self._cluster_id())
        handle.layer_key = key
        self._layers.hold(key)
        async with self._layers.building(key, handle.stop) as building:
            if not building or handle.kill_requested:
                return False
            if self._layers.ready(key):
                self._say(alloc, "environment.pip_requirements: using the layer an earlier task of this experiment "
                                 "installed on this agent")
                return True
            layer = self._layers.layer(key)
            seen = task_python.REQUIREMENTS_LAYER if self._sandbox is not None else str(layer)
            owner = self._sandbox.owner if self._sandbox is not None else None
            await asyncio.to_thread(self._layers.prepare, key, seen, environment, msg.pip_requirements, owner)
            self._say(alloc, f"environment.pip_requirements: installing {len(msg.pip_requirements)} requirement(s) "
                             f"({', '.join(msg.pip_requirements)})")
            began = time.monotonic()
            proc = await launch(task_python.install_argv(seen), [Mount(layer, task_python.REQUIREMENTS_LAYER,
                                                                       writable=True)],
                                task_python.install_env(env, seen))
            handle.process = proc
            handle.started = True
            log.info("task %s installing its requirements, pid %d", alloc, proc.pid)
            self._outbox.put(TaskStarted(allocation_id=alloc, pid=proc.pid, started_at=time.time()))
            written, handle.written = handle.written, [*handle.written, layer]
            quota = self._enforce_quota(handle)
            if handle.kill_requested:
                self._signal(handle, handle.grace)
            try:
                returncode = await self._supervise(alloc, proc, self._work_dir / "tasks" / alloc)
            finally:
                if quota is not None:
                    quota.cancel()
                handle.written = written
                handle.process = None
                if handle.killer is not None:
                    handle.killer.cancel()
                    handle.killer = None
            if handle.kill_requested or returncode != 0:
                await asyncio.to_thread(self._layers.discard, key)
            if handle.kill_requested:
                return False
            if returncode != 0:
                raise task_python.SetupFailed(
                    exit_code_of(returncode), f"environment.pip_requirements failed to install (pip exited "
                                              f"{exit_code_of(returncode)}; its messages are above)")
            self._layers.complete(key)
            self._say(alloc, f"environment.pip_requirements: installed in {time.monotonic() - began:.1f}s; "
                             "later trials of this experiment on this agent use it as it is")
            return True

    @staticmethod
    def _resolv_mount(task_dir: Path) -> list[Mount]:
        """The namespace's /etc/resolv.conf where the host's names a resolver on its loopback."""
        text = resolv_conf()
        if text is None:
            return []
        path = task_dir / "resolv.conf"
        path.write_text(text)
        os.chmod(path, 0o644)
        return [Mount(path, os.path.realpath("/etc/resolv.conf"))]

    def environment_for(self, msg: StartTask) -> TaskEnvironment:
        """The environment the task asks for; raises LookupError naming it when not offered here."""
        found = self._environments.get(msg.environment)
        if found is None:
            raise LookupError(f"this agent offers no environment {msg.environment!r} "
                              f"(it offers: {', '.join(sorted(self._environments))})")
        return found

    def _env(self, msg: StartTask, task_dir: Path, environment: TaskEnvironment, *,
             sandboxed: bool) -> dict[str, str]:
        env = build_env(
            msg,
            master_url=self._master_url,
            cluster_id=self._cluster_id(),
            agent_id=self._agent_id,
            slots=self._slots,
            info_dir=Path(INFO_DIR) if sandboxed else task_dir / "info",
            environment=environment,
        )
        if sandboxed:
            env["DET_RESOURCES_TYPE"] = RESOURCES_TYPE
            env["HOME"] = "/tmp"
            env["PWD"] = WORKDIR
        env.update(pai_outputs.task_env(msg, task_dir, sandboxed))
        task_python.task_env(env, environment, task_python.TASK_LAYER if sandboxed else str(task_dir / "python"),
                             self._requirements_seen(msg, sandboxed))
        return env

    @staticmethod
    async def _exec(argv: list[str], cwd: Path, env: dict[str, str], preexec: Callable[[], None],
                    pass_fds: tuple[int, ...] = ()) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd),
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
            pass_fds=pass_fds,
            limit=READ_LIMIT,
        )

    async def _run(self, handle: TaskHandle, msg: StartTask) -> None:
        alloc = msg.allocation_id
        task_dir = self._work_dir / "tasks" / alloc
        try:
            try:
                proc = await self._spawn(msg, task_dir, handle)
            except task_python.SetupFailed as exc:  # pip's own lines are in its logs already
                log.warning("task %s: %s", alloc, exc)
                self._say(alloc, f"{exc}: the task stops here", error=True)
                self._outbox.put(TaskExited(allocation_id=alloc, exit_code=exc.exit_code, reason=str(exc),
                                            setup_failed=True))
                return
            except Exception as exc:  # noqa: BLE001 - any failure is reported to the master
                log.warning("task %s failed to start: %s", alloc, exc)
                # In the trial's logs too: a gang that stops here has no process output to say why.
                self._outbox.put(TaskLogs(allocation_id=alloc, lines=[LogLine(
                    timestamp=time.time(), message=f"det-agent {self._agent_id}: the task failed to start: {exc}",
                    stdtype="stderr", level="LOG_LEVEL_ERROR")]))
                self._outbox.put(TaskExited(allocation_id=alloc, exit_code=None, reason=f"failed to start: {exc}"))
                return
            if proc is None:
                log.info("task %s killed before it started", alloc)
                self._outbox.put(TaskExited(allocation_id=alloc, exit_code=None, reason=handle.exit_reason or "killed"))
                return
            handle.process = proc
            log.info("task %s started, pid %d", alloc, proc.pid)
            if not handle.started:  # else at its requirements' install
                self._outbox.put(TaskStarted(allocation_id=alloc, pid=proc.pid, started_at=time.time()))
            if handle.kill_requested:
                self._signal(handle, handle.grace)
            quota = self._enforce_quota(handle)
            try:
                returncode = await self._supervise(alloc, proc, task_dir)
            finally:
                if quota is not None:
                    quota.cancel()
            reason = handle.exit_reason or ("killed" if handle.kill_requested else "")
            setup_failed = (returncode != 0 and not reason
                            and await asyncio.to_thread(task_python.setup_failed, task_dir / "python"))
            if setup_failed:  # before its entrypoint: a restart would fail the same way
                reason = f"startup-hook.sh failed (exit {exit_code_of(returncode)}) before the entrypoint started"
                self._say(alloc, f"{reason}: the task stops here", error=True)
            log.info("task %s exited with %d%s", alloc, exit_code_of(returncode), f" ({reason})" if reason else "")
            if msg.collect_outputs:  # however it ended: what it left in $PAI_OUTPUT_DIR, before its exit is told
                await self._keep_outputs(msg, task_dir)
            self._outbox.put(TaskExited(allocation_id=alloc, exit_code=exit_code_of(returncode), reason=reason,
                                        setup_failed=setup_failed))
        finally:
            if self._networks is not None:
                try:
                    await self._networks.leave(alloc)
                except Exception as exc:  # noqa: BLE001 - the exit is reported whatever the cleanup does
                    log.warning("%s: removing its network failed: %s", alloc, exc)
            handle.done.set()
            if handle.layer_key:
                self._layers.release(handle.layer_key)
            if handle.killer is not None:
                handle.killer.cancel()
            self._tasks.pop(alloc, None)
            self._finished.append(alloc)
            del self._finished[:-_FINISHED_MEMORY]
            cleanup = asyncio.create_task(asyncio.to_thread(remove_tree, task_dir), name=f"cleanup-{alloc}")
            self._cleanups.add(cleanup)
            cleanup.add_done_callback(self._cleanups.discard)

    async def _keep_outputs(self, msg: StartTask, task_dir: Path) -> None:
        """Sends the task's $PAI_OUTPUT_DIR to the master (pai_outputs.py) and says what was kept in its log."""
        try:
            line, error = await asyncio.to_thread(pai_outputs.keep, self._master_url, msg, task_dir)
        except Exception as exc:  # noqa: BLE001 - the exit is reported whatever happens to the outputs
            log.warning("%s: keeping its outputs failed: %r", msg.allocation_id, exc)
            line, error = f"keeping $PAI_OUTPUT_DIR failed: {exc}", True
        log.info("%s: %s", msg.allocation_id, line)
        self._outbox.put(TaskLogs(allocation_id=msg.allocation_id, lines=[LogLine(
            timestamp=time.time(), message=f"det-agent {self._agent_id}: {line}",
            stdtype="stderr" if error else "stdout", level="LOG_LEVEL_ERROR" if error else "LOG_LEVEL_INFO")]))

    def _enforce_quota(self, handle: TaskHandle) -> asyncio.Task[None] | None:
        """Watches what the task writes; over the quota, it is told why in its log and stopped."""
        quota = self._disk_quota
        if quota is None:
            return None

        async def exceeded(used: int) -> None:
            why = (f"disk quota exceeded: the task holds {format_size(used)} in its work dir and checkpoint "
                   f"directory, over its quota of {format_size(quota)}")
            log.warning("%s: %s; stopping it", handle.allocation_id, why)
            self._outbox.put(TaskLogs(allocation_id=handle.allocation_id, lines=[LogLine(
                timestamp=time.time(), message=f"det-agent {self._agent_id}: {why}; stopping the task",
                stdtype="stderr", level="LOG_LEVEL_ERROR")]))
            handle.exit_reason = why
            self._signal(handle, 0.0)  # every second of grace is more disk filled

        return asyncio.create_task(enforce(handle.written, quota, exceeded), name=f"quota-{handle.allocation_id}")

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
            done, pending = await asyncio.wait(pumps, timeout=5.0)
            for p in pending:
                p.cancel()
            for p in done:  # a pump that failed must not die unseen ("Task exception was never retrieved")
                if not p.cancelled() and p.exception() is not None:
                    log.warning("%s: reading the task's output failed: %r", alloc, p.exception())
            await shipper.close()
        return returncode
