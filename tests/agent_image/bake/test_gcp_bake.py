"""The GCE bake end to end: the real google-cloud-compute client against the tests' Compute endpoint
(with images and instance stop added, `gce_bake_server.py`) and the local SSH stand-in for the builder."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_image.bake import gcp
from agent_image.bake.errors import StepFailed
from agent_image.bake.steps import UNIT_NAME
from tests.agent_image.bake.builder_rig import BuilderSshServer
from tests.agent_image.bake.conftest import FAST
from tests.agent_image.bake.gce_bake_server import BakeGceServer

PROJECT, ZONE = "det-test", "us-central1-a"
BASE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"


@pytest.fixture
def gce() -> Iterator[BakeGceServer]:
    with BakeGceServer() as srv:
        yield srv


def _bake(gce: BakeGceServer, builder: BuilderSshServer, emit: Any = None) -> gcp.BakeResult:
    opts = gcp.GcpBakeOptions(base_image=BASE, project=PROJECT, zone=ZONE, endpoint=gce.url)
    seen: dict[str, Any] = {}

    def endpoint(instance: Any) -> tuple[str, int]:
        seen["address"] = gcp.external_address(instance)
        return "127.0.0.1", builder.port

    result = gcp.bake(opts, emit=emit or (lambda _line: None), ssh_endpoint=endpoint, client_key=builder.client_key,
                      timeouts=FAST)
    assert seen["address"] == ("203.0.113.10", 22)
    return result


def test_a_bake_makes_a_labelled_image_from_the_builders_disk_and_deletes_the_builder(
        gce: BakeGceServer, builder: BuilderSshServer) -> None:
    kind, b64 = builder.host_key_line.split()[:2]
    gce.state.host_keys = {kind: b64}
    lines: list[str] = []
    result = _bake(gce, builder, lines.append)

    [(key, image)] = gce.state.images.items()
    assert key == (PROJECT, result.name) and result.image_id == f"projects/{PROJECT}/global/images/{result.name}"
    assert image["sourceDisk"].endswith(f"/zones/{ZONE}/disks/det-bake-{result.bake_id}")
    assert image["family"] == "det-agent"
    assert image["labels"]["det-agent-image"] == "true" and image["labels"]["det-bake"] == result.bake_id
    assert image["labels"]["det-base-image"] == "ubuntu-2404-lts-amd64"
    assert gce.state.instances == {}  # the builder is deleted
    assert ("POST", f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/det-bake-{result.bake_id}/stop") \
        in gce.state.requests  # stopped before the image was taken
    assert "pinning the builder's host key from its guest attributes" in lines
    assert (builder.root / "opt/controlplane/image.env").read_text() == "DET_IMAGE_CLOUD=gcp\n"
    assert f"systemctl --root={builder.root} enable {UNIT_NAME}" in builder.calls()


def test_the_builder_gets_the_bakes_key_and_no_project_keys(gce: BakeGceServer, builder: BuilderSshServer) -> None:
    inserted: list[dict[str, Any]] = []

    def emit(line: str) -> None:
        if line.startswith("[step 1/") and "started" in line:
            with gce.state.lock:
                inserted.extend(gce.state.instances.values())

    _bake(gce, builder, emit)
    [builder_vm] = inserted
    meta = {i["key"]: i["value"] for i in builder_vm["metadata"]["items"]}
    assert meta["ssh-keys"] == f"ubuntu:{builder.client_key.export_public_key().decode().strip()}"
    assert meta["block-project-ssh-keys"] == "TRUE"
    assert builder_vm["labels"]["det-role"] == "builder"


def test_a_failing_step_leaves_no_image_and_no_builder(gce: BakeGceServer, tmp_path: Any) -> None:
    with BuilderSshServer(tmp_path, fail="systemctl") as broken, pytest.raises(StepFailed) as info:
        _bake(gce, broken)
    assert info.value.step == "boot unit"
    assert gce.state.images == {} and gce.state.instances == {}


def test_ctrl_c_during_a_step_still_deletes_the_builder(gce: BakeGceServer, builder: BuilderSshServer) -> None:
    def emit(line: str) -> None:
        if line.startswith("[step 2/5 source]"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _bake(gce, builder, emit)
    assert gce.state.images == {} and gce.state.instances == {}
