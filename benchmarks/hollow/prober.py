"""One client reading the API at a steady rate while the cluster churns, as a user's UI and CLI do."""

from __future__ import annotations

import asyncio
import random
import time

import httpx

from benchmarks.hollow.figures import Recorder

ENDPOINTS = {
    "experiments": "/api/v1/experiments?limit=50&orderBy=ORDER_BY_DESC",
    "agents": "/api/v1/agents",
    "job_queue": "/api/v1/job-queues-v2?limit=50",
    "trial": "/api/v1/trials/{trial}",
}


async def probe(master_url: str, token: str, rate_per_s: float, trial_ids: list[int], rec: Recorder,
                phase: list[str], stop: asyncio.Event) -> None:
    """Round-robin over ENDPOINTS, one call at a time, ``rate_per_s`` calls a second at most (fewer
    when the master answers slower). Latency per endpoint and phase ("fill", "churn") goes to
    ``rec`` as ``api:<phase>:<name>``; every status class is counted."""
    names = list(ENDPOINTS)
    async with httpx.AsyncClient(base_url=master_url, timeout=300.0,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        i = 0
        while not stop.is_set():
            name = names[i % len(names)]
            i += 1
            if name == "trial" and not trial_ids:
                continue
            path = ENDPOINTS[name].format(trial=random.choice(trial_ids) if trial_ids else 0)
            t0 = time.monotonic()
            try:
                r = await client.get(path)
            except httpx.HTTPError as exc:
                rec.count("api_errors")
                rec.count(f"api_error:{type(exc).__name__}")
            else:
                rec.time(f"api:{phase[0]}:{name}", time.monotonic() - t0)
                rec.count(f"http_{r.status_code // 100}xx")
                if r.status_code >= 400:
                    rec.count(f"api_status_{name}_{r.status_code}")
            with_rest = 1.0 / rate_per_s - (time.monotonic() - t0)
            if with_rest > 0:
                try:
                    await asyncio.wait_for(stop.wait(), with_rest)
                except TimeoutError:
                    pass
