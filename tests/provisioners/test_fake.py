"""The fake provider's scriptable faults behave as the autoscaler tests will rely on."""

from __future__ import annotations

from typing import Any

import pytest

from provisioners.base import (
    TAG_REQUEST,
    InvalidConfig,
    LaunchRequest,
    NoCapacity,
    Provisioner,
    QuotaExceeded,
    Transient,
)
from provisioners.fake import FakeClock, FakeProvisioner


def req(rid: str = "r1", **kw: Any) -> LaunchRequest:
    base: dict[str, Any] = dict(
        request_id=rid, cluster_id="c1", pool="gpu", count=1, instance_type="g5.xlarge",
        zone="fake-a", spot=False, user_data="",
    )
    base.update(kw)
    return LaunchRequest(**base)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(clock: FakeClock) -> FakeProvisioner:
    return FakeProvisioner(clock=clock)


def test_protocol_and_basic_lifecycle(fake: FakeProvisioner) -> None:
    assert isinstance(fake, Provisioner)
    a = fake.launch(req(count=2))
    fake.launch(req("r2", cluster_id="c2"))
    fake.launch(req("r3", pool="cpu"))
    assert sorted(i.instance_id for i in fake.list_instances("c1", "gpu")) == [i.instance_id for i in a]
    assert a[0].tags[TAG_REQUEST] == "r1" and a[0].zone == "fake-a"
    fake.terminate([a[0].instance_id, a[0].instance_id, "nope"])
    assert [i.instance_id for i in fake.list_instances("c1", "gpu")] == [a[1].instance_id]
    assert fake.terminated == [a[0].instance_id]
    assert len(fake.launched) == 4 and [r.request_id for r in fake.launch_requests] == ["r1", "r2", "r3"]


def test_zone_capacity_and_spot_only(fake: FakeProvisioner) -> None:
    fake.no_capacity(zone="fake-a")
    with pytest.raises(NoCapacity) as e:
        fake.launch(req("r1"))
    assert e.value.zone == "fake-a" and e.value.instance_type == "g5.xlarge"
    assert fake.launch(req("r2", zone="fake-b"))
    fake.restore_capacity()
    fake.no_capacity(instance_type="p4d.24xlarge", spot_only=True)
    with pytest.raises(NoCapacity):
        fake.launch(req("r3", instance_type="p4d.24xlarge", spot=True))
    assert fake.launch(req("r4", instance_type="p4d.24xlarge", spot=False))[0].spot is False
    assert [r.request_id for r, _ in fake.failed_launches] == ["r1", "r3"]


def test_quota_after_n_instances(fake: FakeProvisioner) -> None:
    fake.quota_instances = 3
    launched = fake.launch(req(count=2))
    with pytest.raises(QuotaExceeded):
        fake.launch(req("r2", count=2))
    assert len(fake.launch(req(count=2))) == 2  # a retried request converges, quota or not
    fake.terminate([launched[0].instance_id])
    assert len(fake.launch(req("r3", count=2))) == 2
    assert fake.live_count() == 3


def test_transient_for_next_k_calls(fake: FakeProvisioner) -> None:
    fake.fail_next(2)
    fake.fail_next(1, op="list")
    for _ in range(2):
        with pytest.raises(Transient):
            fake.launch(req())
    assert fake.launch(req())
    with pytest.raises(Transient):
        fake.list_instances("c1", "gpu")
    assert len(fake.list_instances("c1", "gpu")) == 1
    fake.fail_next(1, op="terminate", error=lambda: InvalidConfig("boom"))
    with pytest.raises(InvalidConfig):
        fake.terminate([])


def test_eventual_consistency_by_clock_and_by_calls(fake: FakeProvisioner, clock: FakeClock) -> None:
    fake.list_delay_s = 30
    fake.launch(req())
    assert fake.list_instances("c1", "gpu") == []
    clock.advance(31)
    assert len(fake.list_instances("c1", "gpu")) == 1
    fake.list_delay_s = 0
    fake.list_delay_calls = 2
    fake.launch(req("r2"))
    assert len(fake.list_instances("c1", "gpu")) == 1
    assert len(fake.list_instances("c1", "gpu")) == 1
    assert len(fake.list_instances("c1", "gpu")) == 2


def test_pending_then_running(fake: FakeProvisioner, clock: FakeClock) -> None:
    fake.pending_s = 10
    (inst,) = fake.launch(req())
    assert inst.state == "pending"
    assert fake.list_instances("c1", "gpu")[0].state == "pending"
    clock.advance(10)
    assert fake.list_instances("c1", "gpu")[0].state == "running"


def test_never_register_and_interrupt_and_stop(fake: FakeProvisioner) -> None:
    fake.never_register_next = 1
    a, b, c = fake.launch(req(count=3, spot=True))
    assert not fake.registers(a.instance_id) and fake.registers(b.instance_id)
    fake.interrupt(b.instance_id)
    fake.stop(c.instance_id)
    listed = {i.instance_id: i.state for i in fake.list_instances("c1", "gpu")}
    assert listed == {a.instance_id: "running", c.instance_id: "stopped"}
    assert b.instance_id not in fake.terminated  # nobody asked: an interruption, not a termination
