"""One contract, every provider: ec2 on moto, gce on the local endpoint, local processes, fake.

The autoscaler relies only on these behaviours, so each provider runs the same scenarios:
launch tags every instance and lists it back by tag, other clusters and pools stay invisible,
terminate is idempotent (twice, unknown ids), relaunching a request converges, and a request
no cloud could serve is InvalidConfig before any API call.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from provisioners.base import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    InvalidConfig,
    LaunchRequest,
    Provisioner,
)


@dataclass
class Harness:
    prov: Provisioner
    instance_type: str
    zone: str | None
    unknown_id: str

    def req(self, rid: str = "r1", cluster: str = "c1", pool: str = "gpu", count: int = 2) -> LaunchRequest:
        return LaunchRequest(rid, cluster, pool, count, self.instance_type, self.zone, False, "#!/bin/sh\n")


@pytest.fixture(params=["ec2", "gce", "local", "fake"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    kind = request.param
    if kind == "ec2":
        import boto3

        from provisioners.ec2 import Ec2Config, Ec2Provisioner
        from tests.support.moto_server import stock_image

        url = request.getfixturevalue("moto_url")
        image = stock_image(boto3.client("ec2", region_name="us-west-2", endpoint_url=url))
        cfg = Ec2Config(region="us-west-2", instance_type="g5.xlarge", image_id=image, endpoint_url=url)
        yield Harness(Ec2Provisioner(cfg), "g5.xlarge", "us-west-2a", "i-0123456789abcdef0")
    elif kind == "gce":
        from provisioners.gce import GceConfig, GceProvisioner
        from tests.provisioners.gce_server import GceTestServer

        with GceTestServer() as srv:
            cfg = GceConfig(
                project="p", zones=["us-central1-a"], machine_type="g2-standard-8", image="img", endpoint=srv.url
            )
            yield Harness(GceProvisioner(cfg), "g2-standard-8", "us-central1-a", "det-gone-0-0")
    elif kind == "local":
        from provisioners.local import LocalProvisioner

        local = LocalProvisioner(lambda iid, r: [sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            yield Harness(local, "local", None, "local-0-0")
        finally:
            local.close()
    else:
        from provisioners.fake import FakeProvisioner

        yield Harness(FakeProvisioner(), "g5.xlarge", None, "fake-999999")


def test_is_a_provisioner(harness: Harness) -> None:
    assert isinstance(harness.prov, Provisioner)


def test_launch_tags_and_lists_back(harness: Harness) -> None:
    launched = harness.prov.launch(harness.req())
    assert len(launched) == 2 and len({i.instance_id for i in launched}) == 2
    for inst in launched:
        assert inst.tags[TAG_CLUSTER] == "c1" and inst.tags[TAG_POOL] == "gpu" and inst.tags[TAG_REQUEST] == "r1"
        assert inst.instance_type == harness.instance_type and inst.state in ("pending", "running")
    harness.prov.launch(harness.req("r2", cluster="c2", count=1))
    harness.prov.launch(harness.req("r3", pool="cpu", count=1))
    listed = harness.prov.list_instances("c1", "gpu")
    assert sorted(i.instance_id for i in listed) == sorted(i.instance_id for i in launched)


def test_relaunch_converges(harness: Harness) -> None:
    first = harness.prov.launch(harness.req())
    again = harness.prov.launch(harness.req())
    assert sorted(i.instance_id for i in again) == sorted(i.instance_id for i in first)
    assert len(harness.prov.list_instances("c1", "gpu")) == 2


def test_terminate_is_idempotent(harness: Harness) -> None:
    a, b = harness.prov.launch(harness.req())
    harness.prov.terminate([a.instance_id])
    harness.prov.terminate([a.instance_id, harness.unknown_id])
    harness.prov.terminate([])
    assert [i.instance_id for i in harness.prov.list_instances("c1", "gpu")] == [b.instance_id]


def test_impossible_request_is_invalid_config(harness: Harness) -> None:
    with pytest.raises(InvalidConfig):
        harness.prov.launch(replace(harness.req(), count=0))
    assert harness.prov.list_instances("c1", "gpu") == []
