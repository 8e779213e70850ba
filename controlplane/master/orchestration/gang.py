"""The agents an allocation runs on: one entry per rank of its gang, kept in `resources`.

An allocation on one agent has one entry; a gang across idle agents has one per agent. Each
entry tracks its own start and exit; the allocation ends when every rank has exited (a
failed rank gets the others killed: a gang lives and dies together).
"""

from __future__ import annotations

from typing import Any

import msgspec

from controlplane.master.db.models import Allocation


class RankPorts(msgspec.Struct, omit_defaults=True):
    """The ports the master booked for a rank (``rendezvous.py``): the chief's c10d port and its
    two for the core API's collectives, a worker's SSH port, an OpenPAI task's port list."""

    c10d: int = 0
    dist: list[int] = []
    ssh: int = 0
    pai: list[int] = []


class Rank(msgspec.Struct):
    """One rank of an allocation, as stored in ``Allocation.resources`` (a JSON list of these)."""

    agent_id: str
    slot_ids: list[int] = []
    rank: int = 0
    started: bool = False
    exited: bool = False
    exit_code: int | None = None
    reason: str = ""  # the agent's, for an exit it explained
    first_failure: bool = False  # the gang's first failed rank: its cause
    address: str | None = None  # its host's address: where the proxy reaches it, where its ports are booked
    network_address: str | None = None  # where the other ranks reach it, in a spread network (else: address)
    ports: RankPorts = msgspec.field(default_factory=RankPorts)
    stopped: bool = False  # an OpenPAI task stopped by its job's completion policy
    setup_failed: bool = False  # its setup failed before its entrypoint ran (TaskExited.setup_failed)


def resources_of(alloc: Allocation) -> list[Rank]:
    return ranks_in(alloc.resources, alloc.agent_id, alloc.slot_ids)


def ranks_in(resources: list[Any] | None, agent_id: str | None, slot_ids: list[Any] | None) -> list[Rank]:
    """``resources_of`` from the columns alone, for a query that reads them rather than whole rows."""
    if resources:
        return msgspec.convert(resources, list[Rank])
    if agent_id:  # an allocation placed before gangs existed
        return [Rank(agent_id=agent_id, slot_ids=list(slot_ids or []))]
    return []


def slots_in(resources: list[Any] | None, agent_id: str | None,
             slot_ids: list[Any] | None) -> list[tuple[str, tuple[int, ...]]]:
    """Each rank's agent and slots from the columns, without building ``Rank`` records: the
    scheduler's snapshot reads every live allocation's at every pass."""
    if resources:
        return [(r["agent_id"], tuple(r.get("slot_ids") or ())) for r in resources]
    if agent_id:
        return [(agent_id, tuple(slot_ids or ()))]
    return []


def first_rank(alloc: Allocation | None) -> Rank | None:
    """Rank 0 (an OpenPAI task's, a command's only one), None before placement."""
    ranks = resources_of(alloc) if alloc is not None else []
    return ranks[0] if ranks else None


def set_resources(alloc: Allocation, ranks: list[Rank]) -> None:
    alloc.resources = msgspec.to_builtins(ranks)  # a new list, so SQLAlchemy sees the change


def agents_of(alloc: Allocation) -> list[str]:
    return [r.agent_id for r in resources_of(alloc)]


def assign(alloc: Allocation, placement: tuple[tuple[str, tuple[int, ...]], ...]) -> None:
    set_resources(alloc, [Rank(agent_id=agent_id, slot_ids=list(slots), rank=rank)
                          for rank, (agent_id, slots) in enumerate(placement)])
    alloc.agent_id, alloc.slot_ids = placement[0][0], list(placement[0][1])


def _update(alloc: Allocation, agent_id: str, **changes: object) -> Rank | None:
    ranks = resources_of(alloc)
    hit = None
    for i, r in enumerate(ranks):
        if r.agent_id == agent_id:
            ranks[i] = hit = msgspec.structs.replace(r, **changes)
    set_resources(alloc, ranks)
    return hit


def mark_started(alloc: Allocation, agent_id: str) -> bool:
    return _update(alloc, agent_id, started=True) is not None


MAX_REASON = 500  # characters of an agent's exit reason kept per rank


def mark_exited(alloc: Allocation, agent_id: str, exit_code: int | None, reason: str = "",
                setup_failed: bool = False) -> bool:
    """Records one rank's exit and the agent's reason; False when that rank already exited (a
    repeated message)."""
    ranks = resources_of(alloc)
    current = next((r for r in ranks if r.agent_id == agent_id), None)
    if current is None or current.exited:
        return False
    # The gang's first failure is its cause; the ranks then killed for it only follow.
    first = exit_code != 0 and not any(r.first_failure for r in ranks)
    _update(alloc, agent_id, exited=True, exit_code=exit_code, reason=reason[:MAX_REASON], first_failure=first,
            setup_failed=setup_failed)
    return True


def all_exited(alloc: Allocation) -> bool:
    return all(r.exited for r in resources_of(alloc))


def _first_failure(alloc: Allocation) -> Rank | None:
    """The rank that failed first (rows from before that was recorded: the lowest failed rank)."""
    ranks = sorted(resources_of(alloc), key=lambda r: r.rank)
    return (next((r for r in ranks if r.first_failure), None)
            or next((r for r in ranks if r.exited and r.exit_code != 0), None))


def gang_exit_code(alloc: Allocation) -> int | None:
    """0 when every rank exited 0, else the first failure's (None: a rank could not start)."""
    failed = _first_failure(alloc)
    return 0 if failed is None else failed.exit_code


def gang_exit_reason(alloc: Allocation) -> str:
    """The agent's reason for the failure gang_exit_code names ("failed to start: ..."), so the
    trial says why the gang stopped rather than that its other ranks were then killed."""
    failed = _first_failure(alloc)
    return "" if failed is None else failed.reason


def gang_setup_failed(alloc: Allocation) -> bool:
    """The failure gang_exit_code names was a setup that failed before the entrypoint ran (its
    requirements did not install, its startup hook failed): restarting would only repeat it."""
    failed = _first_failure(alloc)
    return failed is not None and failed.setup_failed


def live_agents(alloc: Allocation) -> list[str]:
    return [r.agent_id for r in resources_of(alloc) if not r.exited]
