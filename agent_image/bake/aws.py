"""`det agent-image bake aws`: an AMI with the agent, made from a builder instance (boto3).

The flow: import the bake's temporary key pair, create a temporary security group that opens 22
only to `ssh_cidr`, run the builder from the base image (IMDSv2 required, tagged det-role=builder and
det-bake=<id>), provision it over SSH, stop it, `create_image`, wait until the AMI is available and
tag it. Whatever happens (a failing step, an SDK error, Ctrl-C), `_cleanup` then terminates the
builder and deletes the group and the key pair, and an AMI that never became available.

Every boto3 call goes through `_aws(action)`, the one place where EC2 errors (classified by
`provisioners.ec2_errors`) become the bake's `CloudError`. `endpoint_url` points at moto in tests,
and `ssh_endpoint` picks the address to SSH to (moto's addresses are not real).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from agent_image.bake import steps as plan_steps
from agent_image.bake.common import (
    BAKE_TAG,
    DEFAULT_TIMEOUTS,
    ROLE_TAG,
    BakeResult,
    Timeouts,
    check_ssh_cidr,
    host_keys_from_console,
    image_name,
    image_tags,
    new_bake_id,
    provision_builder,
    removing,
)
from agent_image.bake.errors import BakeError, translated
from agent_image.bake.ssh import Emit, SshTarget, generate_key, public_line

SshEndpoint = Callable[[dict[str, Any]], tuple[str, int]]


@dataclass(frozen=True)
class AwsBakeOptions:
    base_image: str
    region: str
    ssh_cidr: str
    instance_type: str = "t3.large"
    subnet_id: str | None = None
    nvidia_driver: bool = False
    endpoint_url: str | None = None
    ssh_user: str = "ubuntu"
    volume_gb: int = 30


@dataclass
class _Made:
    """What this bake created so far: exactly what the cleanup removes."""

    key_name: str | None = None
    group_id: str | None = None
    instance_id: str | None = None
    image_id: str | None = None
    image_ready: bool = False
    left: list[str] = field(default_factory=list)  # what the cleanup could not remove


def _aws(action: str) -> AbstractContextManager[None]:
    from provisioners.ec2_errors import map_error

    return translated(action, map_error)


def public_address(instance: dict[str, Any]) -> tuple[str, int]:
    """The builder's public IPv4 and port 22: the default `ssh_endpoint`."""
    host = instance.get("PublicIpAddress")
    if not host:
        raise BakeError(f"the builder {instance.get('InstanceId')} has no public address: pass a --subnet-id "
                        "whose instances can get one")
    return host, 22


def make_client(opts: AwsBakeOptions) -> Any:
    import boto3
    from botocore.config import Config

    with _aws("creating the EC2 client"):
        return boto3.session.Session().client(
            "ec2", region_name=opts.region, endpoint_url=opts.endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=10, read_timeout=60))


def _tags(resource: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": resource, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def _wait(ec2: Any, waiter: str, what: str, timeouts: Timeouts, budget_s: float, **kw: Any) -> None:
    delay = max(1, int(timeouts.poll_s))
    with _aws(f"waiting for {what}"):
        ec2.get_waiter(waiter).wait(**kw, WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(budget_s / delay))})


def bake(opts: AwsBakeOptions, *, emit: Emit = print, ssh_endpoint: SshEndpoint = public_address,
         client: Any | None = None, client_key: asyncssh.SSHKey | None = None, source: bytes | None = None,
         timeouts: Timeouts = DEFAULT_TIMEOUTS) -> BakeResult:
    """Bake an agent AMI; returns its id. Cleans up after itself whatever happens."""
    cidr = check_ssh_cidr(opts.ssh_cidr)
    steps = plan_steps.plan("aws", source=source if source is not None else plan_steps.source_archive(),
                            nvidia_driver=opts.nvidia_driver)
    ec2 = client or make_client(opts)
    key = client_key or generate_key()
    bake_id = new_bake_id()
    made = _Made()
    emit(f"baking an agent image from {opts.base_image} in {opts.region} (bake {bake_id})")
    try:
        return _bake(ec2, opts, cidr, steps, key, bake_id, made, emit, ssh_endpoint, timeouts)
    finally:
        _cleanup(ec2, made, emit, timeouts)


def _bake(ec2: Any, opts: AwsBakeOptions, cidr: str, steps: list[plan_steps.Step], key: asyncssh.SSHKey,
          bake_id: str, made: _Made, emit: Emit, ssh_endpoint: SshEndpoint, timeouts: Timeouts) -> BakeResult:
    own = {ROLE_TAG: "builder", BAKE_TAG: bake_id}
    with _aws(f"looking up the base image {opts.base_image}"):
        images = ec2.describe_images(ImageIds=[opts.base_image])["Images"]
    if not images:
        raise BakeError(f"--base-image {opts.base_image} does not exist in {opts.region}")
    root_device = images[0].get("RootDeviceName") or "/dev/sda1"

    name = f"det-bake-{bake_id}"
    with _aws("importing the bake's key pair"):
        ec2.import_key_pair(KeyName=name, PublicKeyMaterial=public_line(key).encode(),
                            TagSpecifications=_tags("key-pair", own))
    made.key_name = name

    vpc_id = _vpc_of(ec2, opts.subnet_id)
    with _aws("creating the builder's security group"):
        made.group_id = ec2.create_security_group(
            GroupName=name, VpcId=vpc_id, Description=f"det agent-image bake {bake_id}: SSH from {cidr} only",
            TagSpecifications=_tags("security-group", own))["GroupId"]
        ranges = {"Ipv6Ranges": [{"CidrIpv6": cidr}]} if ":" in cidr else {"IpRanges": [{"CidrIp": cidr}]}
        ec2.authorize_security_group_ingress(GroupId=made.group_id, IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, **ranges}])
    emit(f"security group {made.group_id} opens SSH to {cidr} only")

    network: dict[str, Any] = ({"NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": opts.subnet_id,
                                                        "Groups": [made.group_id], "AssociatePublicIpAddress": True}]}
                               if opts.subnet_id else {"SecurityGroupIds": [made.group_id]})
    with _aws(f"launching the builder ({opts.instance_type} from {opts.base_image})"):
        resp = ec2.run_instances(
            ImageId=opts.base_image, InstanceType=opts.instance_type, MinCount=1, MaxCount=1, KeyName=name,
            MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
            BlockDeviceMappings=[{"DeviceName": root_device, "Ebs": {"VolumeSize": opts.volume_gb, "VolumeType": "gp3",
                                                                     "DeleteOnTermination": True, "Encrypted": True}}],
            TagSpecifications=_tags("instance", {**own, "Name": f"det-agent-image-builder-{bake_id}"}),
            **network)
    made.instance_id = builder = resp["Instances"][0]["InstanceId"]
    emit(f"builder {builder} launched; waiting for it to run")
    _wait(ec2, "instance_running", f"the builder {builder} to run", timeouts, timeouts.instance_wait_s,
          InstanceIds=[builder])
    with _aws(f"describing the builder {builder}"):
        instance = ec2.describe_instances(InstanceIds=[builder])["Reservations"][0]["Instances"][0]

    host, port = ssh_endpoint(instance)
    target = SshTarget(host, port, opts.ssh_user, key, _host_keys(ec2, builder, emit, timeouts))
    provision_builder(target, steps, emit, timeouts)

    emit(f"stopping the builder {builder}")
    with _aws(f"stopping the builder {builder}"):
        ec2.stop_instances(InstanceIds=[builder])
    _wait(ec2, "instance_stopped", f"the builder {builder} to stop", timeouts, timeouts.instance_wait_s,
          InstanceIds=[builder])

    tags = image_tags(bake_id, opts.base_image, opts.nvidia_driver)
    image = image_name(bake_id, tags["det-version"])
    with _aws("creating the image"):
        made.image_id = image_id = ec2.create_image(
            InstanceId=made.instance_id, Name=image, Description=f"controlplane agent image ({opts.base_image})",
            TagSpecifications=_tags("image", {**tags, "Name": image}))["ImageId"]
    emit(f"image {image_id} ({image}) is being created; waiting for it to become available")
    _wait(ec2, "image_available", f"the image {image_id}", timeouts, timeouts.image_wait_s, ImageIds=[image_id])
    with _aws(f"tagging the snapshots of {image_id}"):
        # Tagged once known, so that they are found as this image's (and some clones cannot tag them at create).
        mappings = ec2.describe_images(ImageIds=[image_id])["Images"][0].get("BlockDeviceMappings", [])
        snapshots = [m["Ebs"]["SnapshotId"] for m in mappings if m.get("Ebs", {}).get("SnapshotId")]
        if snapshots:
            ec2.create_tags(Resources=snapshots, Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    made.image_ready = True
    return BakeResult(image_id, bake_id, image, tags)


def _vpc_of(ec2: Any, subnet_id: str | None) -> str:
    if subnet_id:
        with _aws(f"looking up the subnet {subnet_id}"):
            return ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["VpcId"]
    with _aws("looking up the default VPC"):
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise BakeError("this region has no default VPC: pass --subnet-id")
    return vpcs[0]["VpcId"]


def _host_keys(ec2: Any, instance_id: str, emit: Emit, timeouts: Timeouts) -> tuple[str, ...]:
    """The builder's host keys from its console output, where cloud-init prints them (it may take a
    while to appear; none within host_key_wait_s: accept on first use)."""
    deadline = time.monotonic() + timeouts.host_key_wait_s
    while True:
        with _aws(f"reading the builder {instance_id}'s console output"):
            text = ec2.get_console_output(InstanceId=instance_id, Latest=True).get("Output") or ""
        keys = host_keys_from_console(text)
        if keys:
            emit(f"pinning the builder's host key{'s' if len(keys) > 1 else ''} from its console output")
            return keys
        if time.monotonic() >= deadline:
            return ()
        time.sleep(timeouts.poll_s)


def _cleanup(ec2: Any, made: _Made, emit: Emit, timeouts: Timeouts) -> None:
    if made.image_id and not made.image_ready:
        with removing(made.left, f"the unfinished image {made.image_id}", emit), _aws("deregistering the image"):
            emit(f"cleanup: deregistering the unfinished image {made.image_id}")
            ec2.deregister_image(ImageId=made.image_id, DeleteAssociatedSnapshots=True)
    if made.instance_id:
        with removing(made.left, f"the builder {made.instance_id}", emit):
            emit(f"cleanup: terminating the builder {made.instance_id}")
            with _aws("terminating the builder"):
                ec2.terminate_instances(InstanceIds=[made.instance_id])
            _wait(ec2, "instance_terminated", f"the builder {made.instance_id} to terminate", timeouts,
                  timeouts.instance_wait_s, InstanceIds=[made.instance_id])
    if made.group_id:
        with removing(made.left, f"the security group {made.group_id}", emit):
            emit(f"cleanup: deleting the security group {made.group_id}")
            _delete_group(ec2, made.group_id, timeouts)
    if made.key_name:
        with removing(made.left, f"the key pair {made.key_name}", emit), _aws("deleting the key pair"):
            emit(f"cleanup: deleting the key pair {made.key_name}")
            ec2.delete_key_pair(KeyName=made.key_name)


def _delete_group(ec2: Any, group_id: str, timeouts: Timeouts) -> None:
    """A terminated instance's network interface lingers a little: DependencyViolation, retried."""
    from botocore.exceptions import ClientError

    deadline = time.monotonic() + timeouts.instance_wait_s
    while True:
        try:
            with _aws("deleting the security group"):
                ec2.delete_security_group(GroupId=group_id)
            return
        except Exception as e:
            cause = e.__cause__
            code = cause.response.get("Error", {}).get("Code") if isinstance(cause, ClientError) else None
            if code != "DependencyViolation" or time.monotonic() >= deadline:
                raise
        time.sleep(timeouts.poll_s)
