"""`down`'s cleanup on AWS: stop the master, cancel spot requests, terminate every tagged instance.

Membership is the `det-deployment` tag: the master's pool puts it on every agent it launches
(the provider's extra_tags), the master carries it with `det-role=master`. A spot request counts
when it carries the tag or was fulfilled by a tagged instance; its own instance goes with it.
The master is only stopped: Pulumi owns it and deletes it with the stack.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from controlplane.common.aws_errors import describe, sdk_errors
from infra.options import TAG_DEPLOYMENT, TAG_ROLE
from infra.teardown import TeardownError, TeardownReport, wait_gone

ALIVE = ("pending", "running", "stopping", "stopped", "shutting-down")
STILL_RUNNING = ("pending", "running", "stopping", "shutting-down")
OPEN_SPOT = ("open", "active")


def _instances(ec2: Any, cluster_id: str) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [cluster_id]},
        {"Name": "instance-state-name", "Values": list(ALIVE)}])
    return [i for page in pages for r in page.get("Reservations", []) for i in r.get("Instances", [])]


def _role(instance: dict[str, Any]) -> str | None:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == TAG_ROLE), None)


def _spot_requests(ec2: Any, cluster_id: str, instance_ids: set[str]) -> list[dict[str, Any]]:
    # The tag filter finds requests tagged at creation; the rest are found by their instance.
    found = {r["SpotInstanceRequestId"]: r for r in ec2.describe_spot_instance_requests(
        Filters=[{"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [cluster_id]}]).get("SpotInstanceRequests", [])}
    if instance_ids:
        for r in ec2.describe_spot_instance_requests().get("SpotInstanceRequests", []):
            if r.get("InstanceId") in instance_ids:
                found[r["SpotInstanceRequestId"]] = r
    return [r for r in found.values() if r.get("State") in OPEN_SPOT]


def _states(ec2: Any, ids: list[str]) -> dict[str, str]:
    pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=ids)
    return {i["InstanceId"]: i["State"]["Name"] for page in pages for r in page.get("Reservations", [])
            for i in r.get("Instances", [])}


def teardown(ec2: Any, cluster_id: str, *, say: Callable[[str], None] = print, timeout_s: float = 600.0,
             poll_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> TeardownReport:
    """Clean up the deployment's instances; `ec2` is a boto3 EC2 client in the deployment's region."""
    report = TeardownReport()
    try:
        instances = _instances(ec2, cluster_id)
        masters = [i["InstanceId"] for i in instances if _role(i) == "master" and i["State"]["Name"] != "stopped"]
        if masters:
            say(f"Stopping the master ({', '.join(masters)}) so that it launches no more agents...")
            ec2.stop_instances(InstanceIds=masters)
            report.master_stopped = masters
        agents = {i["InstanceId"] for i in instances if _role(i) != "master"}
        requests = _spot_requests(ec2, cluster_id, agents)
        if requests:
            report.spot_requests_cancelled = sorted(r["SpotInstanceRequestId"] for r in requests)
            say(f"Cancelling {len(requests)} spot request(s)...")
            ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=report.spot_requests_cancelled)
            agents |= {r["InstanceId"] for r in requests if r.get("InstanceId")}
        if agents:
            report.terminated = sorted(agents)
            say(f"Terminating {len(agents)} agent instance(s): {', '.join(report.terminated)}")
            ec2.terminate_instances(InstanceIds=report.terminated)
            ids = list(report.terminated)
            report.still_running = wait_gone(
                lambda: sorted(i for i, state in _states(ec2, ids).items() if state in STILL_RUNNING),
                verb="terminate", say=say, timeout_s=timeout_s, poll_s=poll_s, clock=clock, sleep=sleep)
    except sdk_errors() as e:
        raise TeardownError(f"cleaning up the instances of {cluster_id} failed: {describe(e)}") from e
    return report
