"""The agent's own IP addresses, reported in ``Register.addresses``."""

from __future__ import annotations

import socket


def local_addresses() -> list[str]:
    addrs = ["127.0.0.1"]
    try:
        _, _, ips = socket.gethostbyname_ex(socket.gethostname())
    except OSError:
        ips = []
    try:  # the address used for outbound traffic (no packet is sent for UDP connect)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ips.append(s.getsockname()[0])
    except OSError:
        pass
    for ip in ips:
        if ip not in addrs and not ip.startswith("0."):
            addrs.append(ip)
    return addrs
