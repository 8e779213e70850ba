"""The network of a gang or an OpenPAI job spread over several agents (pure: no I/O).

Its tasks run in namespaces that their agents join into one network (``StartTask.overlay``;
``agent_image/agent/overlay.py``). Each agent of it gets one address there, in the order the
placement names the agents, and its tasks on that agent share it (as the tasks of a job on one agent
share the host's address): the ranks' ``container_addrs``, an OpenPAI task's ``PAI_HOST_IP_*``. The
addresses come from 100.96.0.0/16, shared address space (RFC 6598) that no VPC hands out, so they
never hide an endpoint a task must reach. The key that signs the network's packets is made per
network and travels only in ``StartTask``, as a gang's SSH key does.

When one of the agents runs its tasks on its host network (``Register.overlay_port`` is 0), so does
the whole gang or job: the tasks then reach each other at their hosts' addresses.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controlplane.wire import agent_protocol as wire

BASE = ipaddress.IPv4Address("100.96.0.0")
MAX_AGENTS = 65_000  # within the /16


def address(index: int) -> str:
    """The address of the network's ``index``-th agent."""
    return str(BASE + index + 1)


@dataclass(frozen=True)
class SpreadNetwork:
    members: tuple[wire.OverlayMember, ...]
    index_of: Mapping[str, int]  # agent id -> its member entry
    key: str

    def address_of(self, agent_id: str) -> str:
        return self.members[self.index_of[agent_id]].address

    def for_agent(self, agent_id: str) -> wire.Overlay:
        return wire.Overlay(key=self.key, members=list(self.members), index=self.index_of[agent_id])


def plan(agent_ids: Sequence[str], endpoints: Mapping[str, tuple[str, int]]) -> SpreadNetwork | None:
    """The network of tasks placed on ``agent_ids`` (in placement order; repeats allowed), given
    each connected agent's (host address, overlay port); None when they share the host's network:
    all on one agent, or one of them without task networks (port 0, or not connected)."""
    distinct = list(dict.fromkeys(agent_ids))
    if not 2 <= len(distinct) <= MAX_AGENTS:
        return None
    found = [endpoints.get(agent) for agent in distinct]
    if any(e is None or e[1] <= 0 for e in found):
        return None
    members = tuple(wire.OverlayMember(address=address(i), host=e[0], port=e[1])
                    for i, e in enumerate(found) if e is not None)
    return SpreadNetwork(members, {agent: i for i, agent in enumerate(distinct)}, secrets.token_hex(32))
