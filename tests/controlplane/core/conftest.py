"""A tiny recording fake master (http.server on loopback) and an on-cluster task environment.

The core API is tested against the wire, not against mocks: every request is recorded with its
headers and JSON body so tests can assert paths, shapes, auth and ordering.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

TOKEN = "tok-123"
ALLOC = "1.abc.1"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


class FakeMaster:
    """Answers like the master; ``fail[path] = [status, ...]`` makes the next calls to a path fail."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.preempt = threading.Event()
        self.fail: dict[str, list[int]] = {}
        self.checkpoints: dict[str, dict] = {}
        self.best_metric: float | None = None
        self.metrics_delay_s = 0.0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def calls(self, method: str | None = None, path_contains: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if (method is None or r.method == method) and path_contains in r.path]

    def checkpoint_reports(self, state: str = "STATE_COMPLETED") -> list[Recorded]:
        """POST /api/v1/checkpoints of one state (an upload is announced as STATE_ACTIVE first)."""
        return [r for r in self.calls("POST", "/api/v1/checkpoints") if r.body["state"] == state]

    def metric_reports(self) -> list[dict]:
        return [rep for r in self.calls("POST", "/metrics/batch") for rep in r.body["reports"]]

    def close(self) -> None:
        self.preempt.set()
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        failures = self.fail.get(path)
        if failures:
            return failures.pop(0), {"message": "injected failure", "error": {"error": "injected failure"}}
        if path.endswith("/signals/preemption"):
            timeout = float(query.get("timeout_seconds", ["0"])[0])
            self.preempt.wait(min(timeout, 0.3))  # long-poll, kept short for tests
            return 200, {"preempt": self.preempt.is_set()}
        if path.endswith("/metrics/batch"):
            time.sleep(self.metrics_delay_s)
            return 200, {}
        if method == "POST" and path == "/api/v1/checkpoints":
            self.checkpoints[body["uuid"]] = body
            return 200, {}
        if method == "GET" and path.startswith("/api/v1/checkpoints/"):
            ckpt = self.checkpoints.get(path.rsplit("/", 1)[1])
            if ckpt is None:
                return 404, {"message": "not found", "error": {"error": "not found"}}
            return 200, {"checkpoint": {"uuid": ckpt["uuid"], "metadata": ckpt["metadata"],
                                        **({"digests": ckpt["digests"]} if "digests" in ckpt else {})}}
        if path.endswith("/best_searcher_validation_metric"):
            if self.best_metric is None:
                return 404, {"message": "none yet", "error": {"error": "none yet"}}
            return 200, {"metric": self.best_metric}
        if path == "/api/v1/runs/start":
            return 200, {"storageId": None}
        return 200, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        master = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = parse_qs(url.query)
                with master.lock:
                    master.requests.append(Recorded(self.command, url.path, query, dict(self.headers), body))
                status, answer = master._answer(self.command, url.path, query, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _serve

        return Handler


@pytest.fixture
def fake_master():
    master = FakeMaster()
    yield master
    master.close()


def write_info(info_dir: Path, master_url: str, config: dict, *, latest_checkpoint: str | None = None,
               hparams: dict | None = None, steps_completed: int = 0) -> None:
    info_dir.mkdir(parents=True, exist_ok=True)
    (info_dir / "cluster.json").write_text(json.dumps({
        "master_url": master_url, "cluster_id": "c-1", "agent_id": "agent-1", "slot_ids": [],
        "task_id": "1.abc", "allocation_id": ALLOC, "session_token": TOKEN, "task_type": "TRIAL",
        "master_cert_name": None, "master_cert_file": None, "latest_checkpoint": latest_checkpoint}))
    (info_dir / "trial.json").write_text(json.dumps({
        "trial_id": 7, "experiment_id": 3, "trial_seed": 42, "hparams": hparams or {"lr": 0.1},
        "config": config, "steps_completed": steps_completed, "trial_run_id": 2, "debug": False,
        "inter_node_network_interface": None}))
    (info_dir / "rendezvous.json").write_text(json.dumps({
        "container_addrs": ["127.0.0.1"], "container_rank": 0, "container_slot_counts": [0]}))


def experiment_config(storage_root: Path, max_length: Any = None) -> dict:
    if max_length is None:
        max_length = {"batches": 100}
    return {"checkpoint_storage": {"type": "shared_fs", "host_path": str(storage_root), "storage_path": "ckpts",
                                   "save_trial_latest": 1},
            "searcher": {"name": "single", "metric": "validation_loss", "max_length": max_length}}


@pytest.fixture
def on_cluster(tmp_path, fake_master, monkeypatch):
    """DET_INFO_DIR with cluster.json/trial.json pointing at the fake master; returns the storage root."""
    for var in ("DET_MASTER", "DET_SESSION_TOKEN", "DET_ALLOCATION_ID", "DET_TRIAL_ID"):
        monkeypatch.delenv(var, raising=False)
    storage_root = tmp_path / "shared"
    write_info(tmp_path / "info", fake_master.url, experiment_config(storage_root))
    monkeypatch.setenv("DET_INFO_DIR", str(tmp_path / "info"))
    return storage_root
