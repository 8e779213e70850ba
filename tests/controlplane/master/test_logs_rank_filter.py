"""`det trial logs ID --rank N` asks for rankIds=N: the master answers only that worker's lines."""

from __future__ import annotations

import json

import pytest

from controlplane.master.services.logs import ingest_agent_logs
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.test_logs_api import running

pytestmark = pytest.mark.both_databases  # the rank filter is SQL over a JSON column


async def test_rank_ids_keep_only_those_workers_lines(api):
    start = await running(api)
    tid = int(start.env["DET_TRIAL_ID"])
    lines = [wire.LogLine(timestamp=float(i), message=f"[rank={r}] line {i}", rank=r)
             for i, r in enumerate((0, 1, 2, 1))]
    lines.append(wire.LogLine(timestamp=9.0, message="launcher: no rank"))
    await ingest_agent_logs(api.rt, "agent-1", wire.TaskLogs(start.allocation_id, lines))

    async def logs(query: str) -> list[str]:
        r = await api.get(f"/api/v1/trials/{tid}/logs?{query}")
        assert r.status_code == 200, r.text
        return [json.loads(x)["result"]["log"].strip() for x in r.text.splitlines() if x.strip()]

    assert await logs("rankIds=1") == ["[rank=1] line 1", "[rank=1] line 3"]
    assert await logs("rankIds=0&rankIds=2") == ["[rank=0] line 0", "[rank=2] line 2"]
    assert await logs("rankIds=1&orderBy=ORDER_BY_DESC&limit=1") == ["[rank=1] line 3"]
    assert len(await logs("")) == 5
