"""The agent's own IP addresses, reported in ``Register.addresses``: the first is where the master
and other agents reach it (the master books a gang's ports and points its proxy there)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit


def _source_toward(host: str) -> str | None:
    """The address this host sends from to reach ``host`` (no packet is sent for a UDP connect)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 1))
            return str(s.getsockname()[0])
    except OSError:
        return None


def local_addresses(master_url: str = "") -> list[str]:
    """This host's addresses, the one it reaches the master from first: 127.0.0.1 when the master
    is on this host, else its address on the way there (a cloud agent's private address)."""
    master = urlsplit(master_url).hostname if master_url else None
    toward_master = _source_toward(master) if master else None
    addrs = [toward_master] if toward_master else []
    if "127.0.0.1" not in addrs:
        addrs.append("127.0.0.1")
    try:
        _, _, ips = socket.gethostbyname_ex(socket.gethostname())
    except OSError:
        ips = []
    default_route = _source_toward("10.255.255.255")
    for ip in [*ips, *([default_route] if default_route else [])]:
        if ip not in addrs and not ip.startswith("0."):
            addrs.append(ip)
    return addrs
