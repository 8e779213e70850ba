"""Run a function as N real worker processes that talk through core.DistributedContext.

``run_ranks(fn, size)`` spawns ``size`` processes; each builds its DistributedContext (ranks as a
launcher would give them: ``local_size`` workers per "machine", all on loopback) and calls
``fn(dist, *args)``. The results come back in rank order; a rank that raised gives a
:class:`RankError`, one that died without a word gives ``RankError("exit", code)``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.cluster import free_port_run

SECRET = "test-allocation-token"


@dataclass(frozen=True)
class RankError:
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def _main(fn: Callable, rank: int, size: int, local_size: int, port: int, args: tuple, env: dict,
          results: Any, build: bool) -> None:
    os.environ.update({k: str(v) for k, v in env.items()})
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank % local_size),
                       "LOCAL_WORLD_SIZE": str(local_size), "GROUP_RANK": str(rank // local_size),
                       "GROUP_WORLD_SIZE": str(size // local_size), "DET_CHIEF_IP": "127.0.0.1",
                       "DET_DIST_PORTS": f"{port},{port + 1}", "DET_DIST_SECRET": SECRET})
    from controlplane.core import DistributedContext

    dist = None
    try:
        if build:
            dist = DistributedContext(rank=rank, size=size, local_rank=rank % local_size, local_size=local_size,
                                      cross_rank=rank // local_size, cross_size=size // local_size,
                                      chief_ip="127.0.0.1", pub_port=port, secret=SECRET)
        value = fn(dist, *args)
        results.put((rank, None, value))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        results.put((rank, type(e).__name__, str(e)))
    finally:
        if dist is not None:
            dist.close()


def run_ranks(fn: Callable, size: int, *args: Any, local_size: int | None = None, env: dict | None = None,
              build: bool = True, timeout: float = 120) -> list:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port_run(2)  # DET_DIST_PORTS: port and port + 1
    procs = [ctx.Process(target=_main, args=(fn, rank, size, local_size or size, port, args, env or {}, results,
                                             build), daemon=True)
             for rank in range(size)]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < size and time.monotonic() < deadline:
            try:
                rank, kind, value = results.get(timeout=0.5)
                out[rank] = value if kind is None else RankError(kind, value)
            except queue.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    for rank, p in enumerate(procs):
        if rank not in out:
            out[rank] = RankError("exit", str(p.exitcode))
    return [out[r] for r in range(size)]


def ok(results: list) -> list:
    """The results, after checking that no rank failed."""
    failed = [f"rank {r}: {v}" for r, v in enumerate(results) if isinstance(v, RankError)]
    assert not failed, "\n".join(failed)
    return results
