"""The agents an allocation runs on: one entry per rank of its gang, kept in `resources`.

An allocation on one agent has one entry; a gang across idle agents has one per agent. Each
entry tracks its own start and exit; the allocation ends when every rank has exited (a
failed rank gets the others killed: a gang lives and dies together).
"""

from __future__ import annotations

from controlplane.master.db.models import Allocation


def resources_of(alloc: Allocation) -> list[dict]:
    if alloc.resources:
        return alloc.resources
    if alloc.agent_id:  # an allocation placed before gangs existed
        return [{"agent_id": alloc.agent_id, "slot_ids": list(alloc.slot_ids or []), "rank": 0,
                 "started": False, "exited": False, "exit_code": None}]
    return []


def agents_of(alloc: Allocation) -> list[str]:
    return [r["agent_id"] for r in resources_of(alloc)]


def assign(alloc: Allocation, placement: tuple[tuple[str, tuple[int, ...]], ...]) -> None:
    alloc.resources = [{"agent_id": agent_id, "slot_ids": list(slots), "rank": rank, "started": False,
                        "exited": False, "exit_code": None} for rank, (agent_id, slots) in enumerate(placement)]
    alloc.agent_id, alloc.slot_ids = placement[0][0], list(placement[0][1])


def _update(alloc: Allocation, agent_id: str, **changes: object) -> dict | None:
    resources = [dict(r) for r in resources_of(alloc)]
    hit = None
    for r in resources:
        if r["agent_id"] == agent_id:
            r.update(changes)
            hit = r
    alloc.resources = resources  # a new list, so SQLAlchemy sees the change
    return hit


def mark_started(alloc: Allocation, agent_id: str) -> bool:
    return _update(alloc, agent_id, started=True) is not None


def mark_exited(alloc: Allocation, agent_id: str, exit_code: int | None) -> bool:
    """Records one rank's exit; False when that rank already exited (a repeated message)."""
    current = next((r for r in resources_of(alloc) if r["agent_id"] == agent_id), None)
    if current is None or current.get("exited"):
        return False
    _update(alloc, agent_id, exited=True, exit_code=exit_code)
    return True


def all_exited(alloc: Allocation) -> bool:
    return all(r.get("exited") for r in resources_of(alloc))


def gang_exit_code(alloc: Allocation) -> int | None:
    """0 when every rank exited 0, else the first failure (None: a rank could not start)."""
    for r in sorted(resources_of(alloc), key=lambda r: r["rank"]):
        if r.get("exit_code") != 0:
            return r.get("exit_code")
    return 0


def live_agents(alloc: Allocation) -> list[str]:
    return [r["agent_id"] for r in resources_of(alloc) if not r.get("exited")]
