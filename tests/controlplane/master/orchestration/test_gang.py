"""An allocation's ranks as typed records over its stored JSON: rows written by older masters read
the same, and a gang's exits name its first failure."""

from __future__ import annotations

from controlplane.master.db.models import Allocation
from controlplane.master.orchestration import gang, rendezvous


def test_rows_from_before_the_typed_record_and_before_gangs_read_the_same() -> None:
    legacy = Allocation(id="a", resources=[
        {"agent_id": "n1", "slot_ids": [0, 1], "rank": 0, "started": True, "exited": False, "exit_code": None,
         "address": "10.0.0.1", "ports": {"c10d": 20001, "dist": [20002, 20003]}},
        {"agent_id": "n2", "slot_ids": [0], "rank": 1, "started": True, "exited": True, "exit_code": 3,
         "reason": "oom", "first_failure": True, "address": "10.0.0.2", "ports": {"ssh": 20004}}])
    assert gang.agents_of(legacy) == ["n1", "n2"] and gang.live_agents(legacy) == ["n1"]
    assert (gang.gang_exit_code(legacy), gang.gang_exit_reason(legacy)) == (3, "oom")
    assert rendezvous.info(legacy) == {"container_addrs": ["10.0.0.1", "10.0.0.2"], "container_slot_counts": [2, 1],
                                       "chief_port": 20001, "dist_ports": [20002, 20003], "ssh_ports": [0, 20004]}
    before_gangs = Allocation(id="b", agent_id="n3", slot_ids=[2], resources=[])
    assert [(r.agent_id, r.slot_ids, r.rank) for r in gang.resources_of(before_gangs)] == [("n3", [2], 0)]


def test_a_gang_ends_when_every_rank_has_and_its_first_failure_is_its_cause() -> None:
    alloc = Allocation(id="c", resources=[])
    gang.assign(alloc, (("n1", (0,)), ("n2", (0, 1))))
    assert [(r["agent_id"], r["slot_ids"], r["rank"], r["started"], r["exited"]) for r in alloc.resources] == [
        ("n1", [0], 0, False, False), ("n2", [0, 1], 1, False, False)]  # the stored JSON names every field
    assert gang.mark_started(alloc, "n2") and not gang.mark_started(alloc, "nobody")
    assert gang.mark_exited(alloc, "n2", 137, "killed by the kernel") and not gang.all_exited(alloc)
    assert not gang.mark_exited(alloc, "n2", 0)  # a repeated message changes nothing
    assert gang.mark_exited(alloc, "n1", 143, "stopped with the gang") and gang.all_exited(alloc)
    assert (gang.gang_exit_code(alloc), gang.gang_exit_reason(alloc)) == (137, "killed by the kernel")
