"""Instance identity and interruption notices from a local metadata endpoint (EC2 IMDSv2, GCE)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_image.agent.config import parse_config
from agent_image.agent.instance_metadata import MetadataError, for_cloud
from agent_image.agent.interruption import watch_interruptions
from agent_image.agent.outbox import Outbox
from controlplane.wire.agent_protocol import InstanceInterrupted, Register, Slot, decode_from_agent, encode


class Metadata(BaseHTTPRequestHandler):
    interrupted = False
    token = "tok-123"

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_PUT(self) -> None:
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(200, self.token)
        self._send(400)

    def do_GET(self) -> None:
        if self.path.startswith("/latest/"):
            if self.headers.get("X-aws-ec2-metadata-token") != self.token:
                return self._send(401)  # IMDSv2: no token, no answer
            if self.path == "/latest/meta-data/instance-id":
                return self._send(200, "i-0abc")
            if self.path == "/latest/meta-data/instance-type":
                return self._send(200, "g5.xlarge")
            if self.path == "/latest/meta-data/spot/instance-action" and Metadata.interrupted:
                return self._send(200, json.dumps({"action": "terminate", "time": "2026-11-22T19:00:00Z"}))
            return self._send(404)
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._send(403)
        if self.path == "/computeMetadata/v1/instance/name":
            return self._send(200, "det-gpu-1")
        if self.path == "/computeMetadata/v1/instance/machine-type":
            return self._send(200, "projects/123456/machineTypes/a2-highgpu-1g")
        if self.path == "/computeMetadata/v1/instance/preempted":
            return self._send(200, "TRUE" if Metadata.interrupted else "FALSE")
        self._send(404)


@pytest.fixture
def metadata_url():
    Metadata.interrupted = False
    server = ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    # A short poll: shutdown() waits up to one (0.5 s by default).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_identity_from_imdsv2_and_gce(metadata_url):
    assert for_cloud("aws", metadata_url).instance_id() == "i-0abc"
    assert for_cloud("gcp", metadata_url).instance_id() == "det-gpu-1"


def test_instance_type_from_imdsv2_and_gce(metadata_url):
    assert for_cloud("aws", metadata_url).instance_type() == "g5.xlarge"
    assert for_cloud("gcp", metadata_url).instance_type() == "a2-highgpu-1g"


def test_the_agent_reports_its_instance_type_from_the_flag_or_the_metadata(metadata_url):
    base = ["--master", "http://m", "--join-token", "t", "--agent-id", "a1"]
    assert parse_config(base).instance_type == ""  # no cloud: unknown
    assert parse_config([*base, "--cloud", "aws", "--metadata-url", metadata_url]).instance_type == "g5.xlarge"
    cfg = parse_config([*base, "--cloud", "gcp", "--metadata-url", metadata_url, "--instance-type", "mine"])
    assert cfg.instance_type == "mine"  # the local provider says it; the flag wins
    # a metadata server that cannot say leaves it unknown; the agent still starts
    assert parse_config([*base, "--cloud", "aws", "--metadata-url", "http://127.0.0.1:9"]).instance_type == ""


def test_an_older_agents_register_still_decodes_and_a_new_one_carries_its_type():
    old = b'{"type":"register","agent_id":"a1","slots":[{"id":0,"type":"cpu"}]}'
    assert decode_from_agent(old).instance_type == ""
    new = encode(Register(agent_id="a1", slots=[Slot(id=0, type="cpu")], instance_type="g5.xlarge"))
    assert decode_from_agent(new).instance_type == "g5.xlarge"


def test_interruption_notices(metadata_url):
    aws, gcp = for_cloud("aws", metadata_url), for_cloud("gcp", metadata_url)
    assert aws.interruption_notice() is None and gcp.interruption_notice() is None
    Metadata.interrupted = True
    assert "spot interruption: terminate" in aws.interruption_notice()
    assert "preempted" in gcp.interruption_notice()


def test_unreachable_metadata_is_a_clear_error():
    with pytest.raises(MetadataError, match="unreachable"):
        for_cloud("gcp", "http://127.0.0.1:9").instance_id()


async def test_watcher_tells_the_master_once(metadata_url):
    outbox = Outbox()
    Metadata.interrupted = True
    await asyncio.wait_for(watch_interruptions(for_cloud("aws", metadata_url), "i-0abc", outbox, 0.01), 5)
    msg = await outbox.peek()
    assert isinstance(msg, InstanceInterrupted) and msg.agent_id == "i-0abc"


async def test_the_agent_process_registers_with_the_type_its_metadata_says(master, start_agent, metadata_url):
    start_agent(master, "--cloud", "aws", "--metadata-url", metadata_url)
    await master.wait_until(lambda: master.registers)
    assert master.registers[0].instance_type == "g5.xlarge"
