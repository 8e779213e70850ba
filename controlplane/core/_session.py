"""HTTP to the master with the allocation token; transient failures are retried, never dropped."""

from __future__ import annotations

import logging
import time
from typing import Any

import requests

log = logging.getLogger("controlplane.core")

TOKEN_HEADER = "Grpc-Metadata-x-allocation-token"
RETRY_STATUSES = {502, 503, 504}


class MasterError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"{method} {url} failed with {status}: {message}")


class Session:
    def __init__(self, master_url: str, token: str, *, max_wait_s: float = 600.0) -> None:
        self.master = master_url.rstrip("/")
        self.http = requests.Session()
        self.http.headers[TOKEN_HEADER] = f"Bearer {token}"
        self.max_wait_s = max_wait_s

    def request(self, method: str, path: str, *, json: Any = None, params: dict | None = None,
                timeout: float = 30.0, retry: bool = True) -> requests.Response:
        """Retries connection errors and 502/503/504 with backoff for up to max_wait_s (a master
        restart); any other status >= 400 raises MasterError with the master's message."""
        url = f"{self.master}{path}"
        delay, deadline = 0.2, time.monotonic() + self.max_wait_s
        while True:
            try:
                r = self.http.request(method, url, json=json, params=params, timeout=timeout)
                if r.status_code not in RETRY_STATUSES:
                    break
                problem = f"status {r.status_code}"
            except requests.ConnectionError as e:
                problem = str(e)
            if not retry or time.monotonic() + delay > deadline:
                raise MasterError(method, url, 0, f"master unreachable: {problem}")
            log.warning("%s %s: %s; retrying in %.1fs", method, path, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
        if r.status_code >= 400:
            try:
                message = r.json().get("message") or r.text
            except ValueError:
                message = r.text
            raise MasterError(method, url, r.status_code, message)
        return r

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> requests.Response:
        return self.request("POST", path, **kw)

    def close(self) -> None:
        self.http.close()
