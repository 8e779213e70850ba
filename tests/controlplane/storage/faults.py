"""Faults injected where the real ones happen: at the HTTP layer under each cloud SDK.

S3: a botocore ``before-send`` hook, raising the same EndpointConnectionError a dead endpoint
gives. GCS: a requests.Session handed to the storage client, failing or answering like the
service would. Neither store knows it is being tested.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import requests


class Outage:
    """The store goes down during an upload and comes back while the cleanup is retrying.

    Every request fails from the ``start_after``-th data write on, until ``recover_after``
    listing requests (the first step of the cleanup) have failed too; then all is well again.
    """

    def __init__(self, start_after: int = 3, recover_after: int = 2) -> None:
        self.start_after = start_after
        self.recover_after = recover_after
        self.writes = 0
        self.failed = 0
        self.failed_listings = 0
        self.down = False
        self.over = False
        self._lock = threading.Lock()

    def fails(self, kind: str) -> bool:
        """Whether a request of ``kind`` ("write", "list" or "other") fails now."""
        with self._lock:
            if kind == "write" and not self.over:
                self.writes += 1
                self.down = self.down or self.writes >= self.start_after
            if not self.down:
                return False
            if kind == "list":
                self.failed_listings += 1
                if self.failed_listings > self.recover_after:
                    self.down, self.over = False, True
                    return False
            self.failed += 1
            return True


def s3_outage_hook(outage: Outage) -> Any:
    """Register with ``client.meta.events.register("before-send.s3", hook)``."""
    from botocore.exceptions import EndpointConnectionError

    def before_send(request: Any, event_name: str, **kwargs: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        kind = "write" if op in ("PutObject", "UploadPart") else "list" if op.startswith("List") else "other"
        if outage.fails(kind):
            raise EndpointConnectionError(endpoint_url=request.url)

    return before_send


def gcs_request_kind(method: str, url: str) -> str:
    if (method == "POST" and "/upload/storage/v1/b/" in url) or (method == "PUT" and "upload_id=" in url):
        return "write"
    if method == "GET" and re.search(r"/storage/v1/b/[^/]+/o(\?|$)", url):
        return "list"
    return "other"


class FaultySession(requests.Session):
    """A transport for ``make_client(http=...)``: ``outage`` drops connections, ``forbidden``
    answers every request with GCS's 403, ``seen`` records (method, url) of every request."""

    def __init__(self, outage: Outage | None = None, forbidden: bool = False) -> None:
        super().__init__()
        self.outage = outage
        self.forbidden = forbidden
        self.seen: list[tuple[str, str]] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:
        self.seen.append((method, url))
        if self.forbidden:
            return _gcs_error(method, url, 403, "caller does not have storage.objects.create access to the bucket")
        if self.outage is not None and self.outage.fails(gcs_request_kind(method, url)):
            raise requests.ConnectionError(f"connection refused: {url} (injected outage)")
        return super().request(method, url, *args, **kwargs)


def _gcs_error(method: str, url: str, status: int, message: str) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.url = url
    response.request = requests.Request(method, url).prepare()
    response.headers["Content-Type"] = "application/json"
    response._content = json.dumps(
        {"error": {"code": status, "message": message, "errors": [{"reason": "forbidden", "message": message}]}}
    ).encode()
    return response
