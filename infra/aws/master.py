"""The master instance: the baked image (it holds det-master too), IMDSv2 only, an encrypted root
volume, the master's instance profile, its boot script as user data (a secret: it holds the join
token and the database password), and an Elastic IP users reach it at."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.aws.context import AwsContext

ROOT_VOLUME_GB = 50


@dataclass(frozen=True)
class Master:
    instance: aws.ec2.Instance
    address: aws.ec2.Eip


def build_master(ctx: AwsContext, *, image_id: pulumi.Input[str], subnet_id: pulumi.Input[str],
                 security_group_id: pulumi.Input[str], instance_profile: pulumi.Input[str],
                 user_data: pulumi.Output[str]) -> Master:
    opts = ctx.opts
    instance = aws.ec2.Instance(
        ctx.name("master"), ami=image_id, instance_type=opts.master_instance_type, subnet_id=subnet_id,
        vpc_security_group_ids=[security_group_id], iam_instance_profile=instance_profile,
        key_name=opts.keypair,
        user_data=pulumi.Output.secret(user_data),  # type: ignore[arg-type]  # pulumi types secret() as Never
        metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
            http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1,
            instance_metadata_tags="disabled"),
        root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
            encrypted=True, volume_size=ROOT_VOLUME_GB, volume_type="gp3", delete_on_termination=True,
            tags=ctx.tags("master", name="master")),
        monitoring=True, tags=ctx.tags("master", name="master"), opts=ctx.res())
    address = aws.ec2.Eip(ctx.name("master-ip"), domain="vpc", instance=instance.id,
                          tags=ctx.tags("master", name="master"), opts=ctx.res())
    return Master(instance, address)
