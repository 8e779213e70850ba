"""HTTP to the master with the allocation token, so every core call fails the same clear way.

Transient failures (connection errors, timeouts, any 5xx) are retried with backoff for up to
``max_wait_s`` (long enough to ride out a master restart); any other status >= 400 raises
:class:`MasterError` naming the method, URL, status and the master's message. Each background
thread gets its own :meth:`Session.clone` because ``requests.Session`` is not thread-safe.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlparse

import requests

log = logging.getLogger("controlplane.core")

TOKEN_HEADER = "Grpc-Metadata-x-allocation-token"


class MasterError(RuntimeError):
    """A master call failed; ``status`` is 0 when the master could not be reached at all."""

    def __init__(self, method: str, url: str, status: int, message: str) -> None:
        self.method = method
        self.url = url
        self.status = status
        self.message = message
        super().__init__(f"{method} {url} failed with {status or 'no answer'}: {message}")

    @property
    def transient(self) -> bool:
        """Worth retrying: unreachable or a server-side (5xx) failure; a 4xx is the client's fault."""
        return self.status == 0 or self.status >= 500


def canonical_master_url(url: str) -> str:
    """Determined's rule (reference §0): no scheme → http://, no port → :8080."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
        parsed = urlparse(url)
        if parsed.port is None:
            url = f"{parsed.scheme}://{parsed.hostname}:8080{parsed.path}"
    return url


def _message(r: requests.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip()[:500] or r.reason
    if isinstance(body, dict):
        err = body.get("error")
        if not isinstance(err, dict):
            err = {}
        return str(body.get("message") or err.get("message") or err.get("error") or body)[:500]
    return str(body)[:500]


class Session:
    def __init__(self, master_url: str, token: str, *, max_wait_s: float = 600.0) -> None:
        self.master = canonical_master_url(master_url)
        self.token = token
        self.max_wait_s = max_wait_s
        self.http = requests.Session()
        self.http.headers[TOKEN_HEADER] = f"Bearer {token}"

    def clone(self) -> Session:
        """A session with its own connection pool, for use by one other thread."""
        return Session(self.master, self.token, max_wait_s=self.max_wait_s)

    def request(self, method: str, path: str, *, json: Any = None, data: str | bytes | None = None,
                params: dict[str, Any] | None = None, timeout: float = 30.0, retry: bool = True) -> requests.Response:
        url = f"{self.master}{path}"
        headers = {"Content-Type": "application/json"} if data is not None else None
        delay, deadline = 0.2, time.monotonic() + self.max_wait_s
        while True:
            try:
                r = self.http.request(method, url, json=json, data=data, params=params, headers=headers,
                                      timeout=timeout)
                if r.status_code < 500:
                    break
                error = MasterError(method, url, r.status_code, _message(r))
            except (requests.ConnectionError, requests.Timeout) as e:
                error = MasterError(method, url, 0, f"master unreachable: {e}")
            if not retry or time.monotonic() + delay > deadline:
                raise error
            log.warning("%s; retrying in %.1fs", error, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
        if r.status_code >= 400:
            raise MasterError(method, url, r.status_code, _message(r))
        return r

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> requests.Response:
        return self.request("POST", path, **kw)

    def patch(self, path: str, **kw: Any) -> requests.Response:
        return self.request("PATCH", path, **kw)

    def close(self) -> None:
        self.http.close()
