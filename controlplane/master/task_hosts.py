"""One origin per task: where the task proxy serves a task's pages.

A task's pages live at ``<label>.<proxy host>:<proxy port>/proxy/<task id>/...``, so no two tasks
(and never the master) share an origin: a page of one task cannot read another's answers, nor
receive a cookie the proxy set for another. ``<label>`` is ``task_label(task_id)``: the id itself
when it is already a lowercase DNS label (job ids are UUIDs), else ``h-`` and a hash of it.

The proxy host, in order:
- ``proxy_url`` (master.yaml), which may hold a wildcard: ``https://*.tasks.example.com`` puts a
  task at ``https://<label>.tasks.example.com``; without ``*`` the label goes in front of its host.
  It needs a wildcard DNS name (and certificate) pointing at the proxy's listener.
- else the host the caller used to reach the master, on ``proxy_port``: a loopback address or
  ``localhost`` gives ``<label>.localhost`` (browsers resolve ``*.localhost`` to loopback, RFC
  6761), a DNS name ``<label>.<that name>``; a bare non-loopback IP has no subdomains, so the
  master answers 503 asking the admin to set ``proxy_url``.

The proxy serves a task only on its own host (``serves``): a request whose ``Host`` is another
task's (or no task's) is refused, so a ticket or cookie for one task never lands on another's origin.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from urllib.parse import urlsplit

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")
HASHED_PREFIX = "h-"  # a hashed label's; an id used as its own label never starts with it


class NoProxyHost(Exception):
    """No host can be formed for tasks from what the caller used (a bare IP): set ``proxy_url``."""


def task_label(task_id: str) -> str:
    """The DNS label of a task's host (at most 63 characters, distinct per task id)."""
    if _LABEL.match(task_id) and not task_id.startswith(HASHED_PREFIX) and task_id[2:4] != "--":
        return task_id
    digest = hashlib.sha256(task_id.encode()).digest()[:20]
    return HASHED_PREFIX + base64.b32encode(digest).decode().lower()


def hostname(host_header: str | None) -> str | None:
    """The host name of a ``Host`` header (lowercase, without port or IPv6 brackets); None if none."""
    if not host_header:
        return None
    try:
        name = urlsplit("//" + host_header).hostname
    except ValueError:
        return None
    return name.lower().rstrip(".") if name else None


def ip_of(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def proxy_url_problem(value: str) -> str | None:
    """Why ``proxy_url`` cannot name task hosts, or None when it can."""
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        return f"must be an http:// or https:// URL, got {value!r}"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"must be an origin (scheme, host, optional port) with no path, got {value!r}"
    netloc = parts.netloc
    host = netloc.rsplit(":", 1)[0] if not netloc.endswith("]") else netloc
    if "*" in host and not (host.startswith("*.") and host.count("*") == 1 and len(host) > 2):
        return f"may hold '*' only as its whole first label (https://*.tasks.example.com), got {value!r}"
    name = host.replace("*.", "", 1)
    if not name or ip_of(name.strip("[]")) is not None:
        return (f"must name a DNS host whose subdomains reach the task proxy (one per task: "
                f"https://*.tasks.example.com), got {value!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return f"has a bad port: {value!r}"
    return None


def task_origin(task_id: str, *, proxy_url: str, scheme: str, host_header: str | None,
                proxy_port: int | None) -> str:
    """The origin (``scheme://host[:port]``) that serves ``task_id``'s pages, for a caller that
    reached the master with ``host_header``; NoProxyHost when none can be formed."""
    label = task_label(task_id)
    if proxy_url:
        parts = urlsplit(proxy_url)
        netloc = parts.netloc.replace("*", label, 1) if "*" in parts.netloc else f"{label}.{parts.netloc}"
        return f"{parts.scheme}://{netloc}"
    if proxy_port is None:
        raise NoProxyHost("the task proxy is not listening on this master (proxy_port)")
    name = hostname(host_header) or "localhost"
    ip = ip_of(name)
    if name == "localhost" or (ip is not None and ip.is_loopback):
        base = "localhost"
    elif ip is not None:
        raise NoProxyHost(f"tasks are served on a host of their own (<task>.<proxy host>), and this master "
                          f"was reached by an IP address ({name}), which has none: the admin sets proxy_url "
                          f"in master.yaml to a wildcard DNS name for the task proxy "
                          f"(https://*.tasks.example.com)")
    else:
        base = name
    return f"{scheme}://{label}.{base}:{proxy_port}"


def serves(task_id: str, host_header: str | None, *, proxy_url: str) -> bool:
    """Whether a request with this ``Host`` reached ``task_id``'s own host."""
    name = hostname(host_header)
    if name is None:
        return False
    if proxy_url:
        own = hostname(urlsplit(task_origin(task_id, proxy_url=proxy_url, scheme="http", host_header=None,
                                            proxy_port=None)).netloc)
        return name == own
    first, _, rest = name.partition(".")
    return first == task_label(task_id) and bool(rest)


def master_host(task_id: str, host_header: str | None) -> str | None:
    """The host a task's host was formed from (what the caller used to reach the master), or
    None when ``host_header`` is not that task's host."""
    name = hostname(host_header)
    if name is None:
        return None
    first, _, rest = name.partition(".")
    return rest if first == task_label(task_id) and rest else None
