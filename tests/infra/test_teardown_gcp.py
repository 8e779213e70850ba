"""`down`'s GCP cleanup against the project's GCE test server (tests/provisioners/gce_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.gcp_clients import GcpClients
from infra.options import TAG_DEPLOYMENT, TAG_ROLE
from infra.teardown import TeardownError
from infra.teardown.gcp import teardown
from tests.provisioners.gce_server import GceTestServer

pytestmark = pytest.mark.timeout(120)
PROJECT = "proj-1"


@pytest.fixture
def gce() -> Iterator[GceTestServer]:
    with GceTestServer() as srv:
        yield srv


def put(srv: GceTestServer, zone: str, name: str, labels: dict[str, str]) -> None:
    base = f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}"
    srv.state.instances[(PROJECT, zone, name)] = {
        "name": name, "id": str(abs(hash(name)) % 10**12), "status": "RUNNING", "labels": labels,
        "zone": base, "selfLink": f"{base}/instances/{name}"}


def status(srv: GceTestServer) -> dict[str, str]:
    return {name: inst["status"] for (_p, _z, name), inst in srv.state.instances.items()}


def test_down_stops_the_master_and_deletes_this_deployments_agents_in_every_zone_of_the_region(gce):
    put(gce, "us-central1-a", "demo-master", {TAG_DEPLOYMENT: "demo", TAG_ROLE: "master"})
    put(gce, "us-central1-a", "demo-gpu-1", {TAG_DEPLOYMENT: "demo", TAG_ROLE: "agent"})
    put(gce, "us-central1-b", "demo-gpu-2", {TAG_DEPLOYMENT: "demo", TAG_ROLE: "agent"})
    put(gce, "us-central1-a", "unlabelled", {})
    put(gce, "us-central1-a", "other-gpu-1", {TAG_DEPLOYMENT: "other", TAG_ROLE: "agent"})
    put(gce, "europe-west4-a", "demo-elsewhere", {TAG_DEPLOYMENT: "demo"})  # another region: not ours to touch
    said: list[str] = []

    report = teardown(GcpClients(endpoint=gce.url), PROJECT, "us-central1", "demo", say=said.append, poll_s=0)

    assert status(gce) == {"demo-master": "TERMINATED", "unlabelled": "RUNNING", "other-gpu-1": "RUNNING",
                           "demo-elsewhere": "RUNNING"}
    assert report.master_stopped == ["demo-master"]
    assert report.terminated == ["demo-gpu-1", "demo-gpu-2"]
    assert report.still_running == []
    stops = [path for method, path in gce.state.requests if path.endswith("/stop")]
    assert stops == [f"/compute/v1/projects/{PROJECT}/zones/us-central1-a/instances/demo-master/stop"]
    assert said[0].startswith("Stopping the master (demo-master)")


def test_a_second_down_finds_nothing_to_do(gce):
    put(gce, "us-central1-a", "demo-master", {TAG_DEPLOYMENT: "demo", TAG_ROLE: "master"})
    clients = GcpClients(endpoint=gce.url)
    teardown(clients, PROJECT, "us-central1", "demo", say=lambda _: None, poll_s=0)
    report = teardown(clients, PROJECT, "us-central1", "demo", say=lambda _: None, poll_s=0)
    assert (report.master_stopped, report.terminated) == ([], [])


class Refusing(GcpClients):
    """The real clients' error at the client boundary: the project refuses the list."""

    def instances(self):
        from google.api_core.exceptions import Forbidden

        class Instances:
            def aggregated_list(self, **_: object) -> None:
                raise Forbidden("Required 'compute.instances.list' permission for 'projects/proj-1'")

        return Instances()


def test_an_api_error_is_the_providers_message():
    with pytest.raises(TeardownError, match="Required 'compute.instances.list' permission for 'projects/proj-1'"):
        teardown(Refusing(), PROJECT, "us-central1", "demo", say=lambda _: None)
