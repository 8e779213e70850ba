"""The gang's rendezvous: addresses, master-chosen ports (unique per address among live allocations,
kept across a master restart), the per-allocation SSH key, and the rendezvous endpoint."""

from __future__ import annotations

import httpx
import pytest

from controlplane.master.app import create_app, start_runtime, stop_runtime
from controlplane.master.db.models import Allocation
from controlplane.master.orchestration import rendezvous
from controlplane.master.settings import MasterSettings
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, JOIN_TOKEN, FakeAgent, create_experiment

pytestmark = pytest.mark.both_databases  # port uniqueness among live allocations is read and written under concurrency

GANG = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}, "resources": {"slots_per_trial": 4}}


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


def ports(msg: wire.StartTask) -> set[int]:
    return {msg.chief_port, *msg.dist_ports, *(p for p in msg.ssh_ports if p)}


async def rendezvous_of(api, msg: wire.StartTask, rid: str) -> httpx.Response:
    return await api.get(f"/api/v1/allocations/{msg.allocation_id}/resources/{rid}/rendezvous",
                         headers=task_headers(msg.session_token))


async def test_a_gang_learns_addresses_ports_and_one_ssh_key(api):
    a1, a2 = FakeAgent(api.rt, "agent-1", slots=2), FakeAgent(api.rt, "agent-2", slots=2)
    await a1.register()
    await a2.register()
    await create_experiment(api, GANG)
    r0, r1 = await a1.next_message(), await a2.next_message()
    assert isinstance(r0, wire.StartTask) and isinstance(r1, wire.StartTask)
    for m in (r0, r1):
        assert m.container_addrs == ["127.0.0.1", "127.0.0.1"] and m.container_slot_counts == [2, 2]
        assert (m.chief_port, m.dist_ports, m.ssh_ports) == (r0.chief_port, r0.dist_ports, r0.ssh_ports)
    assert r0.chief_port and len(r0.dist_ports) == 2 and r0.ssh_ports[0] == 0 and r0.ssh_ports[1]
    assert len(ports(r0)) == 4, "the chief's and the worker's ports share one address here: all distinct"
    assert all(rendezvous.PORT_LOW <= p < rendezvous.PORT_HIGH for p in ports(r0))
    assert r0.ssh_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----") and r0.ssh_key == r1.ssh_key
    assert r0.network == r1.network == ""  # spread over two agents: the hosts' network, as Determined's
    assert (r0.env["DET_RESOURCES_ID"], r1.env["DET_RESOURCES_ID"]) == (r0.allocation_id, f"{r0.allocation_id}.1")

    for msg, rank in ((r0, 0), (r1, 1)):
        r = await rendezvous_of(api, msg, msg.env["DET_RESOURCES_ID"])
        assert r.status_code == 200, r.text
        assert r.json() == {"rendezvousInfo": {
            "addresses": ["127.0.0.1", "127.0.0.1"], "rank": rank, "slots": [2, 2], "chiefPort": r0.chief_port,
            "distPorts": r0.dist_ports, "sshPorts": r0.ssh_ports}}
    assert (await rendezvous_of(api, r0, "1")).json()["rendezvousInfo"]["rank"] == 1
    assert (await rendezvous_of(api, r0, "nope")).status_code == 404


async def test_a_single_container_gets_ports_but_no_ssh_key(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    m = await agent.next_message()
    assert isinstance(m, wire.StartTask)
    assert m.chief_port and len(m.dist_ports) == 2 and m.ssh_ports == [0] and m.ssh_key == ""
    assert m.env["DET_RESOURCES_ID"] == m.allocation_id
    assert m.network == m.allocation_id and m.served_ports == []  # on one agent: a network of its own


async def test_live_allocations_on_one_address_never_share_a_port(api):
    agents = [FakeAgent(api.rt, f"agent-{i}", slots=2) for i in range(3)]
    for a in agents:
        await a.register()
    # Four one-slot trials and one gang of four, all on 127.0.0.1.
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 2,
                                                          "max_concurrent_trials": 2}})
    await create_experiment(api, GANG)
    msgs: list[wire.StartTask] = []
    while len(msgs) < 4:
        for a in agents:
            try:
                m = await a.next_message(timeout=0.5)
            except TimeoutError:
                continue
            assert isinstance(m, wire.StartTask)
            msgs.append(m)
    seen: dict[int, str] = {}
    by_alloc: dict[str, set[int]] = {}
    for m in msgs:
        by_alloc.setdefault(m.allocation_id, set()).update(ports(m))
    for alloc_id, held in by_alloc.items():
        for p in held:
            assert seen.setdefault(p, alloc_id) == alloc_id, f"port {p} given to {seen[p]} and {alloc_id}"
    assert len(by_alloc) == 3


def test_the_picker_skips_ports_in_use_and_wraps_around():
    alloc = Allocation(id="t.1", task_id="t", state="PENDING", resources=[
        {"agent_id": "a", "slot_ids": [0], "rank": 0}, {"agent_id": "b", "slot_ids": [0], "rank": 1}])
    start = rendezvous._Picker(alloc.id, {}).next
    used = {"10.0.0.1": {start, start + 1}}
    rendezvous.assign(alloc, ["10.0.0.1", "10.0.0.2"], used)
    chief, worker = alloc.resources
    assert chief["address"] == "10.0.0.1" and worker["address"] == "10.0.0.2"
    assert chief["ports"]["c10d"] not in (start, start + 1)
    assert {chief["ports"]["c10d"], *chief["ports"]["dist"]} <= used["10.0.0.1"]
    assert used["10.0.0.2"] == {worker["ports"]["ssh"]}  # counted on its own address only

    picker = rendezvous._Picker("x", {})
    picker.next = rendezvous.PORT_HIGH - 1
    assert [picker.take("h"), picker.take("h")] == [rendezvous.PORT_HIGH - 1, rendezvous.PORT_LOW]


@pytest.fixture
def restartable(db_url, tmp_path):
    """Start (and restart) an in-process master on the same database."""
    started: list = []

    async def start() -> httpx.AsyncClient:
        settings = MasterSettings(data_dir=tmp_path / "master", db_url=db_url, join_token=JOIN_TOKEN,
                                  agent_reconnect_wait_s=30.0, preemption_timeout_s=2.0)
        app = create_app(settings)
        await start_runtime(app.state.runtime)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://master", timeout=30)
        client.rt = app.state.runtime  # type: ignore[attr-defined]
        r = await client.post("/api/v1/auth/login", json={"username": "determined", "password": ""})
        client.headers["Authorization"] = f"Bearer {r.json()['token']}"
        started.append(client)
        return client

    async def stop(client: httpx.AsyncClient) -> None:
        await stop_runtime(client.rt)  # type: ignore[attr-defined]
        await client.aclose()
        started.remove(client)

    yield start, stop


async def test_ports_survive_a_master_restart_and_are_not_reassigned(restartable):
    start, stop = restartable
    api = await start()
    a1, a2 = FakeAgent(api.rt, "agent-1", slots=2), FakeAgent(api.rt, "agent-2", slots=2)
    await a1.register()
    await a2.register()
    await create_experiment(api, GANG)
    r0, r1 = await a1.next_message(), await a2.next_message()
    await a1.start(r0)
    await a2.start(r1)
    before = (await rendezvous_of(api, r1, r1.env["DET_RESOURCES_ID"])).json()
    await stop(api)

    api = await start()  # the same database, nothing in memory
    a1, a2 = FakeAgent(api.rt, "agent-1", slots=4), FakeAgent(api.rt, "agent-2", slots=2)
    await a1.register(running=[r0.allocation_id])  # agent-1 grew two slots while the master was down
    await a2.register(running=[r1.allocation_id])
    assert (await rendezvous_of(api, r1, r1.env["DET_RESOURCES_ID"])).json() == before
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    fresh = await a1.next_message()
    assert isinstance(fresh, wire.StartTask) and fresh.allocation_id != r0.allocation_id
    assert not ports(fresh) & ports(r0), "a new allocation on the same address reused a live one's port"
    await stop(api)
