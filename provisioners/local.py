"""Local provisioner: one OS process per "instance", so `det deploy local` can autoscale.

The command line comes from a callable given at construction (typically the agent command
with the master URL and pool). Each process gets its own session so `terminate` can SIGTERM
the whole process group; processes that exit on their own disappear from `list_instances`,
just as an instance that shut itself down (shutdown = terminate) disappears from a cloud.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from provisioners.base import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    Instance,
    InvalidConfig,
    LaunchRequest,
    QuotaExceeded,
    instance_tags,
    validate_request,
)

CommandFactory = Callable[[str, LaunchRequest], Sequence[str]]  # (instance_id, request) -> argv


@dataclass
class _Proc:
    instance: Instance
    popen: subprocess.Popen[bytes]


class LocalProvisioner:
    """`Provisioner` over local processes. The agent id is the instance id (in DET_AGENT_ID)."""

    def __init__(
        self,
        command: CommandFactory,
        *,
        max_processes: int | None = None,
        log_dir: Path | None = None,
        env: dict[str, str] | None = None,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self._command = command
        self._max = max_processes
        self._log_dir = log_dir
        self._env = dict(env or {})
        self._stop_timeout_s = stop_timeout_s
        self._procs: dict[str, _Proc] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._prefix = f"local-{os.getpid()}"

    def launch(self, req: LaunchRequest) -> list[Instance]:
        validate_request(req)
        kw = {"zone": "local", "instance_type": req.instance_type}
        with self._lock:
            existing = [
                p.instance for p in self._procs.values()
                if p.instance.tags.get(TAG_REQUEST) == req.request_id and p.popen.poll() is None
            ]
            if existing:  # a retried request converges instead of starting more processes
                return existing
            live = sum(1 for p in self._procs.values() if p.popen.poll() is None)
            if self._max is not None and live + req.count > self._max:
                raise QuotaExceeded(f"at most {self._max} local agent processes ({live} running)", **kw)
            out = []
            for _ in range(req.count):
                iid = f"{self._prefix}-{next(self._ids)}"
                inst = Instance(
                    instance_id=iid, name=iid, state="running", zone="local",
                    instance_type=req.instance_type, spot=False, launched_at=time.time(),
                    tags=instance_tags(req),
                )
                self._procs[iid] = _Proc(inst, self._spawn(iid, req, kw))
                out.append(inst)
            return out

    def _spawn(self, iid: str, req: LaunchRequest, kw: dict[str, str]) -> subprocess.Popen[bytes]:
        argv = list(self._command(iid, req))
        env = {**os.environ, **self._env, "DET_AGENT_ID": iid, "DET_RESOURCE_POOL": req.pool}
        out: int | IO[bytes] = (subprocess.DEVNULL if self._log_dir is None
                                else open(self._log_dir / f"{iid}.log", "ab"))
        try:
            return subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise InvalidConfig(f"cannot start {argv[:1]}: {exc}", **kw) from exc
        finally:
            if not isinstance(out, int):
                out.close()

    def list_instances(self, cluster_id: str, pool: str) -> list[Instance]:
        with self._lock:
            for iid in [i for i, p in self._procs.items() if p.popen.poll() is not None]:
                # Exited on its own: gone, like a self-terminated VM; reap any children left.
                _signal_group(self._procs.pop(iid).popen, signal.SIGKILL)
            return [
                p.instance for p in self._procs.values()
                if p.instance.tags.get(TAG_CLUSTER) == cluster_id and p.instance.tags.get(TAG_POOL) == pool
            ]

    def terminate(self, instance_ids: list[str]) -> None:
        with self._lock:
            procs = [self._procs.pop(i) for i in instance_ids if i in self._procs]
        for p in procs:
            _signal_group(p.popen, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout_s
        for p in procs:
            try:
                p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p.popen, signal.SIGKILL)
                p.popen.wait()

    def close(self) -> None:
        """Terminate every process this provisioner started (master shutdown, test teardown)."""
        with self._lock:
            ids = list(self._procs)
        self.terminate(ids)


def _signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(popen.pid, sig)  # start_new_session: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass
