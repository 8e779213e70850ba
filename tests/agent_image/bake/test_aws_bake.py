"""The AWS bake end to end: moto (server mode) for EC2 and a local SSH server standing in for the
builder, which runs every provisioning step for real in a temp install root."""

from __future__ import annotations

from typing import Any

import pytest

from agent_image.bake import aws
from agent_image.bake.errors import BakeError, CloudError, StepFailed
from agent_image.bake.steps import FILES, UNIT_NAME
from tests.agent_image.bake.builder_rig import BuilderSshServer
from tests.agent_image.bake.conftest import FAST, REGION

CIDR = "203.0.113.7/32"


def _bake(builder: BuilderSshServer, moto_url: str, base_image: str, emit: Any = None, **kw: Any) -> aws.BakeResult:
    opts = aws.AwsBakeOptions(base_image=base_image, region=REGION, ssh_cidr=CIDR, endpoint_url=moto_url, **kw)
    return aws.bake(opts, emit=emit or (lambda _line: None), ssh_endpoint=lambda _inst: ("127.0.0.1", builder.port),
                    client_key=builder.client_key, timeouts=FAST)


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def assert_nothing_left(ec2: Any) -> None:
    """No builder still alive, no temporary security group or key pair."""
    builders = [i for r in ec2.describe_instances(Filters=[{"Name": "tag:det-role", "Values": ["builder"]}])
                ["Reservations"] for i in r["Instances"]]
    assert builders, "the bake launched no builder"
    assert {i["State"]["Name"] for i in builders} == {"terminated"}
    assert [g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]] == ["default"]
    assert ec2.describe_key_pairs()["KeyPairs"] == []


def own_images(ec2: Any) -> list[dict[str, Any]]:
    return ec2.describe_images(Filters=[{"Name": "tag:det-agent-image", "Values": ["true"]}])["Images"]


def test_a_bake_makes_a_tagged_image_and_removes_its_builder(ec2: Any, moto_url: str, base_image: str,
                                                             builder: BuilderSshServer) -> None:
    seen: dict[str, Any] = {}
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if line.startswith("[step 1/") and "started" in line:  # while the builder runs: how it was made
            seen["groups"] = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["det-bake-*"]}])
            seen["instance"] = ec2.describe_instances(Filters=[{"Name": "tag:det-role", "Values": ["builder"]}])

    result = _bake(builder, moto_url, base_image, emit)

    [image] = own_images(ec2)
    assert image["ImageId"] == result.image_id and image["State"] == "available"
    tags = _tags(image)
    assert tags["det-agent-image"] == "true" and tags["det-bake"] == result.bake_id
    assert tags["det-base-image"] == base_image and tags["det-nvidia-driver"] == "false"
    from controlplane.version import __version__
    assert tags["det-version"] == __version__
    assert_nothing_left(ec2)

    [group] = seen["groups"]["SecurityGroups"]
    assert [(p["IpProtocol"], p["FromPort"], p["ToPort"], [r["CidrIp"] for r in p["IpRanges"]])
            for p in group["IpPermissions"]] == [("tcp", 22, 22, [CIDR])]
    [instance] = [i for r in seen["instance"]["Reservations"] for i in r["Instances"]]
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    assert _tags(instance)["det-bake"] == result.bake_id

    root = builder.root
    assert (root / "etc/systemd/system" / UNIT_NAME).read_bytes() == (FILES / UNIT_NAME).read_bytes()
    boot = root / "opt/controlplane/bin/det-image-boot.sh"
    assert boot.read_bytes() == (FILES / "det-image-boot.sh").read_bytes() and boot.stat().st_mode & 0o111
    assert (root / "opt/controlplane/image.env").read_text() == "DET_IMAGE_CLOUD=aws\n"
    assert (root / "opt/controlplane/src/pyproject.toml").is_file()
    assert (root / "opt/controlplane/src/agent_image/bake/files/det-image-boot.sh").is_file()
    assert not (root / "opt/controlplane/src.tar.gz").exists()
    assert (root / "opt/controlplane/.venv/bin/det-agent").is_file()
    calls = builder.calls()
    assert f"systemctl --root={root} enable {UNIT_NAME}" in calls
    assert any(c.startswith("apt-get install") and "bubblewrap" in c.split() for c in calls)
    assert f"pip install --no-cache-dir --quiet {root}/opt/controlplane/src" in calls
    assert not any(c.startswith("apt-get install") and "nvidia-driver-550-server" in c for c in calls)
    assert any(line.startswith("[step 4/5 boot unit]") for line in lines)


def test_a_failing_step_is_named_and_nothing_is_left(ec2: Any, moto_url: str, base_image: str, tmp_path: Any) -> None:
    with BuilderSshServer(tmp_path, fail="apt-get") as broken:
        with pytest.raises(StepFailed) as info:
            _bake(broken, moto_url, base_image)
    assert info.value.step == "packages" and info.value.exit_code == 1
    assert "E: apt-get broke on purpose" in info.value.tail
    assert "'packages'" in info.value.message
    assert own_images(ec2) == []
    assert_nothing_left(ec2)


def test_ctrl_c_during_a_step_still_removes_the_builder(ec2: Any, moto_url: str, base_image: str,
                                                        builder: BuilderSshServer) -> None:
    def emit(line: str) -> None:
        if line.startswith("[step 3/5 venv]"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _bake(builder, moto_url, base_image, emit)
    assert own_images(ec2) == []
    assert_nothing_left(ec2)


def test_a_missing_base_image_is_the_providers_message_and_creates_nothing(ec2: Any, moto_url: str,
                                                                         builder: BuilderSshServer) -> None:
    with pytest.raises(CloudError) as info:
        _bake(builder, moto_url, "ami-0123456789abcdef0")
    assert info.value.message.startswith("looking up the base image ami-0123456789abcdef0 failed: InvalidAMIID")
    assert ec2.describe_key_pairs()["KeyPairs"] == []
    assert ec2.describe_instances()["Reservations"] == []


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0", "my-laptop"])
def test_ssh_is_never_opened_to_the_whole_internet(cidr: str) -> None:
    opts = aws.AwsBakeOptions(base_image="ami-1", region=REGION, ssh_cidr=cidr, endpoint_url="http://127.0.0.1:9")
    with pytest.raises(BakeError, match="--ssh-cidr"):
        aws.bake(opts, emit=lambda _line: None)
