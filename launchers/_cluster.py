"""The gang as a launcher sees it: read from the agent's info files (stdlib only, so a launcher
starts fast), else this machine alone.

``DET_INFO_DIR`` holds ``cluster.json`` (this container's ``slot_ids``, ``allocation_id``) and
``rendezvous.json`` (every container's address and slot count, this container's rank, and the
ports the master chose: ``chief_port``, ``dist_ports``, ``ssh_ports``, with ``ssh_key_file``).
Off the cluster, or from an agent that gave no ports, a lone container takes free ports on
loopback and a gang falls back to Determined's fixed ports.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Determined's fixed ports, for a gang whose agent did not pass the master's.
C10D_PORT = 29400
DIST_PORTS = (12360, 12376)
SSH_PORT = 12350


@dataclass(frozen=True)
class Gang:
    addrs: list[str]
    rank: int
    slot_counts: list[int]
    chief_port: int
    dist_ports: list[int]
    ssh_ports: list[int]
    allocation_id: str = ""
    ssh_key_file: str | None = None
    info_dir: Path | None = None
    env_overrides: dict[str, str] = field(default_factory=dict)

    @property
    def nnodes(self) -> int:
        return len(self.addrs)

    @property
    def local_slots(self) -> int:
        return self.slot_counts[self.rank] if self.rank < len(self.slot_counts) else 1

    @property
    def chief_addr(self) -> str:
        """Where the other containers reach the chief; loopback when there are none."""
        return self.addrs[0] if self.nnodes > 1 else "127.0.0.1"

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def world_size(self) -> int:
        return sum(self.slot_counts)

    def ssh_hosts(self) -> dict[str, dict[str, Any]]:
        """Each container's SSH alias -> where it serves (launchers._ssh's hosts.json)."""
        return {f"det-container-{i}": {"addr": addr, "port": self.ssh_ports[i], "self": i == self.rank}
                for i, addr in enumerate(self.addrs)}


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load(env: dict[str, str] | None = None) -> Gang:
    env = dict(os.environ if env is None else env)
    info_dir = Path(env["DET_INFO_DIR"]) if env.get("DET_INFO_DIR") else None
    cluster = _read(info_dir / "cluster.json") if info_dir else {}
    # Determined's rendezvous.json, and the master-chosen ports this platform adds beside it.
    rdv = {**_read(info_dir / "rendezvous.json"), **_read(info_dir / "ports.json")} if info_dir else {}
    slot_ids = cluster.get("slot_ids")
    if slot_ids is None:
        try:
            slot_ids = json.loads(env.get("DET_SLOT_IDS") or "[]")
        except ValueError:
            slot_ids = []
    own_slots = max(1, len(slot_ids or []))
    addrs = [str(a) for a in rdv.get("container_addrs") or ["127.0.0.1"]]
    rank = int(rdv.get("container_rank") or 0)
    counts = [max(1, int(n)) for n in rdv.get("container_slot_counts") or []] or [own_slots]
    if len(counts) != len(addrs):
        raise SystemExit(f"rendezvous.json names {len(addrs)} containers but {len(counts)} slot counts")
    if not 0 <= rank < len(addrs):
        raise SystemExit(f"rendezvous.json: container_rank {rank} is not among {len(addrs)} containers")
    chief_port = int(rdv.get("chief_port") or 0)
    dist_ports = [int(p) for p in rdv.get("dist_ports") or []]
    ssh_ports = [int(p) for p in rdv.get("ssh_ports") or []]
    if len(addrs) == 1:  # alone: any free port on loopback will do
        chief_port = chief_port or free_port()
        dist_ports = dist_ports if len(dist_ports) >= 2 else [free_port(), free_port()]
    else:
        chief_port = chief_port or C10D_PORT
        dist_ports = dist_ports if len(dist_ports) >= 2 else list(DIST_PORTS)
    if len(ssh_ports) != len(addrs):
        ssh_ports = [0] + [SSH_PORT] * (len(addrs) - 1)
    key = rdv.get("ssh_key_file")
    allocation_id = str(cluster.get("allocation_id") or env.get("DET_ALLOCATION_ID", ""))
    return Gang(addrs=addrs, rank=rank, slot_counts=counts, chief_port=chief_port, dist_ports=dist_ports[:2],
                ssh_ports=ssh_ports, allocation_id=allocation_id,
                ssh_key_file=str(info_dir / key) if key and info_dir else None, info_dir=info_dir)


def usage_if_asked(argv: list[str], doc: str | None) -> None:
    """``-h``/``--help`` before anything else: print the launcher's usage (its docstring) and exit 0,
    as Determined's launchers do, instead of taking ``-h`` for the script to run."""
    if argv[:1] in (["-h"], ["--help"]):
        print((doc or "").strip())
        raise SystemExit(0)


def split_overrides(argv: list[str], own_flags: tuple[str, ...] = ("--trial",)) -> tuple[dict[str, str], list[str],
                                                                                         list[str]]:
    """``[OWN FLAGS] [OVERRIDES... --] SCRIPT...`` -> (own flags, overrides, script).

    Without ``--`` every word is the script, except own flags at the start; ``--trial X`` may also
    open the part after ``--`` (Determined's legacy form ``-- --trial module:Class``)."""
    own: dict[str, str] = {}
    words = list(argv)

    def take_own(ws: list[str]) -> list[str]:
        while ws:
            head = ws[0]
            name, eq, value = head.partition("=")
            if name not in own_flags:
                break
            if eq:
                own[name] = value
                ws = ws[1:]
            elif len(ws) >= 2:
                own[name] = ws[1]
                ws = ws[2:]
            else:
                raise SystemExit(f"{name} needs a value")
        return ws

    words = take_own(words)
    if "--" in words:
        i = words.index("--")
        overrides, script = words[:i], take_own(words[i + 1:])
    else:
        overrides, script = [], words
    return own, overrides, script


HARNESS = "controlplane.exec.harness"


def worker_command(own: dict[str, str], script: list[str], prog: str) -> list[str]:
    """What each worker runs: the Trial harness for ``--trial module:Class``, ``python3 X.py ...``
    for a script, else the command as given (``python3 -m pkg``, ``numactl ...``)."""
    import sys

    trial = own.get("--trial")
    if trial:
        if script:
            raise SystemExit(f"{prog}: give either --trial or a script, not both ({' '.join(script)})")
        return [sys.executable, "-m", HARNESS, trial]
    if not script:
        raise SystemExit(f"usage: python3 -m {prog} [OVERRIDES... --] (--trial module:Class | script.py args...)")
    if script[0].endswith(".py"):
        return [sys.executable, *script]
    return list(script)
