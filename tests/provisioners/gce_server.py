"""A tiny Compute Engine REST endpoint for tests (no usable GCE emulator exists).

Serves just what the real google-cloud-compute client calls: instances insert/get/list/
delete/stop, the aggregated list, and zone operations get/wait (always DONE). Label filters of
the form `labels.k = "v"` joined by AND are honoured, and lists are paginated. Faults are
scripted per zone: an operation error (how GCE reports stockouts) or an HTTP error.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlparse

_BASE = "/compute/v1/projects/(?P<p>[^/]+)"
_ROUTES = [
    ("POST", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/instances$"), "insert"),
    ("GET", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/instances$"), "list"),
    ("GET", re.compile(_BASE + r"/aggregated/instances$"), "aggregated"),
    ("GET", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/instances/(?P<n>[^/]+)$"), "get"),
    ("DELETE", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/instances/(?P<n>[^/]+)$"), "delete"),
    ("POST", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/instances/(?P<n>[^/]+)/stop$"), "stop"),
    ("GET", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/operations/(?P<o>[^/]+)$"), "op"),
    ("POST", re.compile(_BASE + r"/zones/(?P<z>[^/]+)/operations/(?P<o>[^/]+)/wait$"), "op"),
]
_LABEL = re.compile(r'labels\.([\w-]+)\s*=\s*"?([^")\s]+)"?')


@dataclass
class Fault:
    """One scripted insert failure: `op_code` -> failed operation, else an HTTP error."""

    status: int
    message: str
    op_code: str | None = None  # e.g. "ZONE_RESOURCE_POOL_EXHAUSTED"
    reason: str | None = None  # e.g. "quotaExceeded" for HTTP errors


@dataclass
class GceState:
    instances: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    insert_faults: dict[str, list[Fault]] = field(default_factory=dict)  # zone -> queued faults
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) log
    page_size: int = 500
    hold_operations: bool = False  # operations stay RUNNING (a slow insert)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    state: GceState
    ids = itertools.count(1000000000000)

    def log_message(self, *_: Any) -> None:  # keep pytest output clean
        return

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, reason: str = "invalid") -> None:
        self._send(status, {"error": {"code": status, "message": message,
                                      "errors": [{"reason": reason, "message": message}]}})

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        self.state.requests.append((method, url.path))
        for m, rx, name in _ROUTES:
            match = rx.match(url.path)
            if m == method and match:
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                with self.state.lock:
                    getattr(self, f"_h_{name}")(match.groupdict(), query)
                return
        self._error(404, f"no route {method} {url.path}", "notFound")

    do_GET = lambda self: self._dispatch("GET")  # noqa: E731
    do_POST = lambda self: self._dispatch("POST")  # noqa: E731
    do_DELETE = lambda self: self._dispatch("DELETE")  # noqa: E731

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def _op(self, p: str, z: str, target: str, kind: str, fault: Fault | None = None) -> dict[str, Any]:
        name = f"operation-{next(self.ids)}"
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": str(next(self.ids)), "name": name, "status": "RUNNING",
            "operationType": kind, "zone": f"projects/{p}/zones/{z}", "targetLink": target,
        }
        if fault is not None:
            op.update(
                httpErrorStatusCode=fault.status, httpErrorMessage=fault.message,
                error={"errors": [{"code": fault.op_code, "message": fault.message}]},
            )
        self.state.operations[name] = op
        return op

    def _h_insert(self, g: dict[str, str], _q: dict[str, str]) -> None:
        p, z, body = g["p"], g["z"], self._body()
        key = (p, z, body["name"])
        if key in self.state.instances:
            return self._error(409, f"The resource '{body['name']}' already exists", "alreadyExists")
        queued = self.state.insert_faults.get(z) or []
        fault = queued.pop(0) if queued else None
        if fault is not None and fault.op_code is None:
            return self._error(fault.status, fault.message, fault.reason or "invalid")
        link = f"https://compute.googleapis.com/compute/v1/projects/{p}/zones/{z}/instances/{body['name']}"
        if fault is None:
            self.state.instances[key] = {
                **body, "kind": "compute#instance", "id": str(next(self.ids)), "status": "RUNNING",
                "zone": f"https://compute.googleapis.com/compute/v1/projects/{p}/zones/{z}",
                "creationTimestamp": datetime.now(UTC).isoformat(), "selfLink": link,
            }
        self._send(200, self._op(p, z, link, "insert", fault))

    def _matching(self, p: str, zone: str | None, flt: str) -> list[dict[str, Any]]:
        want = dict(_LABEL.findall(flt))
        return [
            inst for (ip, iz, _), inst in sorted(self.state.instances.items())
            if ip == p and (zone is None or iz == zone)
            and all(inst.get("labels", {}).get(k) == v for k, v in want.items())
        ]

    def _page(self, items: list[Any], q: dict[str, str]) -> tuple[list[Any], dict[str, str]]:
        size = min(int(q.get("maxResults", self.state.page_size)), self.state.page_size)
        start = int(q.get("pageToken") or 0)
        more = {"nextPageToken": str(start + size)} if start + size < len(items) else {}
        return items[start : start + size], more

    def _h_list(self, g: dict[str, str], q: dict[str, str]) -> None:
        page, more = self._page(self._matching(g["p"], g["z"], q.get("filter", "")), q)
        self._send(200, {"kind": "compute#instanceList", "items": page, **more})

    def _h_aggregated(self, g: dict[str, str], q: dict[str, str]) -> None:
        page, more = self._page(self._matching(g["p"], None, q.get("filter", "")), q)
        items: dict[str, Any] = {}
        for inst in page:
            items.setdefault(f"zones/{inst['zone'].rsplit('/', 1)[-1]}", {"instances": []})["instances"].append(inst)
        self._send(200, {"kind": "compute#instanceAggregatedList", "items": items, **more})

    def _h_get(self, g: dict[str, str], _q: dict[str, str]) -> None:
        inst = self.state.instances.get((g["p"], g["z"], g["n"]))
        if inst is None:
            return self._error(404, f"The resource '{g['n']}' was not found", "notFound")
        self._send(200, inst)

    def _h_delete(self, g: dict[str, str], _q: dict[str, str]) -> None:
        inst = self.state.instances.pop((g["p"], g["z"], g["n"]), None)
        if inst is None:
            return self._error(404, f"The resource '{g['n']}' was not found", "notFound")
        self._send(200, self._op(g["p"], g["z"], inst["selfLink"], "delete"))

    def _h_stop(self, g: dict[str, str], _q: dict[str, str]) -> None:
        inst = self.state.instances.get((g["p"], g["z"], g["n"]))
        if inst is None:
            return self._error(404, f"The resource '{g['n']}' was not found", "notFound")
        inst["status"] = "TERMINATED"  # what GCE calls a stopped instance
        self._send(200, self._op(g["p"], g["z"], inst["selfLink"], "stop"))

    def _h_op(self, g: dict[str, str], _q: dict[str, str]) -> None:
        op = self.state.operations.get(g["o"])
        if op is None:
            return self._error(404, f"operation {g['o']} not found", "notFound")
        if self.state.hold_operations:
            time.sleep(0.05)  # the real wait long-polls; don't let the client spin
        else:
            op["status"] = "DONE"
        self._send(200, op)


class GceTestServer:
    """`with GceTestServer() as srv:` -> srv.url, srv.state; stopped on exit."""

    state_class: type[GceState] = GceState  # a subclass with more routes swaps these two
    handler_class: type[BaseHTTPRequestHandler] = _Handler

    def __init__(self) -> None:
        self.state = self.state_class()
        handler = type("Handler", (self.handler_class,), {"state": self.state})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # A short poll: shutdown() waits up to one (0.5 s by default), at every test's end.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
