"""How the containers of a gang find each other: addresses, ports and an SSH key per allocation.

At placement every rank's entry of ``Allocation.resources`` gets the address other ranks reach it
at and the ports it will listen on, chosen by the master:

- the chief (rank 0): ``c10d`` (torch.distributed's store, DeepSpeed's ``master_port``) and two
  ``dist`` ports for the core API's own collectives (``DET_DIST_PORTS``);
- every other rank: one ``ssh`` port, where its launcher serves SSH for DeepSpeed and Horovod.

Ports are unique among the live allocations (ASSIGNED or RUNNING) on the same address, so several
agents on one host (tests run them all on 127.0.0.1) never hand out the same port twice. They are
kept in the allocation's row (a JSON column, no migration): the database is the truth, a master
restart re-reads them and never reassigns a live allocation's ports. The search starts at an offset
hashed from the allocation id, so two masters sharing a machine rarely pick the same ports either.
The range stays below Linux's ephemeral ports (32768-60999), which outgoing connections take.

The SSH key pair is made per allocation and travels only in the gang's ``StartTask`` messages
(like the session token); it is not stored.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

import msgspec

from controlplane.master.db.models import Allocation
from controlplane.master.orchestration import gang
from controlplane.master.orchestration.spread_network import SpreadNetwork

PORT_LOW = 20000
PORT_HIGH = 32000  # exclusive
DEFAULT_ADDRESS = "127.0.0.1"


def ports_of(entry: gang.Rank) -> list[int]:
    ports = entry.ports
    out = [ports.c10d] if ports.c10d else []
    out += [p for p in ports.dist if p]
    if ports.ssh:
        out.append(ports.ssh)
    out += [p for p in ports.pai if p]  # an OpenPAI task's portList (orchestration/pai_jobs.py)
    return out


def used_ports(gangs: Iterable[list[gang.Rank]]) -> dict[str, set[int]]:
    """address -> ports held by these (live) allocations' ranks."""
    used: dict[str, set[int]] = {}
    for ranks in gangs:
        for entry in ranks:
            if entry.address:
                used.setdefault(entry.address, set()).update(ports_of(entry))
    return used


def hashed_start(key: str) -> int:
    """Where a search for free ports begins for ``key`` (an allocation's or a job's id)."""
    return PORT_LOW + zlib.crc32(key.encode()) % (PORT_HIGH - PORT_LOW)


class _Picker:
    def __init__(self, alloc_id: str, used: dict[str, set[int]]) -> None:
        self.next = hashed_start(alloc_id)
        self.used = used

    def take(self, address: str) -> int:
        taken = self.used.setdefault(address, set())
        for _ in range(PORT_HIGH - PORT_LOW):
            port, self.next = self.next, self.next + 1
            if self.next >= PORT_HIGH:
                self.next = PORT_LOW
            if port not in taken:
                taken.add(port)
                return port
        raise RuntimeError(f"no free port left in {PORT_LOW}-{PORT_HIGH - 1} on {address}")


def assign(alloc: Allocation, addresses: list[str], used: dict[str, set[int]]) -> None:
    """Record each rank's address and ports in ``alloc.resources`` (placed by ``gang.assign``);
    ``used`` (address -> ports of live allocations) gains the new ones."""
    picker = _Picker(alloc.id, used)
    resources = gang.resources_of(alloc)
    for i, entry in enumerate(resources):
        address = addresses[entry.rank] if entry.rank < len(addresses) else DEFAULT_ADDRESS
        if entry.rank == 0:
            ports = gang.RankPorts(c10d=picker.take(address), dist=[picker.take(address), picker.take(address)])
        else:
            ports = gang.RankPorts(ssh=picker.take(address))
        resources[i] = msgspec.structs.replace(entry, address=address, ports=ports)
    gang.set_resources(alloc, resources)


def join_network(alloc: Allocation, network: SpreadNetwork | None) -> SpreadNetwork | None:
    """The ranks reach each other in ``network`` (at their agents' addresses there), not on their
    hosts' network (None: on it); their ports stay booked on their hosts' addresses."""
    if network is not None:
        gang.set_resources(alloc, [msgspec.structs.replace(r, network_address=network.address_of(r.agent_id))
                                   for r in gang.resources_of(alloc)])
    return network


def resources_id(alloc_id: str, rank: int) -> str:
    """DET_RESOURCES_ID of one container: the allocation id for the chief (as before gangs), then
    ``<allocation id>.<rank>``."""
    return alloc_id if rank == 0 else f"{alloc_id}.{rank}"


def info(alloc: Allocation) -> dict[str, Any]:
    """What every container of the gang is told (the StartTask fields and rendezvous.json)."""
    resources = sorted(gang.resources_of(alloc), key=lambda r: r.rank)
    chief = resources[0].ports if resources else gang.RankPorts()
    return {
        "container_addrs": [r.network_address or r.address or DEFAULT_ADDRESS for r in resources],
        "container_slot_counts": [len(r.slot_ids) for r in resources],
        "chief_port": chief.c10d,
        "dist_ports": list(chief.dist),
        "ssh_ports": [r.ports.ssh for r in resources],
    }


def rank_of(alloc: Allocation, rid: str) -> int | None:
    """The container rank a DET_RESOURCES_ID names (its rank number is accepted too)."""
    for entry in gang.resources_of(alloc):
        rank = entry.rank
        if rid in (resources_id(alloc.id, rank), str(rank)):
            return rank
    return None


def new_ssh_key() -> str:
    """A fresh Ed25519 private key in OpenSSH format (the public key is derived from it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()).decode()


def public_key_line(private_key: str) -> str:
    """``ssh-ed25519 AAAA...`` of an OpenSSH private key (what authorized-keys and known-hosts hold)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_private_key(private_key.encode(), password=None)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
