"""A pool's instance types from master.yaml: Determined's single `instance_type` exactly as before,
the mixed `instance_types` / `machine_types` list with the catalogue and `prices:`, every mistake
named at once; the provisioners and the local agents get each launch's own type."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.autoscaler import PoolScaling, Shape
from controlplane.config.errors import ConfigError, ConfigErrors
from controlplane.master.api.autoscaler_json import PoolShape, pool_shapes
from controlplane.master.autoscaling.providers import provisioner_for
from controlplane.master.autoscaling.service import local_agent_command, scaling_of
from controlplane.master.db.models import Instance
from controlplane.master.pools import PoolConfig, parse_pools
from controlplane.master.settings import MasterSettings
from provisioners.base import LaunchRequest

PATH = "resource_pools[gpu].provider"


def pool(**provider: Any) -> PoolConfig:
    return parse_pools([{"pool_name": "gpu", "provider": {"type": "aws", **provider}}], None)[0][0]


def errors_of(**provider: Any) -> list[str]:
    with pytest.raises(ConfigError) as e:
        scaling_of(pool(**provider))
    errs = e.value.errors if isinstance(e.value, ConfigErrors) else (e.value,)
    return [str(x) for x in errs]


def test_determineds_single_instance_type_is_unchanged_and_priced_from_the_catalogue():
    got = scaling_of(pool(instance_type="g5.12xlarge", slots_per_instance=4, max_instances=3))
    before = PoolScaling(pool="gpu", instance_types=("g5.12xlarge",), slots_per_instance=4, max_instances=3)
    assert (got.instance_types, got.slots_per_instance, got.max_instances) == (("g5.12xlarge",), 4, 3)
    assert [(s.instance_type, s.slots) for s in got.shapes] == [(s.instance_type, s.slots) for s in before.shapes]
    assert got.shapes == (Shape("g5.12xlarge", 4, 5.672, 0.0, "A10G"),) and not got.mixed
    # the config's slots_per_instance wins over the catalogue's GPUs (e.g. CPU slots), as before
    assert scaling_of(pool(instance_type="g5.48xlarge", slots_per_instance=2)).shapes[0].slots == 2


def test_single_type_defaults_failover_lists_unknown_types_and_gcp_spelling():
    assert scaling_of(pool()).shapes == (Shape("default", 1),)  # as before: one slot, no price
    alts = scaling_of(pool(instance_type=["g5.12xlarge", "g4dn.12xlarge"], slots_per_instance=4))
    assert alts.instance_types == ("g5.12xlarge", "g4dn.12xlarge") and alts.slots_per_instance == 4
    assert [s.usd_per_hour for s in alts.shapes] == [5.672, 3.912] and not alts.mixed
    assert scaling_of(pool(instance_type="t3.micro")).shapes == (Shape("t3.micro", 1),)
    gce = scaling_of(pool(type="gcp", machine_type="a2-highgpu-8g", slots_per_instance=8, prices={"a2-highgpu-8g": 20}))
    assert gce.shapes == (Shape("a2-highgpu-8g", 8, 20.0, 0.0, "A100"),)


def test_a_mixed_list_from_the_catalogue_items_and_prices():
    got = scaling_of(pool(instance_types=["g5.xlarge", {"type": "g5.12xlarge"}, {"type": "my.big", "slots": 16,
                                                                                   "gpu_model": "H200"}],
                          prices={"g5.xlarge": {"on_demand": 0.9, "spot": 0.35}, "my.big": 40,
                                  "g5.12xlarge": {"spot": 2.0}}, spot=True))
    assert got.shapes == (Shape("g5.xlarge", 1, 0.9, 0.35, "A10G"), Shape("g5.12xlarge", 4, 5.672, 2.0, "A10G"),
                          Shape("my.big", 16, 40.0, 0.0, "H200"))
    assert got.mixed and got.slots_per_instance == 16 and got.slots_of("g5.12xlarge") == 4 and got.spot
    assert got.instance_types == ("g5.xlarge", "g5.12xlarge", "my.big")
    gce = scaling_of(pool(type="gcp", machine_types=["a2-highgpu-1g", "a2-highgpu-8g"]))
    assert [(s.instance_type, s.slots, s.usd_per_hour) for s in gce.shapes] == [
        ("a2-highgpu-1g", 1, 3.673385), ("a2-highgpu-8g", 8, 29.38708)]


def test_every_mistake_of_the_block_is_named_at_once():
    errs = errors_of(instance_types=["g5.xlarge", "nope", {"type": "g6.xlarge", "slots": 0, "colour": "red"}, 7,
                                     "g5.xlarge"],
                     slots_per_instance=2, prices={"g5.xlarge": "cheap", "g6.xlarge": {"spot": -1},
                                                   "p5.48xlarge": 9, "g5.12xlarge": {"od": 1}},
                     max_instances=-1, max_idle_agent_period="soon")
    assert errs == [
        f"{PATH}.slots_per_instance: not with instance_types: each type's slots come from its item or the catalogue",
        f"{PATH}.instance_types[1]: unknown instance type 'nope': not in the built-in catalogue, so give its "
        "slots ({type: nope, slots: N})",
        f"{PATH}.instance_types[2].colour: unknown field (allowed: type, slots, gpu_model)",
        f"{PATH}.instance_types[2].slots: must be >= 1, got 0",
        f"{PATH}.instance_types[3]: must be a type name or {{type, slots, gpu_model}}, got 7",
        f"{PATH}.instance_types[4]: 'g5.xlarge' is listed twice",
        f"{PATH}.prices.g5.xlarge: must be USD per hour on demand, or {{on_demand: N, spot: N}}, got 'cheap'",
        f"{PATH}.prices.g6.xlarge.spot: must be >= 0 (USD per hour), got -1",
        f"{PATH}.prices.g5.12xlarge.od: unknown field (allowed: on_demand, spot)",
        f"{PATH}.prices.p5.48xlarge: not one of this pool's instance types (g5.xlarge, nope, g6.xlarge, 7)",
        f"{PATH}.prices.g5.12xlarge: not one of this pool's instance types (g5.xlarge, nope, g6.xlarge, 7)",
        f"{PATH}.max_instances: must be >= 0, got -1",
        f"{PATH}.max_idle_agent_period: must be a duration like '30s' or '10m', got 'soon'",
    ]


def test_single_mistakes_and_both_forms_at_once():
    assert errors_of(instance_type="g5.xlarge", instance_types=["g5.xlarge"]) == [
        f"{PATH}.instance_type: give either instance_types or instance_type, not both"]
    assert errors_of(instance_types=[]) == [
        f"{PATH}.instance_types: must be a non-empty list of instance types (a name, or {{type: NAME, slots: N, "
        "gpu_model: MODEL})"]
    assert errors_of(slots_per_instance=0) == [f"{PATH}.slots_per_instance: must be >= 1, got 0"]
    assert errors_of(prices=[1]) == [f"{PATH}.prices: must be a mapping of instance type to price, got list"]
    assert errors_of(min_instances=3, max_instances=2)[0].startswith(f"{PATH}: pool 'gpu': need 0 <= min_instances")
    with pytest.raises(ValueError):  # what callers that knew only ValueError caught still catches it
        scaling_of(pool(instance_types=["nope"]))


def test_the_ec2_and_gce_provisioners_take_every_type_of_a_mixed_pool():
    ec2 = provisioner_for(pool(region="us-east-1", image_id="ami-1", instance_types=["g5.xlarge", "g5.48xlarge"]))
    assert ec2.config.instance_types == ["g5.xlarge", "g5.48xlarge"]
    single = provisioner_for(pool(region="us-east-1", image_id="ami-1", instance_type="g5.xlarge"))
    assert single.config.instance_types == ["g5.xlarge"]
    gce = provisioner_for(pool(type="gcp", project="p", zones=["z"], image="img",
                               machine_types=["g2-standard-4", {"type": "g2-standard-48"}]))
    assert gce.config.machine_types == ["g2-standard-4", "g2-standard-48"]
    with pytest.raises(ConfigError, match=r"instance_types\[0\]: unknown instance type"):
        provisioner_for(pool(region="us-east-1", image_id="ami-1", instance_types=["nope"]))


def test_a_local_agent_gets_the_slots_of_the_type_launched(tmp_path):
    pools, _, _ = parse_pools([{"pool_name": "gpu", "provider": {
        "type": "local", "instance_types": [{"type": "small", "slots": 1}, {"type": "big", "slots": 4}]}}], None)
    rt = SimpleNamespace(settings=MasterSettings(data_dir=tmp_path, join_token="t", pools=pools))
    command = local_agent_command(rt)  # type: ignore[arg-type]

    def argv(instance_type: str) -> list[str]:
        req = LaunchRequest("r1", "c", "gpu", 1, instance_type, None, False, "")
        return list(provisioner_for(pools[0], local_command=command)._command("local-1", req))  # type: ignore[attr-defined]

    big, small = argv("big"), argv("small")
    assert big[big.index("--slots") + 1] == "4" and big[big.index("--instance-type") + 1] == "big"
    assert small[small.index("--slots") + 1] == "1"
    other = argv("adopted")  # a type the pool does not list: its largest
    assert other[other.index("--slots") + 1] == "4"


def test_describe_lists_every_configured_shape_with_prices_and_live_counts():
    shapes = (Shape("g5.xlarge", 1, 1.006, 0.35, "A10G"), Shape("g5.48xlarge", 8, 16.288, 0.0, "A10G"))

    def row(iid: str, t: str, spot: bool, state: str = "running") -> Instance:
        return Instance(id=iid, pool="gpu", provider="aws", instance_type=t, spot=spot, state=state,
                        price_per_hour=1.0)

    rows = [row("i-1", "g5.xlarge", True), row("i-2", "g5.xlarge", False), row("i-3", "g5.xlarge", False, "terminated"),
            row("i-4", "p3.2xlarge", False), row("i-5", "mystery", True)]
    assert pool_shapes(shapes, rows) == [
        PoolShape(instance_type="g5.xlarge", slots=1, gpu_model="A10G", usd_per_hour=1.006, spot_usd_per_hour=0.35,
                  count=2, spot_count=1),
        PoolShape(instance_type="g5.48xlarge", slots=8, gpu_model="A10G", usd_per_hour=16.288, spot_usd_per_hour=0.0,
                  count=0, spot_count=0),
        PoolShape(instance_type="mystery", slots=0, gpu_model="", usd_per_hour=0.0, spot_usd_per_hour=1.0,
                  count=1, spot_count=1, configured=False),
        PoolShape(instance_type="p3.2xlarge", slots=1, gpu_model="V100", usd_per_hour=3.06, spot_usd_per_hour=0.0,
                  count=1, spot_count=0, configured=False),
    ]
