"""The autoscaler's loop in a running master: new demand is planned for at once, not at the next
periodic tick."""

from __future__ import annotations

import asyncio
import time

from controlplane.master.app import create_app, start_runtime, stop_runtime
from controlplane.master.pools import parse_pools
from controlplane.master.settings import MasterSettings
from provisioners.fake import FakeProvisioner
from tests.controlplane.master.autoscaling.conftest import BASE_PROVIDER, login
from tests.controlplane.master.conftest import CONFIG, JOIN_TOKEN, create_experiment


async def test_new_demand_wakes_the_autoscaler_before_its_next_tick(db_url, tmp_path):
    cloud = FakeProvisioner(zones=["zone-a", "zone-b"])
    pools, compute, aux = parse_pools([{"pool_name": "gpu", "provider": BASE_PROVIDER}], None)
    app = create_app(MasterSettings(data_dir=tmp_path / "m", db_url=db_url, join_token=JOIN_TOKEN, pools=pools,
                                    default_resource_pool=compute, default_aux_pool=aux,
                                    provisioner_overrides={"gpu": cloud}, autoscaler_tick_s=120.0))
    rt = app.state.runtime
    rt.app = app
    await start_runtime(rt)
    api = await login(rt)
    try:
        scaler = rt.autoscaler.pools["gpu"]
        deadline = time.monotonic() + 30
        while scaler.last_decision is None and time.monotonic() < deadline:  # the loop's first tick has run
            await asyncio.sleep(0.05)
        assert scaler.last_decision is not None, "the autoscaler's first tick did not finish within 30 s"
        assert cloud.launched == [] and cloud.calls.count("list") >= 1  # no demand, nothing launched
        submitted = time.monotonic()
        await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
        while not cloud.launched and time.monotonic() - submitted < 10:
            await asyncio.sleep(0.1)
        assert len(cloud.launched) == 1, "no launch within 10 s although the periodic tick is 120 s"
    finally:
        await api.aclose()
        await stop_runtime(rt)
