"""EC2 provisioner against moto in server mode, through real boto3 with endpoint_url.

Checks what the issue requires of every launch (tags on instance and volume, IMDSv2 required,
shutdown = terminate, root volume deleted on termination, spot market options), that listing
by tag never returns another cluster's or pool's instances, and that terminate is idempotent.
"""

from __future__ import annotations

import base64
from typing import Any

import boto3
import pytest

from provisioners.base import TAG_CLUSTER, TAG_POOL, TAG_REQUEST, InvalidConfig, LaunchRequest, Provisioner
from provisioners.ec2 import Ec2Config, Ec2Provisioner
from tests.provisioners.conftest import REGION
from tests.support.moto_server import stock_image

ZONES = [f"{REGION}a", f"{REGION}b"]


@pytest.fixture
def ec2(moto_url: str) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_url)


@pytest.fixture
def image_id(ec2: Any) -> str:
    return stock_image(ec2)


def make(moto_url: str, image_id: str, **kw: Any) -> Ec2Provisioner:
    cfg = Ec2Config(
        region=REGION,
        instance_type=kw.pop("instance_type", ["g5.xlarge", "g4dn.xlarge"]),
        zones=ZONES,
        image_id=image_id,
        endpoint_url=moto_url,
        root_volume_gb=120,
        **kw,
    )
    return Ec2Provisioner(cfg)


def req(rid: str = "req-00000001", cluster: str = "c1", pool: str = "gpu", **kw: Any) -> LaunchRequest:
    base: dict[str, Any] = dict(
        request_id=rid, cluster_id=cluster, pool=pool, count=2, instance_type="g5.xlarge",
        zone=ZONES[1], spot=False, user_data="#!/bin/bash\necho hello\n",
    )
    base.update(kw)
    return LaunchRequest(**base)


def test_is_a_provisioner(moto_url: str, image_id: str) -> None:
    assert isinstance(make(moto_url, image_id), Provisioner)


def test_launch_hardened_and_tagged(moto_url: str, image_id: str, ec2: Any) -> None:
    prov = make(moto_url, image_id)
    launched = prov.launch(req())
    assert len(launched) == 2
    ids = [i.instance_id for i in launched]
    for inst in launched:
        assert inst.zone == ZONES[1] and inst.instance_type == "g5.xlarge" and not inst.spot
        assert inst.tags[TAG_CLUSTER] == "c1" and inst.tags[TAG_POOL] == "gpu"
        assert inst.tags[TAG_REQUEST] == "req-00000001" and inst.launch_request == "req-00000001"
        assert inst.state in ("pending", "running") and inst.launched_at > 0

    raw = [i for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]]
    for inst in raw:
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert inst["Placement"]["AvailabilityZone"] == ZONES[1]
        attr = ec2.describe_instance_attribute(
            InstanceId=inst["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
        )
        assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        ud = ec2.describe_instance_attribute(InstanceId=inst["InstanceId"], Attribute="userData")
        assert base64.b64decode(ud["UserData"]["Value"]).decode() == "#!/bin/bash\necho hello\n"
        mappings = inst["BlockDeviceMappings"]
        assert mappings and all(m["Ebs"]["DeleteOnTermination"] for m in mappings)
        vol_ids = [m["Ebs"]["VolumeId"] for m in mappings]
        vols = ec2.describe_volumes(VolumeIds=vol_ids)["Volumes"]
        assert {v["Size"] for v in vols} == {120}
        for v in vols:
            vtags = {t["Key"]: t["Value"] for t in v.get("Tags", [])}
            assert vtags[TAG_CLUSTER] == "c1" and vtags[TAG_REQUEST] == "req-00000001"


def test_spot_launch_sets_market_options(moto_url: str, image_id: str, ec2: Any) -> None:
    prov = make(moto_url, image_id, spot=True)
    params = prov._run_params(req(spot=True))
    assert params["InstanceMarketOptions"]["MarketType"] == "spot"
    assert params["InstanceMarketOptions"]["SpotOptions"]["InstanceInterruptionBehavior"] == "terminate"
    launched = prov.launch(req(spot=True, count=1))
    assert [i.spot for i in launched] == [True]
    listed = prov.list_instances("c1", "gpu")
    assert [i.spot for i in listed] == [True]
    on_demand = prov._run_params(req(spot=False))
    assert "InstanceMarketOptions" not in on_demand


def test_list_by_tags_excludes_other_clusters_pools_and_terminated(
    moto_url: str, image_id: str
) -> None:
    prov = make(moto_url, image_id)
    mine = prov.launch(req("r-mine", count=2))
    prov.launch(req("r-other-cluster", cluster="c2", count=1))
    prov.launch(req("r-other-pool", pool="cpu", count=1))
    listed = prov.list_instances("c1", "gpu")
    assert sorted(i.instance_id for i in listed) == sorted(i.instance_id for i in mine)

    prov.terminate([mine[0].instance_id])
    left = prov.list_instances("c1", "gpu")
    assert [i.instance_id for i in left] == [mine[1].instance_id]
    assert len(prov.list_instances("c2", "gpu")) == 1


def test_list_paginates(moto_url: str, image_id: str) -> None:
    prov = make(moto_url, image_id)
    prov.page_size = 5
    calls: list[str] = []
    prov.client.meta.events.register("before-send.ec2.DescribeInstances", lambda **kw: calls.append("x"))
    for n in range(7):
        prov.launch(req(f"r-{n}", count=2, zone=None))
    assert len({i.instance_id for i in prov.list_instances("c1", "gpu")}) == 14
    assert len(calls) >= 2  # moto pages by reservation: 7 reservations in pages of 5


def test_relaunch_same_request_converges(moto_url: str, image_id: str) -> None:
    prov = make(moto_url, image_id)
    first = prov.launch(req(count=2))
    again = prov.launch(req(count=2))
    assert sorted(i.instance_id for i in again) == sorted(i.instance_id for i in first)
    assert len(prov.list_instances("c1", "gpu")) == 2
    assert prov._run_params(req())["ClientToken"] == "req-00000001"


def test_terminate_is_idempotent(moto_url: str, image_id: str) -> None:
    prov = make(moto_url, image_id)
    ids = [i.instance_id for i in prov.launch(req(count=2))]
    prov.terminate(ids)
    prov.terminate(ids)  # already terminated
    prov.terminate([ids[0], "i-0123456789abcdef0"])  # one never existed
    prov.terminate([])
    assert prov.list_instances("c1", "gpu") == []


def test_request_outside_config_is_invalid(moto_url: str, image_id: str) -> None:
    prov = make(moto_url, image_id)
    with pytest.raises(InvalidConfig) as e:
        prov.launch(req(instance_type="p4d.24xlarge"))
    assert e.value.instance_type == "p4d.24xlarge"
    with pytest.raises(InvalidConfig):
        prov.launch(req(zone="eu-west-1a"))
    with pytest.raises(InvalidConfig):
        prov.launch(req(count=0))


def test_unknown_image_is_invalid_config(moto_url: str) -> None:
    prov = make(moto_url, "ami-00000000deadbeef")
    with pytest.raises(InvalidConfig) as e:
        prov.launch(req())
    assert e.value.provider_message


def test_unreachable_endpoint_is_transient() -> None:
    from provisioners.base import Transient

    cfg = Ec2Config(region=REGION, instance_type="g5.xlarge", image_id="ami-1", endpoint_url="http://127.0.0.1:9")
    from botocore.config import Config

    client = boto3.client(
        "ec2", region_name=REGION, endpoint_url=cfg.endpoint_url, aws_access_key_id="x",
        aws_secret_access_key="x", config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(Transient):
        Ec2Provisioner(cfg, client=client).list_instances("c1", "gpu")


def test_a_mixed_pool_launches_exactly_the_type_each_request_names(moto_url: str, image_id: str, ec2: Any) -> None:
    from controlplane.master.autoscaling.providers import provisioner_for
    from controlplane.master.pools import parse_pools

    provider = {"type": "aws", "region": REGION, "image_id": image_id, "endpoint_url": moto_url, "zones": ZONES,
                "instance_types": ["g5.xlarge", {"type": "g5.48xlarge"}, {"type": "p4d.24xlarge", "slots": 8}]}
    prov = provisioner_for(parse_pools([{"pool_name": "gpu", "provider": provider}], None)[0][0])
    small = prov.launch(req("req-small", count=1, instance_type="g5.xlarge"))
    big = prov.launch(req("req-big", count=1, instance_type="g5.48xlarge"))
    assert [i.instance_type for i in small + big] == ["g5.xlarge", "g5.48xlarge"]
    raw = {i["InstanceId"]: i["InstanceType"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}
    assert raw == {small[0].instance_id: "g5.xlarge", big[0].instance_id: "g5.48xlarge"}
    assert sorted(i.instance_type for i in prov.list_instances("c1", "gpu")) == ["g5.48xlarge", "g5.xlarge"]
    with pytest.raises(InvalidConfig):
        prov.launch(req("req-other", count=1, instance_type="g4dn.xlarge"))  # not one of the pool's
