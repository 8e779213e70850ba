"""GCP preflight through the real google-cloud-compute clients against a small local REST server.

The project's GCE test server (tests/provisioners/gce_server.py) serves instances only, so this
module serves the three reads preflight makes (machine type, accelerator type, region quotas)
from a table a test edits; an unknown name is GCE's 404.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from infra.gcp_clients import GcpClients
from infra.options import GcpOptions
from infra.preflight.gcp import check

pytestmark = pytest.mark.timeout(60)
PROJECT = "proj-1"


class Catalog:
    def __init__(self) -> None:
        self.machine_types = {"n2-standard-2": 2, "n1-standard-8": 8}
        self.accelerators = {"nvidia-tesla-t4"}
        self.quotas = {"CPUS": 72.0, "N2_CPUS": 24.0, "NVIDIA_T4_GPUS": 8.0, "PREEMPTIBLE_NVIDIA_T4_GPUS": 16.0}
        self.status = 200  # anything else: every request answers this error with `message`
        self.message = ""


def serve(catalog: Catalog) -> ThreadingHTTPServer:
    base = f"/compute/v1/projects/{PROJECT}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return

        def send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def error(self, status: int, message: str) -> None:
            self.send(status, {"error": {"code": status, "message": message, "errors": [{"message": message}]}})

        def do_GET(self) -> None:  # http.server's name
            if catalog.status != 200:
                return self.error(catalog.status, catalog.message)
            if m := re.fullmatch(base + r"/zones/([^/]+)/machineTypes/([^/?]+)", self.path.split("?")[0]):
                if m[2] in catalog.machine_types:
                    return self.send(200, {"name": m[2], "guestCpus": catalog.machine_types[m[2]]})
            elif m := re.fullmatch(base + r"/zones/([^/]+)/acceleratorTypes/([^/?]+)", self.path.split("?")[0]):
                if m[2] in catalog.accelerators:
                    return self.send(200, {"name": m[2]})
            elif m := re.fullmatch(base + r"/regions/([^/?]+)", self.path.split("?")[0]):
                return self.send(200, {"name": m[1], "quotas": [{"metric": k, "limit": v, "usage": 0.0}
                                                                 for k, v in catalog.quotas.items()]})
            self.error(404, f"The resource '{self.path}' was not found")

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def catalog() -> Catalog:
    return Catalog()


@pytest.fixture
def clients(catalog: Catalog) -> Iterator[GcpClients]:
    httpd = serve(catalog)
    # A short poll: shutdown() waits up to one (0.5 s by default).
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield GcpClients(endpoint=f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def opts(**kw: Any) -> GcpOptions:
    base: dict[str, Any] = {"cluster_id": "demo", "project_id": PROJECT, "region": "us-central1",
                            "zone": "us-central1-a", "inbound_cidr": "203.0.113.7/32"}
    return GcpOptions(**{**base, **kw})


def test_a_workable_request_passes(clients):
    report = check(opts(max_dynamic_agents=5), clients)
    assert (report.failures, report.warnings) == ([], [])


def test_the_gpu_quota_too_low_names_the_metric_the_numbers_and_the_flag(clients, catalog):
    catalog.quotas["NVIDIA_T4_GPUS"] = 4.0
    report = check(opts(max_dynamic_agents=5, gpus_per_agent=1), clients)
    assert report.failures == ["The NVIDIA_T4_GPUS quota of region us-central1 is 4, but 5 agents with 1 "
                               "nvidia-tesla-t4 each need 5: lower --max-dynamic-agents or ask Google to raise it."]


def test_the_master_and_agents_count_against_their_familys_cpu_quota(clients, catalog):
    catalog.quotas.update(N2_CPUS=1.0, CPUS=16.0)
    report = check(opts(max_dynamic_agents=3), clients)
    assert any(f.startswith("The N2_CPUS quota of region us-central1 is 1, but the master (n2-standard-2, "
                            "2 vCPUs) need 2") for f in report.failures), report.failures
    assert any(f.startswith("The CPUS quota of region us-central1 is 16, but 3 agents of n1-standard-8 "
                            "(8 vCPUs each) need 24") for f in report.failures), report.failures


def test_spot_agents_use_the_preemptible_gpu_quota(clients, catalog):
    catalog.quotas["NVIDIA_T4_GPUS"] = 0.0
    assert check(opts(spot=True, max_dynamic_agents=5), clients).ok


def test_types_the_zone_does_not_offer_are_reported_together(clients):
    report = check(opts(master_machine_type="n9-nonesuch-2", gpu_agent_machine_types=("a9-fake-8",),
                        gpu_type="nvidia-fake-h900"), clients)
    assert report.failures == [
        "Machine type n9-nonesuch-2 (--master-machine-type) is not offered in zone us-central1-a.",
        "Machine type a9-fake-8 (--gpu-agent-machine-type) is not offered in zone us-central1-a.",
        "GPU type nvidia-fake-h900 (--gpu-type) is not offered in zone us-central1-a."]


def test_a_project_that_refuses_the_calls_is_the_providers_message(clients, catalog):
    catalog.status = 403
    catalog.message = "Required 'compute.machineTypes.get' permission for 'projects/proj-1'"
    report = check(opts(), clients)
    assert report.failures == ["Could not check project proj-1 in us-central1: Required "
                               "'compute.machineTypes.get' permission for 'projects/proj-1'"]


def test_no_credentials_at_all_is_said_plainly(monkeypatch, tmp_path):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login here
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # and do not ask a metadata server
    report = check(opts(), GcpClients())
    assert len(report.failures) == 1 and report.failures[0].startswith("GCP credentials: "), report.failures
    assert "credentials" in report.failures[0].lower()
