"""A log line longer than the bound is stored as its first part and a marker, whichever way it came."""

from __future__ import annotations

import json

import pytest

from controlplane.common.log_lines import MAX_LINE_BYTES, marker
from controlplane.master.services.logs import ingest_agent_logs
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import one_running_trial
from tests.controlplane.master.test_authorization import task_headers

pytestmark = pytest.mark.both_databases  # the log ingest path: text columns and their limits differ


async def test_a_line_past_the_bound_is_stored_as_its_first_part_and_how_long_it_was(api):
    _, start, trial_id = await one_running_trial(api)
    big = "x" * (3 * 1024 * 1024) + "tail"
    already_cut = "y" * MAX_LINE_BYTES + marker(9_000_000, MAX_LINE_BYTES)  # what the agent ships
    entry = {"taskId": start.task_id, "allocationId": start.allocation_id, "stdtype": "stdout", "source": "task"}
    r = await api.post("/api/v1/task/logs", headers=task_headers(start.session_token), json={"logs": [
        {**entry, "log": big + "\n"}, {**entry, "log": "short\n"}]})
    assert r.status_code == 200, r.text
    await ingest_agent_logs(api.rt, "agent-1", wire.TaskLogs(allocation_id=start.allocation_id, lines=[
        wire.LogLine(timestamp=0.0, message="é" * (MAX_LINE_BYTES // 2 + 100)),
        wire.LogLine(timestamp=0.0, message=already_cut)]))
    r = await api.get(f"/api/v1/trials/{trial_id}/logs")
    assert r.status_code == 200, r.text
    stored = [json.loads(line)["result"]["log"] for line in r.text.splitlines()]
    assert stored == [
        "x" * MAX_LINE_BYTES + f" ... [log line truncated: {len(big)} bytes, kept the first {MAX_LINE_BYTES}]\n",
        "short\n",
        "é" * (MAX_LINE_BYTES // 2) + f" ... [log line truncated: {MAX_LINE_BYTES + 200} bytes, kept the first "
                                     f"{MAX_LINE_BYTES}]\n",
        already_cut + "\n",
    ]
