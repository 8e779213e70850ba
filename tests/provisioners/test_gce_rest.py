"""GCE provisioner: the real google-cloud-compute client (REST) against a local endpoint.

Checks the request bodies the issue requires (labels, startup-script, scheduling for SPOT and
GPU STANDARD, accelerators, auto-deleted boot disk), label-filtered listing with paging,
idempotent relaunch and delete, and that stockouts and quota errors arrive classified.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import google.cloud.compute_v1  # noqa: F401  (required: fail loudly if missing)
import pytest

from provisioners.base import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    Fatal,
    InvalidConfig,
    LaunchRequest,
    NoCapacity,
    Provisioner,
    QuotaExceeded,
)
from provisioners.gce import GceConfig, GceProvisioner, instance_name
from tests.provisioners.gce_server import Fault, GceTestServer

ZONES = ["us-central1-a", "us-central1-b"]


@pytest.fixture
def server() -> Iterator[GceTestServer]:
    with GceTestServer() as srv:
        yield srv


def make(server: GceTestServer, **kw: Any) -> GceProvisioner:
    cfg = GceConfig(
        project="proj", zones=ZONES, machine_type=kw.pop("machine_type", "g2-standard-8"),
        image="projects/x/global/images/agent",
        gpu_type=kw.pop("gpu_type", "nvidia-l4"), gpu_count=kw.pop("gpu_count", 1),
        labels={"Team": "ML Infra"}, endpoint=server.url, **kw,
    )
    return GceProvisioner(cfg)


def req(rid: str = "Req_0001", cluster: str = "Cluster.One", pool: str = "gpu_pool", **kw: Any) -> LaunchRequest:
    base: dict[str, Any] = dict(
        request_id=rid, cluster_id=cluster, pool=pool, count=2, instance_type="g2-standard-8",
        zone=ZONES[1], spot=False, user_data="#!/bin/bash\necho boot\n",
    )
    base.update(kw)
    return LaunchRequest(**base)


def stored(server: GceTestServer) -> list[dict[str, Any]]:
    return list(server.state.instances.values())


def test_is_a_provisioner(server: GceTestServer) -> None:
    assert isinstance(make(server), Provisioner)


def test_launch_standard_gpu(server: GceTestServer) -> None:
    prov = make(server)
    launched = prov.launch(req())
    names = [instance_name("gpu_pool", "Req_0001", n) for n in range(2)]
    assert [i.instance_id for i in launched] == names and names[0].startswith("det-gpu-pool-")
    for inst in launched:
        assert inst.zone == ZONES[1] and inst.instance_type == "g2-standard-8" and not inst.spot
        assert inst.state == "running" and inst.launched_at > 0
        assert inst.tags[TAG_CLUSTER] == "cluster-one" and inst.tags[TAG_POOL] == "gpu_pool"
        assert inst.tags[TAG_REQUEST] == "req_0001" and inst.tags["team"] == "ml-infra"
    body = stored(server)[0]
    assert body["metadata"]["items"] == [{"key": "startup-script", "value": "#!/bin/bash\necho boot\n"}]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["scheduling"].get("provisioningModel") == "STANDARD"
    assert body["guestAccelerators"] == [
        {"acceleratorType": f"zones/{ZONES[1]}/acceleratorTypes/nvidia-l4", "acceleratorCount": 1}
    ]
    disk = body["disks"][0]
    assert disk["boot"] and disk["autoDelete"] and disk["initializeParams"]["diskSizeGb"] == "200"
    assert body["machineType"] == f"zones/{ZONES[1]}/machineTypes/g2-standard-8"


def test_launch_spot(server: GceTestServer) -> None:
    prov = make(server, provisioning_model="SPOT")
    launched = prov.launch(req(count=1, spot=True))
    assert [i.spot for i in launched] == [True]
    sched = stored(server)[0]["scheduling"]
    assert sched["provisioningModel"] == "SPOT" and sched["instanceTerminationAction"] == "DELETE"


def test_cpu_standard_has_no_maintenance_override(server: GceTestServer) -> None:
    make(server, gpu_type=None, gpu_count=0).launch(req(count=1))
    body = stored(server)[0]
    assert "guestAccelerators" not in body and "onHostMaintenance" not in body.get("scheduling", {})


def test_list_by_labels_paginated_and_terminate(server: GceTestServer) -> None:
    server.state.page_size = 2
    prov = make(server)
    mine = prov.launch(req("r1", count=3, zone=ZONES[0])) + prov.launch(req("r2", count=2, zone=ZONES[1]))
    prov.launch(req("r3", cluster="other", count=1))
    prov.launch(req("r4", pool="cpu", count=1))
    listed = prov.list_instances("Cluster.One", "gpu_pool")
    assert sorted(i.instance_id for i in listed) == sorted(i.instance_id for i in mine)
    assert {i.zone for i in listed} == set(ZONES)
    assert sum(1 for m, p in server.state.requests if p.endswith("/aggregated/instances")) >= 3

    fresh = GceProvisioner(prov.config)  # no zone cache: must find the zone itself
    fresh.terminate([mine[0].instance_id, mine[-1].instance_id, "det-gone-00000000-0"])
    fresh.terminate([mine[0].instance_id])  # already gone
    left = prov.list_instances("Cluster.One", "gpu_pool")
    assert len(left) == 3 and mine[0].instance_id not in {i.instance_id for i in left}


def test_relaunch_same_request_is_idempotent(server: GceTestServer) -> None:
    prov = make(server)
    first = prov.launch(req(count=2))
    again = prov.launch(req(count=2))
    assert [i.instance_id for i in again] == [i.instance_id for i in first]
    assert len(stored(server)) == 2


def test_slow_insert_returns_pending_at_deadline(server: GceTestServer) -> None:
    server.state.hold_operations = True
    prov = make(server, operation_timeout_s=0.3)
    launched = prov.launch(req(count=2))
    assert [i.state for i in launched] == ["pending", "pending"]
    assert launched[0].tags[TAG_REQUEST] == "req_0001"
    assert len(prov.list_instances("Cluster.One", "gpu_pool")) == 2


def test_zone_stockout_is_no_capacity_with_partial(server: GceTestServer) -> None:
    msg = "The zone 'projects/proj/zones/us-central1-b' does not have enough resources available"
    server.state.insert_faults[ZONES[1]] = [Fault(503, msg, op_code="ZONE_RESOURCE_POOL_EXHAUSTED")]
    prov = make(server)
    with pytest.raises(NoCapacity) as e:
        prov.launch(req(count=1))
    assert e.value.zone == ZONES[1] and e.value.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert "does not have enough resources" in e.value.provider_message
    assert server.state.instances == {}


def test_partial_launch_leaves_tagged_instances(server: GceTestServer) -> None:
    """Instance 0 exists already (a retried request: 409 counts as done); instance 1 stocks out.
    The one that exists is found again by its labels."""
    prov = make(server)
    prov.launch(req(count=1))
    server.state.insert_faults[ZONES[1]] = [Fault(503, "stockout", op_code="ZONE_RESOURCE_POOL_EXHAUSTED")]
    with pytest.raises(NoCapacity) as e:
        prov.launch(req(count=2))
    assert e.value.zone == ZONES[1]
    listed = prov.list_instances("Cluster.One", "gpu_pool")
    assert [i.instance_id for i in listed] == [instance_name("gpu_pool", "Req_0001", 0)]


def test_quota_http_error(server: GceTestServer) -> None:
    server.state.insert_faults[ZONES[1]] = [
        Fault(403, "Quota 'NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region us-central1.", reason="quotaExceeded")
    ]
    with pytest.raises(QuotaExceeded) as e:
        make(server).launch(req(count=1))
    assert "NVIDIA_L4_GPUS" in e.value.provider_message and e.value.zone == ZONES[1]


def test_quota_operation_error(server: GceTestServer) -> None:
    server.state.insert_faults[ZONES[1]] = [Fault(403, "Quota 'CPUS' exceeded.", op_code="QUOTA_EXCEEDED")]
    with pytest.raises(QuotaExceeded):
        make(server).launch(req(count=1))


def test_permission_and_bad_image(server: GceTestServer) -> None:
    server.state.insert_faults[ZONES[1]] = [
        Fault(403, "Required 'compute.instances.create' permission", reason="forbidden"),
        Fault(404, "The resource 'projects/x/global/images/agent' was not found", reason="notFound"),
    ]
    prov = make(server)
    with pytest.raises(Fatal):
        prov.launch(req(count=1))
    with pytest.raises(InvalidConfig):
        prov.launch(req(count=1))


def test_request_outside_config(server: GceTestServer) -> None:
    prov = make(server)
    with pytest.raises(InvalidConfig):
        prov.launch(req(zone="europe-west4-a"))
    with pytest.raises(InvalidConfig):
        prov.launch(req(instance_type="a2-highgpu-1g"))
    assert server.state.requests == []


def test_a_mixed_pool_launches_exactly_the_machine_type_each_request_names(server: GceTestServer) -> None:
    prov = make(server, machine_type=["g2-standard-4", "a2-highgpu-8g"], gpu_type=None, gpu_count=0)
    small = prov.launch(req("Req_small", count=1, instance_type="g2-standard-4"))
    big = prov.launch(req("Req_big", count=1, instance_type="a2-highgpu-8g"))
    assert [i.instance_type for i in small + big] == ["g2-standard-4", "a2-highgpu-8g"]
    assert sorted(b["machineType"] for b in stored(server)) == [
        f"zones/{ZONES[1]}/machineTypes/a2-highgpu-8g", f"zones/{ZONES[1]}/machineTypes/g2-standard-4"]
    with pytest.raises(InvalidConfig, match="not one of this pool's g2-standard-4, a2-highgpu-8g"):
        prov.launch(req("Req_other", count=1, instance_type="g2-standard-8"))
