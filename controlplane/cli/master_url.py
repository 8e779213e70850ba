"""Which master to talk to, spelled the way Determined spells it.

Users keep their `DET_MASTER` habits: `-m/--master`, else `DET_MASTER`, else `DET_MASTER_ADDR`,
else `localhost:8080`. The URL is canonicalized exactly like Determined's
`parse_master_address`, so the token store keys match whatever the user typed: no scheme means
`http://` and port 8080; an explicit `http://`/`https://` without a port means 80/443.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

from controlplane.cli.errors import CliError

DEFAULT_MASTER = "localhost:8080"


def canonicalize(address: str) -> str:
    """'host' -> 'http://host:8080'; 'https://host' -> 'https://host:443'; no trailing slash."""
    address = address.strip()
    if not address:
        raise CliError("the master address is empty")
    if address.startswith("https://"):
        default_port = 443
    elif address.startswith("http://"):
        default_port = 80
    elif "://" in address:
        raise CliError(f"unsupported master URL scheme in {address!r} (use http:// or https://)")
    else:
        default_port = 8080
        address = "http://" + address
    parsed = urlparse(address)
    if not parsed.hostname:
        raise CliError(f"invalid master address {address!r}")
    try:
        port = parsed.port
    except ValueError as e:
        raise CliError(f"invalid port in master address {address!r}") from e
    if port is None:
        parsed = parsed._replace(netloc=f"{parsed.netloc}:{default_port}")
    return parsed.geturl().rstrip("/")


def resolve(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The canonical master URL from the flag, the environment, or the default."""
    env = os.environ if env is None else env
    raw = flag or env.get("DET_MASTER") or env.get("DET_MASTER_ADDR") or DEFAULT_MASTER
    return canonicalize(raw)
