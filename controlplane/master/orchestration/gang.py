"""The agents an allocation runs on: one entry per rank of its gang, kept in `resources`.

An allocation on one agent has one entry; a gang across idle agents has one per agent. Each
entry tracks its own start and exit; the allocation ends when every rank has exited (a
failed rank gets the others killed: a gang lives and dies together).
"""

from __future__ import annotations

from typing import Any

from controlplane.master.db.models import Allocation


def resources_of(alloc: Allocation) -> list[dict[str, Any]]:
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


def _update(alloc: Allocation, agent_id: str, **changes: object) -> dict[str, Any] | None:
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


MAX_REASON = 500  # characters of an agent's exit reason kept per rank


def mark_exited(alloc: Allocation, agent_id: str, exit_code: int | None, reason: str = "") -> bool:
    """Records one rank's exit and the agent's reason; False when that rank already exited (a
    repeated message)."""
    current = next((r for r in resources_of(alloc) if r["agent_id"] == agent_id), None)
    if current is None or current.get("exited"):
        return False
    # The gang's first failure is its cause; the ranks then killed for it only follow.
    first = exit_code != 0 and not any(r.get("first_failure") for r in resources_of(alloc))
    _update(alloc, agent_id, exited=True, exit_code=exit_code, reason=reason[:MAX_REASON], first_failure=first)
    return True


def all_exited(alloc: Allocation) -> bool:
    return all(r.get("exited") for r in resources_of(alloc))


def _first_failure(alloc: Allocation) -> dict[str, Any] | None:
    """The rank that failed first (rows from before that was recorded: the lowest failed rank)."""
    ranks = sorted(resources_of(alloc), key=lambda r: r["rank"])
    return (next((r for r in ranks if r.get("first_failure")), None)
            or next((r for r in ranks if r.get("exited") and r.get("exit_code") != 0), None))


def gang_exit_code(alloc: Allocation) -> int | None:
    """0 when every rank exited 0, else the first failure's (None: a rank could not start)."""
    failed = _first_failure(alloc)
    return 0 if failed is None else failed.get("exit_code")


def gang_exit_reason(alloc: Allocation) -> str:
    """The agent's reason for the failure gang_exit_code names ("failed to start: ..."), so the
    trial says why the gang stopped rather than that its other ranks were then killed."""
    failed = _first_failure(alloc)
    return "" if failed is None else str(failed.get("reason") or "")


def live_agents(alloc: Allocation) -> list[str]:
    return [r["agent_id"] for r in resources_of(alloc) if not r.get("exited")]
