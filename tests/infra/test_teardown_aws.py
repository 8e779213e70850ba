"""`down`'s AWS cleanup against moto: this deployment's instances go, everything else stays."""

from __future__ import annotations

from typing import Any

import pytest

from infra.options import TAG_DEPLOYMENT, TAG_ROLE
from infra.teardown import TeardownError
from infra.teardown.aws import teardown
from tests.infra.moto_fixtures import REGION
from tests.support.moto_server import stock_image

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ec2(session):
    return session.client("ec2", region_name=REGION)


def launch(ec2: Any, tags: dict[str, str], spot: bool = False) -> str:
    ami = stock_image(ec2)
    extra: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    if tags:
        extra["TagSpecifications"] = [{"ResourceType": "instance",
                                       "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    return ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge", **extra)[
        "Instances"][0]["InstanceId"]


def states(ec2: Any) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]}


def test_down_stops_the_master_cancels_spot_requests_and_terminates_only_this_deployments_agents(ec2):
    master = launch(ec2, {TAG_DEPLOYMENT: "demo", TAG_ROLE: "master"})
    agent = launch(ec2, {TAG_DEPLOYMENT: "demo", TAG_ROLE: "agent", "det-pool": "gpu"})
    spot_agent = launch(ec2, {TAG_DEPLOYMENT: "demo", TAG_ROLE: "agent"}, spot=True)
    ami = stock_image(ec2)
    request = ec2.request_spot_instances(
        InstanceCount=1, LaunchSpecification={"ImageId": ami, "InstanceType": "g4dn.xlarge"},
        TagSpecifications=[{"ResourceType": "spot-instances-request",
                            "Tags": [{"Key": TAG_DEPLOYMENT, "Value": "demo"}]}])["SpotInstanceRequests"][0]
    spot_request_id = request["SpotInstanceRequestId"]
    fulfilled = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[spot_request_id])[
        "SpotInstanceRequests"][0]["InstanceId"]
    untagged = launch(ec2, {})
    other_master = launch(ec2, {TAG_DEPLOYMENT: "other", TAG_ROLE: "master"})
    other_agent = launch(ec2, {TAG_DEPLOYMENT: "other", TAG_ROLE: "agent"})
    said: list[str] = []

    report = teardown(ec2, "demo", say=said.append, poll_s=0)

    after = states(ec2)
    assert after[master] == "stopped"
    assert {after[i] for i in (agent, spot_agent, fulfilled)} == {"terminated"}
    assert {after[i] for i in (untagged, other_master, other_agent)} == {"running"}
    # AWS keeps a cancelled request as "cancelled"; moto forgets it. Either way it is no longer open.
    left = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    assert [r for r in left if r["SpotInstanceRequestId"] == spot_request_id and r["State"] in ("open", "active")] \
        == []
    assert report.master_stopped == [master]
    assert report.spot_requests_cancelled == [spot_request_id]
    assert report.terminated == sorted([agent, spot_agent, fulfilled])
    assert report.still_running == []
    assert any("Stopping the master" in s for s in said) and any("Terminating 3" in s for s in said)
    assert f"Terminated agents: {', '.join(sorted([agent, spot_agent, fulfilled]))}." in report.lines()


def test_down_of_a_deployment_with_nothing_left_does_nothing(ec2):
    survivor = launch(ec2, {TAG_DEPLOYMENT: "other"})
    report = teardown(ec2, "demo", say=lambda _: None)
    assert (report.master_stopped, report.terminated, report.spot_requests_cancelled) == ([], [], [])
    assert states(ec2)[survivor] == "running"


class SlowEc2:
    """An EC2 whose one agent never finishes shutting down: the wait must give up, not hang."""

    def __init__(self) -> None:
        self.terminated: list[str] = []

    def get_paginator(self, _name: str) -> Any:
        inst = {"InstanceId": "i-slow", "State": {"Name": "shutting-down"},
                "Tags": [{"Key": TAG_DEPLOYMENT, "Value": "demo"}]}
        return type("P", (), {"paginate": lambda _self, **_: [{"Reservations": [{"Instances": [inst]}]}]})()

    def describe_spot_instance_requests(self, **_: Any) -> dict[str, Any]:
        return {"SpotInstanceRequests": []}

    def terminate_instances(self, InstanceIds: list[str]) -> None:  # boto3's name
        self.terminated += InstanceIds


def test_the_wait_is_bounded_and_reports_what_is_still_shutting_down():
    now = [0.0]
    said: list[str] = []
    report = teardown(SlowEc2(), "demo", say=said.append, timeout_s=30, poll_s=10, clock=lambda: now[0],
                      sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert report.still_running == ["i-slow"]
    assert said[-1] == "Gave up waiting after 30s; still shutting down: i-slow"
    assert [s for s in said if s.startswith("Waiting for 1 instance(s)")] != []


def test_a_failed_call_is_the_providers_message(session, monkeypatch):
    from botocore.exceptions import ClientError

    ec2 = session.client("ec2", region_name=REGION)

    def deny(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "UnauthorizedOperation",
                                     "Message": "You are not authorized to perform this operation."}},
                          "DescribeInstances")

    ec2.meta.events.register("before-call.ec2.DescribeInstances", deny)
    with pytest.raises(TeardownError, match="You are not authorized to perform this operation. "
                                            r"\(UnauthorizedOperation\)"):
        teardown(ec2, "demo", say=lambda _: None)
