"""No list takes a negative ``offset`` or ``limit``: every route of the served schema that pages is asked
with -1 and answers 400 naming the parameter, before any handler runs."""

from __future__ import annotations

import json
import re

from tests.controlplane.master.conftest import one_running_trial
from tests.controlplane.master.test_authorization import bearer, login, task_headers

# GET /api/v1/master/logs is a tail of the master's log ring, not a page of a list: a negative offset is
# "the last -offset lines", what Determined's `det master logs --tail N` sends.
TAIL_OFFSETS = {("GET", "/api/v1/master/logs")}


async def test_every_paged_route_refuses_a_negative_offset_or_limit_naming_it(api):
    headers = bearer(await login(api, "admin"))
    schema = api._transport.app.openapi_schema.to_schema()
    asked, wrong = [], []
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            names = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"} & {"offset", "limit"}
            if path.endswith("/trials/{trial_id}/logs"):
                names.add("offset")  # Determined's TrialLogs has no offset: one sent is refused, not ignored
            url = re.sub(r"\{\w+\}", "1", path)
            for name in sorted(names):
                if name == "offset" and (method.upper(), path) in TAIL_OFFSETS:
                    continue
                asked.append(f"{method.upper()} {path}?{name}=-1")
                r = await api.request(method.upper(), url, params={name: "-1"}, headers=headers)
                message = r.json().get("message", "") if r.headers.get("content-type", "").startswith(
                    "application/json") else r.text
                if r.status_code != 400 or not message.startswith(name):
                    wrong.append(f"{asked[-1]}: {r.status_code} {message[:120]}")
    assert len(asked) > 20, asked
    assert any("/api/v1/models?" in a for a in asked) and any("/trials/{trial_id}/logs?offset" in a for a in asked)
    assert not wrong, "\n".join(wrong)


async def test_trial_logs_skip_offset_lines_in_the_order_asked(api):
    _, start, trial_id = await one_running_trial(api)
    r = await api.post("/api/v1/task/logs", headers=task_headers(start.session_token), json={"logs": [
        {"taskId": start.task_id, "allocationId": start.allocation_id, "log": f"line {i}\n", "stdtype": "stdout",
         "source": "task"} for i in range(5)]})
    assert r.status_code == 200, r.text

    async def lines(**params: str) -> list[str]:
        r = await api.get(f"/api/v1/trials/{trial_id}/logs", params=params)
        assert r.status_code == 200, r.text
        return [json.loads(line)["result"]["log"].strip() for line in r.text.splitlines()]

    assert await lines(offset="2") == ["line 2", "line 3", "line 4"]
    assert await lines(offset="1", limit="2") == ["line 1", "line 2"]
    assert await lines(offset="1", orderBy="ORDER_BY_DESC") == ["line 3", "line 2", "line 1", "line 0"]
    assert await lines(offset="9") == []
