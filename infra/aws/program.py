"""`det deploy aws`: the whole cluster as one Pulumi program, `build(opts)`.

Run inside a Pulumi program (the Automation API's inline program, or under Pulumi's mocks for the
dry run and the tests). The join token and the database password come from the stack's secret
config (`joinToken`, `dbPassword`), which the stack wrapper generates once.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws.context import AwsContext
from infra.aws.database import build_rds
from infra.aws.iam import build_roles
from infra.aws.master import build_master
from infra.aws.network import build_network
from infra.aws.security import build_database_group, build_security_groups
from infra.aws.storage import build_bucket
from infra.master_boot.render import render_master_boot
from infra.master_config import POOL, aws_pool_provider, master_config, postgres_url
from infra.options import AGENT_IMAGE_TAG, AwsOptions
from infra.stack_config import DB_PASSWORD, JOIN_TOKEN, db_protected


def agent_image(ctx: AwsContext) -> pulumi.Output[str]:
    """`--agent-image`, else the newest AMI of this account that `det agent-image bake aws` tagged."""
    if ctx.opts.agent_image_id:
        return pulumi.Output.from_input(ctx.opts.agent_image_id)
    return aws.ec2.get_ami_output(
        owners=["self"], most_recent=True,
        filters=[aws.ec2.GetAmiFilterArgs(name=f"tag:{AGENT_IMAGE_TAG}", values=["true"])],
        opts=ctx.invoke()).id


def _user_data(opts: AwsOptions, v: dict[str, Any]) -> str:
    provider = aws_pool_provider(
        opts, image_id=v["image_id"], zone_subnets=dict(zip(v["zones"], v["subnet_ids"], strict=True)),
        agent_sg_id=v["agent_sg_id"], agent_instance_profile_arn=v["agent_profile_arn"])
    config = master_config(
        cluster_id=opts.cluster_id, port=opts.master_port, db_url=postgres_url(v["db_host"], v["db_password"]),
        checkpoint_storage={"type": "s3", "bucket": v["bucket"]}, pools={POOL: provider})
    return render_master_boot("aws", config, db="rds" if opts.db == "rds" else "local",
                              db_password=v["db_password"], join_token=v["join_token"])


def build(opts: AwsOptions) -> None:
    config = pulumi.Config()
    join_token = config.require_secret(JOIN_TOKEN)
    db_password = config.require_secret(DB_PASSWORD)
    ctx = AwsContext.create(opts)
    image_id = agent_image(ctx)
    net = build_network(ctx)
    subnet_ids = [s.id for s in net.subnets]
    groups = build_security_groups(ctx, net.vpc.id)
    bucket = build_bucket(ctx)
    roles = build_roles(ctx, bucket_arn=bucket.arn, image_id=image_id, subnet_ids=subnet_ids,
                        agent_sg_id=groups.agents.id)
    db_host: pulumi.Input[str] = "127.0.0.1"
    if opts.db == "rds":
        db_group = build_database_group(ctx, net.vpc.id, groups.master)
        db_host = build_rds(ctx, subnet_ids=subnet_ids, security_group_id=db_group.id, password=db_password,
                            protected=db_protected(config)).address
    user_data = pulumi.Output.all(
        image_id=image_id, zones=pulumi.Output.all(*net.zones), subnet_ids=pulumi.Output.all(*subnet_ids),
        agent_sg_id=groups.agents.id, agent_profile_arn=roles.agent_profile.arn, bucket=bucket.bucket,
        db_host=db_host, db_password=db_password, join_token=join_token,
    ).apply(lambda v: _user_data(opts, v))
    master = build_master(ctx, image_id=image_id, subnet_id=subnet_ids[0], security_group_id=groups.master.id,
                          instance_profile=roles.master_profile.name, user_data=user_data)
    pulumi.export("master_url", master.address.public_ip.apply(lambda ip: f"http://{ip}:{opts.master_port}"))
    pulumi.export("master_instance_id", master.instance.id)
    pulumi.export("bucket", bucket.bucket)
    pulumi.export("agent_image", image_id)
