"""`down`'s cleanup on GCP: stop the master, delete every instance labelled with the deployment.

Membership is the `det-deployment` label (the master's pool labels every agent it launches; the
master carries `det-role=master`), in the zones of the deployment's region. GCE has no separate
spot requests: a spot VM is an instance like any other. The master is only stopped: Pulumi owns
it. Deletes are not waited on one by one; the labelled list is polled until they are gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controlplane.common.gcp_errors import is_not_found, message, sdk_errors
from infra.gcp_clients import GcpClients
from infra.options import TAG_DEPLOYMENT, TAG_ROLE
from infra.teardown import TeardownError, TeardownReport, wait_gone

STOPPED = ("STOPPING", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED")


@dataclass(frozen=True)
class Found:
    name: str
    zone: str
    status: str
    role: str | None


def _labelled(instances: Any, project: str, region: str, cluster_id: str) -> list[Found]:
    pager = instances.aggregated_list(request={"project": project,
                                               "filter": f'labels.{TAG_DEPLOYMENT} = "{cluster_id}"'})
    found = []
    for _scope, scoped in pager:
        for raw in scoped.instances:
            zone = raw.zone.rsplit("/", 1)[-1]
            if zone.startswith(region + "-"):
                found.append(Found(raw.name, zone, raw.status, dict(raw.labels).get(TAG_ROLE)))
    return found


def teardown(clients: GcpClients, project: str, region: str, cluster_id: str, *,
             say: Callable[[str], None] = print, timeout_s: float = 600.0, poll_s: float = 5.0,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> TeardownReport:
    report = TeardownReport()
    instances = clients.instances()
    try:
        found = _labelled(instances, project, region, cluster_id)
        masters = [f for f in found if f.role == "master" and f.status not in STOPPED]
        if masters:
            say(f"Stopping the master ({', '.join(m.name for m in masters)}) so that it launches no more agents...")
            ops = clients.zone_operations()
            for m in masters:
                op = instances.stop_unary(project=project, zone=m.zone, instance=m.name)
                done = ops.wait(project=project, zone=m.zone, operation=op.name)
                if (err := operation_error(done)) is not None:
                    raise TeardownError(f"stopping the master {m.name} failed: {err}")
            report.master_stopped = [m.name for m in masters]
        agents = [f for f in found if f.role != "master"]
        if agents:
            report.terminated = sorted(a.name for a in agents)
            say(f"Deleting {len(agents)} agent instance(s): {', '.join(report.terminated)}")
            for a in agents:
                _delete(instances, project, a)
            names = set(report.terminated)
            report.still_running = wait_gone(
                lambda: sorted(f.name for f in _labelled(instances, project, region, cluster_id) if f.name in names),
                verb="be deleted", say=say, timeout_s=timeout_s, poll_s=poll_s, clock=clock, sleep=sleep)
    except sdk_errors() as e:
        raise TeardownError(f"cleaning up the instances of {cluster_id} failed: {message(e)}") from e
    return report


def _delete(instances: Any, project: str, inst: Found) -> None:
    try:
        op = instances.delete_unary(project=project, zone=inst.zone, instance=inst.name)
    except sdk_errors() as e:
        if is_not_found(e):  # already gone: what we wanted
            return
        raise
    err = operation_error(op)
    if err is not None and "not found" not in err.lower():
        raise TeardownError(f"deleting {inst.name} failed: {err}")


def operation_error(op: Any) -> str | None:
    """A zone operation that finished with an error: its message (the provisioners read operations), else None."""
    from provisioners.gce_errors import operation_error as read_operation_error

    err = read_operation_error(op)
    return err.provider_message if err is not None else None
