"""An in-process master whose autoscaled pool runs on the in-memory fake provider.

`fake_pool(**provider)` starts the master (SQLite or PostgreSQL), builds the pool's reconciler
over a `FakeProvisioner` sharing one `FakeClock` with the test, and returns a `FakePool`: the API
client, the reconciler (`tick()` advances nothing; the test moves the clock), the fake cloud and
helpers to play the instances' agents. No background autoscaler loop runs: the test ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import pytest

from controlplane.master.app import start_runtime, stop_runtime
from controlplane.master.autoscaling.reconciler import PoolAutoscaler
from controlplane.master.pools import parse_pools
from controlplane.master.settings import MasterSettings
from provisioners.fake import FakeClock, FakeProvisioner
from tests.controlplane.master.conftest import JOIN_TOKEN, FakeAgent
from tests.support.master_app import app_with_runtime, release

BASE_PROVIDER = {"type": "fake", "instance_type": "t1", "zones": ["zone-a", "zone-b"], "max_instances": 2,
                 "slots_per_instance": 1, "max_idle_agent_period": "60s", "max_agent_starting_period": "5m",
                 "prices": {"t1": 3.6}}


@dataclass
class FakePool:
    api: httpx.AsyncClient
    scaler: PoolAutoscaler
    cloud: FakeProvisioner
    clock: FakeClock
    agents: dict[str, FakeAgent] = field(default_factory=dict)

    @property
    def rt(self):
        return self.api.rt

    async def tick(self, advance_s: float = 0.0):
        self.clock.advance(advance_s)
        return await self.scaler.tick(self.clock())

    def live(self) -> list[str]:
        return sorted(i.instance_id for i in self.cloud.all_instances() if i.state != "terminated")

    async def boot(self, instance_id: str) -> FakeAgent:
        """The instance's boot script ran: its agent registers under the instance id."""
        agent = FakeAgent(self.rt, instance_id, slots=self.scaler.scaling.slots_per_instance, pool="gpu")
        await agent.register()
        self.agents[instance_id] = agent
        return agent

    async def describe(self) -> dict:
        r = await self.api.get("/api/v1/resource-pools/gpu/autoscaler")
        assert r.status_code == 200, r.text
        return r.json()


async def start_master(db_url: str, tmp_path, provider: dict, cloud, **settings):
    """A master whose pool `gpu` is served by `cloud`, its autoscaler built as in production
    but not looping: the test calls `tick(now)` itself."""
    pools, compute, aux = parse_pools([{"pool_name": "gpu", "provider": provider}], None)
    app = app_with_runtime(MasterSettings(data_dir=tmp_path / "m", db_url=db_url, join_token=JOIN_TOKEN, pools=pools,
                                    default_resource_pool=compute, default_aux_pool=aux,
                                    provisioner_overrides={"gpu": cloud}, preemption_timeout_s=30.0, **settings))
    rt = app.state.runtime
    rt.app = app
    service, rt.autoscaler = rt.autoscaler, None
    await start_runtime(rt)
    rt.autoscaler = service  # describe reads it; stop_runtime stops a loop that never started
    return rt


async def login(rt) -> httpx.AsyncClient:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=rt.app), base_url="http://m", timeout=30)
    client.rt = rt
    token = (await client.post("/api/v1/auth/login", json={"username": "determined", "password": ""})).json()["token"]
    client.headers["Authorization"] = f"Bearer {token}"
    return client


@pytest.fixture
async def fake_pool(master_db_url, tmp_path):
    started: list = []

    async def make(*, reconnect_wait_s: float = 300.0, cloud: FakeProvisioner | None = None, **provider) -> FakePool:
        clock = FakeClock()
        fake = cloud or FakeProvisioner(zones=["zone-a", "zone-b"])
        fake.clock = clock
        rt = await start_master(master_db_url, tmp_path, {**BASE_PROVIDER, **provider}, fake,
                                agent_reconnect_wait_s=reconnect_wait_s)
        started.append(rt)
        client = await login(rt)
        started.append(client)
        return FakePool(client, rt.autoscaler.pools["gpu"], fake, clock)

    yield make
    for thing in reversed(started):
        if isinstance(thing, httpx.AsyncClient):
            await thing.aclose()
        else:
            await release(thing.app)
            await stop_runtime(thing)
