"""`det agent-image bake aws` end to end through the CLI: moto (server mode) for EC2 and a local SSH
server standing in for the builder. Progress on stderr, the image id alone on stdout, a failure as one
`Error:` sentence naming the step, and the builder gone in every case."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_image.bake import aws
from tests.agent_image.bake.builder_rig import BuilderSshServer
from tests.agent_image.bake.conftest import FAST, REGION
from tests.support.moto_server import fresh_moto, moto_server_thread


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    with moto_server_thread() as url:
        yield url


@pytest.fixture
def ec2(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    import boto3

    fresh_moto(moto_server, monkeypatch, REGION)
    return boto3.session.Session().client("ec2", region_name=REGION, endpoint_url=moto_server)


def bake_aws(det: Callable[..., Any], moto_server: str, ec2: Any, builder: BuilderSshServer,
             monkeypatch: pytest.MonkeyPatch, *extra: str) -> Any:
    """`det agent-image bake aws ...` with the builder's SSH pointed at the stand-in (moto's addresses are fake)."""
    monkeypatch.setattr(aws, "bake", functools.partial(
        aws.bake, ssh_endpoint=lambda _inst: ("127.0.0.1", builder.port), client_key=builder.client_key,
        timeouts=FAST))
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return det("agent-image", "bake", "aws", "--base-image", ami, "--region", REGION, "--ssh-cidr", "198.51.100.0/24",
               "--endpoint-url", moto_server, *extra)


def live_builders(ec2: Any) -> list[str]:
    return [i["InstanceId"] for r in ec2.describe_instances(Filters=[{"Name": "tag:det-role", "Values": ["builder"]}])
            ["Reservations"] for i in r["Instances"] if i["State"]["Name"] != "terminated"]


def test_bake_prints_the_image_id_and_its_progress(det: Callable[..., Any], moto_server: str, ec2: Any,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with BuilderSshServer(tmp_path) as builder:
        res = bake_aws(det, moto_server, ec2, builder, monkeypatch)
    assert res.rc == 0, res.err
    image_id = res.out.strip()
    [image] = ec2.describe_images(ImageIds=[image_id])["Images"]
    assert {t["Key"]: t["Value"] for t in image["Tags"]}["det-agent-image"] == "true"
    for step in ("[step 1/5 packages] started", "[step 4/5 boot unit] uploading /etc/systemd/system/"
                 "det-agent-boot.service", "[step 5/5 cleanup] done in"):
        assert step in res.err
    assert "cleanup: terminating the builder" in res.err
    assert live_builders(ec2) == []


def test_bake_json(det: Callable[..., Any], moto_server: str, ec2: Any, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    with BuilderSshServer(tmp_path) as builder:
        res = bake_aws(det, moto_server, ec2, builder, monkeypatch, "--json", "--nvidia-driver")
    assert res.rc == 0, res.err
    out = json.loads(res.out)
    assert out["imageId"].startswith("ami-") and out["tags"]["det-nvidia-driver"] == "true"
    assert "[step 5/6 nvidia driver]" in res.err


def test_a_failing_step_is_one_error_line_and_leaves_no_image(det: Callable[..., Any], moto_server: str, ec2: Any,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with BuilderSshServer(tmp_path, fail="pip") as builder:
        res = bake_aws(det, moto_server, ec2, builder, monkeypatch)
    assert res.rc == 1 and res.out == ""
    error = [line for line in res.err.splitlines() if line.startswith("Error:")]
    assert error == ["Error: provisioning step 'venv' failed with exit code 1: ERROR: pip broke on purpose"]
    assert "Traceback" not in res.err
    assert ec2.describe_images(Filters=[{"Name": "tag:det-agent-image", "Values": ["true"]}])["Images"] == []
    assert live_builders(ec2) == []
    assert ec2.describe_key_pairs()["KeyPairs"] == []


def test_a_cloud_error_is_the_providers_message(det: Callable[..., Any], moto_server: str, ec2: Any,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = det("agent-image", "bake", "aws", "--base-image", "ami-0123456789abcdef0", "--region", REGION,
              "--ssh-cidr", "198.51.100.7/32", "--endpoint-url", moto_server)
    assert res.rc == 1
    assert res.err.strip().splitlines()[-1].startswith(
        "Error: looking up the base image ami-0123456789abcdef0 failed: InvalidAMIID")


def test_ssh_open_to_everyone_is_refused(det: Callable[..., Any]) -> None:
    res = det("agent-image", "bake", "aws", "--base-image", "ami-1", "--region", REGION, "--ssh-cidr", "0.0.0.0/0")
    assert res.rc == 1
    assert res.err.strip() == ("Error: --ssh-cidr 0.0.0.0/0 would open the builder's SSH to the whole internet: "
                               "name your own network")


def test_gcp_needs_its_project_and_zone(det: Callable[..., Any]) -> None:
    res = det("agent-image", "bake", "gcp", "--base-image", "img")
    assert res.rc == 2 and "--project" in res.err and "--zone" in res.err
