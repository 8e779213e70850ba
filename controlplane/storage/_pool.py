"""Run one call per item on a bounded thread pool, all-or-nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any


def run_all(fn: Callable[..., Any], items: Sequence[tuple[Any, ...]], max_workers: int) -> None:
    """Calls ``fn(*item)`` for every item on up to ``max_workers`` threads.

    Returns once all succeeded. On the first failure the items not yet started are dropped, the
    running ones are let finish (a thread cannot be stopped mid-request), and that failure is raised.
    """
    if not items:
        return
    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items))), thread_name_prefix="ckpt-io")
    try:
        futures = [pool.submit(fn, *item) for item in items]
        done, _pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
