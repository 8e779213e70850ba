"""``*.localhost`` for Python clients: browsers resolve every ``<name>.localhost`` to loopback (RFC
6761), which is where the task proxy serves each task on a host of its own; this machine's resolver
does not. ``LoopbackNames`` is an httpx transport that connects such hosts to 127.0.0.1 and keeps
the ``Host`` header (and so cookies and redirects) as the browser would have it."""

from __future__ import annotations

import httpx


class LoopbackNames(httpx.HTTPTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host.endswith(".localhost"):
            request = httpx.Request(request.method, request.url.copy_with(host="127.0.0.1"), headers=request.headers,
                                    stream=request.stream, extensions=request.extensions)
        return super().handle_request(request)
