"""A tiny in-thread HTTP master speaking the JSON shapes the CLI relies on.

It implements only what the CLI tests touch, records every request, and streams trial logs
as chunked NDJSON like the real master, so the CLI is tested without starting det-master.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

try:
    from tests.controlplane.cli.fake_models import FakeRegistry
except ModuleNotFoundError:  # run as a script (`python fake_master.py`) by the deploy tests
    from fake_models import FakeRegistry  # type: ignore[no-redef]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


def experiment(exp_id: int, state: str = "STATE_ACTIVE", username: str = "determined") -> dict:
    return {
        "id": exp_id, "name": f"exp-{exp_id}", "state": state, "archived": False,
        "config": {"name": f"exp-{exp_id}", "searcher": {"name": "single", "metric": "loss",
                                                          "smaller_is_better": True}},
        "originalConfig": "", "jobId": f"job-{exp_id}", "numTrials": 1, "trialIds": [exp_id * 10],
        "projectId": 1, "projectOwnerId": 1, "searcherType": "single",
        "startTime": "2025-03-20T12:00:00Z", "endTime": None, "username": username, "progress": 0.5,
        "resourcePool": "default",
    }


def pool(name: str, scheduler: str = "SCHEDULER_TYPE_PRIORITY", *, compute: bool = False, aux: bool = False,
         agents: int = 1, available: int = 4, used: int = 0) -> dict:
    return {"name": name, "description": f"{name} pool", "type": "RESOURCE_POOL_TYPE_STATIC",
            "schedulerType": scheduler, "schedulerFittingPolicy": "FITTING_POLICY_BEST",
            "defaultComputePool": compute, "defaultAuxPool": aux, "numAgents": agents,
            "slotsAvailable": available, "slotsUsed": used, "auxContainersRunning": 0,
            "maxAuxContainersPerAgent": 100, "preemptible": True, "slotType": "TYPE_CUDA"}


def job(job_id: str, exp_id: int, pool_name: str = "default", *, priority: int = 42, weight: float = 1.0,
        state: str = "STATE_QUEUED", allocated: int = 0, requested: int = 1, username: str = "determined") -> dict:
    return {"jobId": job_id, "type": "TYPE_EXPERIMENT", "entityId": str(exp_id), "name": f"exp-{exp_id}",
            "submissionTime": f"2025-03-20T12:00:0{exp_id % 10}Z", "username": username, "userId": 2,
            "resourcePool": pool_name, "isPreemptible": True, "priority": priority, "weight": weight,
            "requestedSlots": requested, "allocatedSlots": allocated, "progress": 0.0, "workspaceId": 1,
            "summary": {"state": state, "jobsAhead": -1}}


def default_pools() -> list[dict]:
    return [pool("default", compute=True, aux=True, agents=2, available=8, used=3),
            pool("fair", "SCHEDULER_TYPE_FAIR_SHARE", agents=1, available=2)]


def default_jobs() -> list[dict]:
    return [job("job-1", 1, state="STATE_SCHEDULED", allocated=2, requested=2, priority=10),
            job("job-2", 2, requested=4),
            job("job-3", 3, priority=50, username="alice"),
            job("job-4", 4, "fair", weight=2.5, requested=2)]


@dataclass
class FakeState:
    passwords: dict[str, str] = field(default_factory=lambda: {"determined": "", "admin": "", "alice": "s3cret"})
    user_ids: dict[str, int] = field(default_factory=lambda: {"admin": 1, "determined": 2, "alice": 3})
    tokens: dict[str, str] = field(default_factory=dict)  # token -> username
    experiments: dict[int, dict] = field(default_factory=lambda: {1: experiment(1, "STATE_COMPLETED"),
                                                                  2: experiment(2)})
    logs: dict[int, list[str]] = field(default_factory=lambda: {10: [f"line {i}\n" for i in range(5)]})
    states_on_poll: list[str] = field(default_factory=list)  # experiment 2 walks through these
    requests: list[Recorded] = field(default_factory=list)
    log_delay_s: float = 0.0
    pools: list[dict] = field(default_factory=default_pools)
    jobs: list[dict] = field(default_factory=default_jobs)  # queue order, all pools
    failures: dict[str, tuple[int, str]] = field(default_factory=dict)  # path -> (status, message) to answer
    job_page_cap: int = 0  # >0: serve at most this many jobs a page (to exercise paging)
    agent_flags: dict[str, dict] = field(default_factory=lambda: {"local-agent-0": {"enabled": True,
                                                                                  "draining": False}})
    next_id: int = 3
    counter: int = 0
    registry: FakeRegistry = field(default_factory=FakeRegistry)
    autoscaler: dict[str, dict] = field(default_factory=dict)  # pool -> its describe answer


def trial(tid: int, exp_id: int) -> dict:
    return {"id": tid, "experimentId": exp_id, "hparams": {"lr": 0.1}, "restarts": 0,
            "startTime": "2025-03-20T12:00:01Z", "state": "STATE_COMPLETED", "totalBatchesProcessed": 300,
            "bestValidation": {"totalBatches": 300, "searcherMetric": 0.25,
                               "metrics": {"avgMetrics": {"loss": 0.25}}},
            "latestCheckpointUuid": "ckpt-uuid-1"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: FakeState

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # ---- plumbing ----
    def _read(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"message": message, "error": {"error": message}})

    def _user(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return self.state.tokens.get(auth[len("Bearer "):]) if auth.startswith("Bearer ") else None

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        body = self._read()
        self.state.requests.append(Recorded(method, url.path, parse_qs(url.query), dict(self.headers), body))
        parts = url.path.strip("/").split("/")
        q = parse_qs(url.query)
        if url.path == "/info":
            return self._send(200, {"version": "0.1.0", "master_id": "m", "cluster_id": "c"})
        if url.path == "/api/v1/auth/login" and method == "POST":
            req = json.loads(body)
            if self.state.passwords.get(req["username"]) != req["password"]:
                return self._error(401, "invalid credentials")
            self.state.counter += 1
            token = f"tok-{req['username']}-{self.state.counter}"
            self.state.tokens[token] = req["username"]
            return self._send(200, {"token": token, "user": {
                "username": req["username"], "admin": False, "active": True,
                "id": self.state.user_ids[req["username"]]}})
        user = self._user()
        if user is None:
            return self._error(401, "unauthenticated")
        if url.path in self.state.failures:
            return self._error(*self.state.failures[url.path])
        if url.path == "/api/v1/auth/logout":
            self.state.tokens = {t: u for t, u in self.state.tokens.items() if u != user}
            return self._send(200, {})
        if url.path == "/api/v1/me":
            return self._send(200, {"user": {"id": self.state.user_ids[user], "username": user,
                                             "admin": False, "active": True}})
        if url.path == "/api/v1/users":
            name = q.get("name", [None])[0]
            users = [{"id": i, "username": u} for u, i in self.state.user_ids.items() if name in (None, u)]
            return self._send(200, {"users": users})
        if parts[:3] == ["api", "v1", "users"] and parts[-1] == "password":
            return self._send(200, {})
        if url.path == "/api/v1/experiments" and method == "GET":
            exps = list(self.state.experiments.values())
            if "users" in q:
                exps = [e for e in exps if e["username"] in q["users"]]
            offset, limit = int(q.get("offset", ["0"])[0]), int(q.get("limit", ["0"])[0])
            page = exps[offset:offset + limit] if limit else exps[offset:]
            return self._send(200, {"experiments": page, "pagination": {
                "offset": offset, "limit": limit, "startIndex": offset, "endIndex": offset + len(page),
                "total": len(exps)}})
        if url.path == "/api/v1/experiments" and method == "POST":
            req = json.loads(body)
            exp_id = self.state.next_id
            self.state.next_id += 1
            self.state.experiments[exp_id] = experiment(exp_id, "STATE_ACTIVE" if req["activate"] else "STATE_PAUSED")
            return self._send(200, {"experiment": self.state.experiments[exp_id], "config": {}, "warnings": []})
        if parts[:3] == ["api", "v1", "experiments"] and len(parts) >= 4:
            try:
                exp_id = int(parts[3])
            except ValueError:
                return self._error(400, "id: must be an integer")
            exp = self.state.experiments.get(exp_id)
            if exp is None:
                return self._error(404, f"experiment {exp_id} not found")
            if len(parts) == 4 and method == "PATCH":
                return self._patch_experiment(exp, json.loads(body or b"{}"))
            if len(parts) == 4:
                if exp_id == 2 and self.state.states_on_poll:
                    exp["state"] = self.state.states_on_poll.pop(0)
                return self._send(200, {"experiment": exp, "config": exp["config"]})
            if parts[4] == "trials":
                trials = [trial(t, exp_id) for t in exp["trialIds"]]
                return self._send(200, {"trials": trials, "pagination": {
                    "offset": 0, "limit": 0, "startIndex": 0, "endIndex": len(trials), "total": len(trials)}})
            if parts[4] in ("pause", "activate", "kill") and method == "POST":
                if body:
                    return self._error(400, "expected no body")
                exp["state"] = {"pause": "STATE_PAUSED", "activate": "STATE_ACTIVE",
                                "kill": "STATE_CANCELED"}[parts[4]]
                return self._send(200, {})
        if parts[:3] == ["api", "v1", "trials"] and len(parts) >= 4:
            tid = int(parts[3])
            if tid not in (10, 20, 30):
                return self._error(404, f"trial {tid} not found")
            if len(parts) == 4:
                return self._send(200, {"trial": trial(tid, tid // 10)})
            if parts[4] == "metrics":
                group = q.get("group", [""])[0]
                values = [0.9, 0.5, 0.4, 0.25] if group == "validation" else [1.2, 0.8]
                key = "loss" if group == "validation" else "train_loss"
                rows = [{"group": group, "stepsCompleted": 100 * (i + 1), "trialRunId": 1,
                         "reportTime": "2025-03-20T12:00:00Z", "metrics": {key: v}} for i, v in enumerate(values)]
                return self._send(200, {"metrics": rows})
            if parts[4] == "checkpoints":
                return self._send(200, {"checkpoints": [
                    {"uuid": "ckpt-uuid-1", "state": "STATE_COMPLETED", "metadata": {"steps_completed": 300},
                     "resources": {"model.pt": "2048"}, "reportTime": "2025-03-20T12:00:00Z", "training": {}}],
                    "pagination": {"offset": 0, "limit": 0, "startIndex": 0, "endIndex": 1, "total": 1}})
            if parts[4] == "logs":
                return self._stream_logs(tid, q)
        if parts[:3] == ["api", "v1", "models"]:
            status, answer = self.state.registry.handle(method, parts[3:], q, body, user)
            return self._error(status, answer["message"]) if status >= 300 else self._send(status, answer)
        if parts[:3] == ["api", "v1", "resource-pools"] and parts[4:] == ["autoscaler"] and method == "GET":
            found = self.state.autoscaler.get(parts[3])
            return self._send(200, found) if found else self._error(404, f"resource pool {parts[3]} not found")
        if url.path == "/api/v1/resource-pools" and method == "GET":
            pools = self.state.pools
            return self._send(200, {"resourcePools": pools, "pagination": {
                "offset": 0, "limit": 0, "startIndex": 0, "endIndex": len(pools), "total": len(pools)}})
        if url.path == "/api/v1/job-queues-v2" and method == "GET":
            return self._jobs_v2(q)
        if url.path == "/api/v1/job-queues" and method == "POST":
            return self._update_jobs(json.loads(body or b"{}"))
        if parts[:3] == ["api", "v1", "agents"] and len(parts) == 5 and method == "POST" \
                and parts[4] in ("enable", "disable"):
            flags = self.state.agent_flags.get(parts[3])
            if flags is None:
                return self._error(404, f"agent {parts[3]} not found")
            drain = bool(json.loads(body).get("drain")) if body else False
            flags.update(enabled=parts[4] == "enable", draining=parts[4] == "disable" and drain)
            return self._send(200, {"agent": {"id": parts[3], **flags}})
        if url.path == "/api/v1/agents":
            return self._send(200, {"agents": [
                {"id": "local-agent-0", "connected": True, "registeredTime": "2025-03-20T12:00:00Z",
                 "resourcePools": ["default"], "enabled": True, "draining": False, "addresses": ["127.0.0.1"],
                 "slotStats": {"typeStats": {}, "brandStats": {}}, "instanceType": "g5.xlarge",
                 "slots": {"0": {"id": "0", "enabled": True, "draining": False, "container": None,
                                 "device": {"id": 0, "brand": "cpu", "type": "TYPE_CPU"}},
                           "1": {"id": "1", "enabled": True, "draining": False,
                                 "container": {"id": "alloc-1", "state": "STATE_RUNNING"},
                                 "device": {"id": 1, "brand": "cpu", "type": "TYPE_CPU"}}}}]})
        return self._error(404, f"no route {method} {url.path}")

    # ---- jobs, pools, experiment patches (scheduler rules as the master enforces them) ----
    def _pool(self, name: Any) -> dict | None:
        return next((p for p in self.state.pools if p["name"] == name), None)

    def _scheduler_error(self, pool_name: str, key: str, value: Any, what: str) -> str | None:
        pool_ = self._pool(pool_name) or {}
        fair = pool_.get("schedulerType") == "SCHEDULER_TYPE_FAIR_SHARE"
        if key == "priority":
            if fair:
                return (f"{what}: priority applies only under the priority scheduler; pool "
                        f"{pool_name!r} uses fair_share (set a weight instead)")
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 99:
                return f"{what}: priority must be an integer from 1 to 99, got {value!r}"
        if key == "weight":
            if not fair:
                return (f"{what}: weight applies only under the fair_share scheduler; pool "
                        f"{pool_name!r} uses priority (set a priority instead)")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                return f"{what}: weight must be a number > 0, got {value!r}"
        return None

    def _jobs_v2(self, q: dict[str, list[str]]) -> None:
        name = q.get("resourcePool", [None])[0]
        if name is not None and self._pool(name) is None:
            return self._error(404, f"pool {name!r} not found")
        jobs = [j for j in self.state.jobs if name in (None, j["resourcePool"])]
        out = [{"full": {**j, "summary": {**j["summary"], "jobsAhead": i}}} for i, j in enumerate(jobs)]
        if q.get("orderBy", [""])[0] == "ORDER_BY_DESC":
            out.reverse()
        offset, limit = int(q.get("offset", ["0"])[0]), int(q.get("limit", ["0"])[0])
        if self.state.job_page_cap:
            limit = min(limit or self.state.job_page_cap, self.state.job_page_cap)
        page = out[offset:offset + limit] if limit else out[offset:]
        return self._send(200, {"jobs": page, "pagination": {
            "offset": offset, "limit": limit, "startIndex": offset, "endIndex": offset + len(page),
            "total": len(out)}})

    def _update_jobs(self, req: dict) -> None:
        """All or nothing, as the master: the changes are made on a copy kept only if all pass."""
        updates = req.get("updates")
        if not isinstance(updates, list) or not updates:
            return self._error(400, "updates: required (a list of job changes)")
        kept = self.state.jobs
        self.state.jobs = copy.deepcopy(kept)
        refused = self._update_jobs_in_order(updates)
        if refused is not None:
            self.state.jobs = kept
            return self._error(*refused)
        return self._send(200, {})

    def _update_jobs_in_order(self, updates: list) -> tuple[int, str] | None:
        by_id = {j["jobId"]: j for j in self.state.jobs}
        for i, u in enumerate(updates):
            what = f"updates[{i}]"
            j = by_id.get(u.get("jobId"))
            if j is None:
                return (404, f"{what}: job {u.get('jobId')!r} not found")
            set_keys = [k for k in ("priority", "weight", "resourcePool", "aheadOf", "behindOf")
                        if u.get(k) is not None]
            if len(set_keys) != 1:
                return (400, f"{what}: exactly one change per update, got {set_keys}")
            key = set_keys[0]
            value = u[key]
            problem = self._scheduler_error(j["resourcePool"], key, value, f"{what}.{key}")
            if problem:
                return 400, problem
            if key in ("priority", "weight"):
                j[key] = value
            elif key == "resourcePool":
                if self._pool(value) is None:
                    return (400, f"{what}.resourcePool: pool {value!r} not found")
                j["resourcePool"] = value
            else:
                other = by_id.get(value)
                if other is None:
                    return (404, f"{what}.{key}: job {value!r} not found")
                self.state.jobs.remove(j)
                at = self.state.jobs.index(other)
                self.state.jobs.insert(at if key == "aheadOf" else at + 1, j)
        return None

    def _patch_experiment(self, exp: dict, req: dict) -> None:
        resources = req.get("resources") or {}
        for key in ("priority", "weight"):
            if resources.get(key) is not None:
                # the real master stores an experiment's weight under either scheduler (Determined's)
                pool = "fair" if key == "weight" else exp["resourcePool"]
                problem = self._scheduler_error(pool, key, resources[key], f"resources.{key}")
                if problem:
                    return self._error(400, problem)
                exp.setdefault("config", {}).setdefault("resources", {})[key] = resources[key]
        if "maxSlots" in resources:
            value = resources["maxSlots"]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                return self._error(400, f"resources.maxSlots: must be a positive integer, got {value!r}")
            exp.setdefault("config", {}).setdefault("resources", {})["max_slots"] = value
        return self._send(200, {"experiment": exp})

    def _stream_logs(self, tid: int, q: dict[str, list[str]]) -> None:
        import time

        lines = list(enumerate(self.state.logs.get(tid, []), start=1))
        limit = int(q.get("limit", ["0"])[0])
        if q.get("orderBy", [""])[0] == "ORDER_BY_DESC":
            lines.reverse()
        if limit:
            lines = lines[:limit]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, text in lines:
            entry = {"result": {"id": str(i), "trialId": tid, "timestamp": "2025-03-20T12:00:00Z",
                                "level": "LOG_LEVEL_INFO", "message": f"[t] || {text}", "log": text}}
            data = json.dumps(entry).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            if self.state.log_delay_s:
                time.sleep(self.state.log_delay_s)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class FakeMaster:
    def __init__(self, port: int = 0) -> None:
        self.state = FakeState()
        handler = type("BoundHandler", (Handler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self) -> FakeMaster:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def calls(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        return [r for r in self.state.requests
                if (method is None or r.method == method) and (path is None or r.path == path)]


def serve_from_master_yaml(argv: list[str]) -> None:
    """Stand-in for `det-master --config FILE` in the deploy tests: serve on the config's port."""
    import sys

    import yaml

    config = yaml.safe_load(open(argv[argv.index("--config") + 1]))
    print(f"fake master on port {config['port']}", flush=True)
    server = FakeMaster(int(config["port"])).server
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    import sys

    serve_from_master_yaml(sys.argv)
