"""A long randomized run of the real reconciler, orchestrator and database against the fake cloud
with every fault it can script: capacity errors per zone, quota, transient launch and listing
errors, listings that lag behind launches, instances that never register, spot reclaims and
leaks. At no tick does the pool hold more than `max_instances` of its own instances; at the end
every experiment completed and nothing is left but `min_instances`, all of them known."""

from __future__ import annotations

import random

import pytest

from controlplane.wire import agent_protocol as wire
from provisioners.base import QuotaExceeded
from tests.controlplane.master.autoscaling.conftest import FakePool
from tests.controlplane.master.conftest import CONFIG, create_experiment

pytestmark = pytest.mark.both_databases  # the reconciler's reads, the orchestrator's writes: transactions

TICK_S = 5.0
MAX = 4
EXPERIMENT = {**CONFIG, "max_restarts": 5,
              "searcher": {**CONFIG["searcher"], "max_trials": 3, "max_concurrent_trials": 3}}


class Agents:
    """Plays the agents of booted instances: starts what it is sent, finishes it a few ticks later."""

    def __init__(self, p: FakePool, rng: random.Random) -> None:
        self.p, self.rng = p, rng
        self.finish_at: dict[tuple[str, str], int] = {}  # (agent, allocation) -> tick

    async def step(self, tick: int) -> None:
        for iid, agent in list(self.p.agents.items()):
            if agent.conn is None:
                continue
            while not agent.conn.outbox.empty():
                msg = agent.conn.outbox.get_nowait()
                if isinstance(msg, wire.StartTask):
                    await agent.start(msg)
                    self.finish_at[(iid, msg.allocation_id)] = tick + self.rng.randint(1, 6)
                elif isinstance(msg, wire.KillTask):
                    self.finish_at[(iid, msg.allocation_id)] = tick
        for (iid, alloc_id), at in list(self.finish_at.items()):
            if at <= tick:
                del self.finish_at[(iid, alloc_id)]
                agent = self.p.agents.get(iid)
                if agent is not None and agent.conn is not None:
                    await agent.exit(alloc_id, 0)

    async def gone(self, iid: str) -> None:
        agent = self.p.agents.pop(iid, None)
        if agent is not None and agent.conn is not None:
            await agent.disconnect()
            agent.conn = None


@pytest.mark.parametrize("seed", [1, 2])
async def test_randomized_faults_never_exceed_max_and_leave_nothing_behind(fake_pool, seed):
    rng = random.Random(seed)
    p = await fake_pool(max_instances=MAX, min_instances=1, max_idle_agent_period="30s",
                        max_agent_starting_period="60s", zones=["zone-a", "zone-b", "zone-c"])
    agents = Agents(p, rng)
    ours = lambda i: not i.tags["det-launch-request"].startswith("leak-")  # noqa: E731
    exp_ids = [await create_experiment(p.api, EXPERIMENT)]
    leaks: list[str] = []
    peak = 0
    for tick in range(240):  # 100 ticks of faults, then time for cooldowns (5 min) and idle periods
        if tick < 100:  # faults and new work only in the first part; then the pool must settle
            r = rng.random()
            if r < 0.05:
                p.cloud.no_capacity(zone=rng.choice(["zone-a", "zone-b", "zone-c"]))
            elif r < 0.10:
                p.cloud.restore_capacity()
            elif r < 0.14:
                p.cloud.fail_next(rng.randint(1, 2))
            elif r < 0.16:
                p.cloud.fail_next(1, op="list")
            elif r < 0.18:
                p.cloud.fail_next(1, error=lambda: QuotaExceeded("quota injected", code="Quota"))
            elif r < 0.21:
                p.cloud.never_register_next = 1
            elif r < 0.24:
                p.cloud.list_delay_calls = rng.randint(1, 3)
            elif r < 0.28 and p.agents:  # a spot reclaim: the machine goes, no notice
                victim = rng.choice(sorted(p.agents))
                p.cloud.interrupt(victim)
                await agents.gone(victim)
            elif r < 0.30:
                leaks.append(p.cloud.plant(p.rt.cluster_id, "gpu", f"leak-{tick}").instance_id)
            if tick in (20, 45, 70):
                exp_ids.append(await create_experiment(p.api, EXPERIMENT))
        else:
            p.cloud.clear_faults()
        await p.tick(TICK_S)
        mine = [i for i in p.cloud.all_instances() if i.state != "terminated" and ours(i)]
        assert len(mine) <= MAX, f"tick {tick}: {len(mine)} instances > max_instances {MAX}"
        peak = max(peak, len(mine))
        # Instances whose boot finished register (unless scripted not to); gone ones lose their agent.
        for inst in mine:
            if inst.instance_id not in p.agents and p.cloud.registers(inst.instance_id) and inst.state == "running":
                await p.boot(inst.instance_id)
        for iid in list(p.agents):
            if iid not in {i.instance_id for i in mine}:
                await agents.gone(iid)
        await p.rt.orchestrator.tick()
        await agents.step(tick)

    states = [(await p.api.get(f"/api/v1/experiments/{e}")).json()["experiment"]["state"] for e in exp_ids]
    assert states == ["STATE_COMPLETED"] * len(exp_ids), (states, (await p.describe())["plan"])
    assert peak >= 2  # the run did scale
    live = [i for i in p.cloud.all_instances() if i.state != "terminated"]
    assert len(live) == 1 and ours(live[0]), live  # min_instances, and no leak survived
    info = await p.describe()
    assert [i["id"] for i in info["instances"] if i["state"] != "terminated"] == [live[0].instance_id]
    records = {i["id"]: i for i in info["instances"]}
    for leak in leaks:
        assert records[leak]["state"] == "terminated" and "leaked" in records[leak]["reason"]
    assert all(i["reason"] for i in info["instances"] if i["state"] == "terminated")
