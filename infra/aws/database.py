"""PostgreSQL on RDS (`--db rds`): encrypted, private, in the deployment's subnets, reachable on
5432 from the master only; protected from deletion and snapshotted on the way out, because it
holds every experiment's history. With `--db local` the master's boot script runs PostgreSQL."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.aws.context import AwsContext
from infra.master_config import DB_NAME, DB_USER


def build_rds(ctx: AwsContext, *, subnet_ids: list[pulumi.Output[str]], security_group_id: pulumi.Input[str],
              password: pulumi.Output[str], protected: bool = True) -> aws.rds.Instance:
    cid = ctx.opts.cluster_id
    subnets = aws.rds.SubnetGroup(ctx.name("db-subnets"), subnet_ids=subnet_ids, tags=ctx.tags("database"),
                                  opts=ctx.res())
    return aws.rds.Instance(
        ctx.name("db"), engine="postgres", engine_version="16", instance_class="db.t4g.small",
        allocated_storage=20, max_allocated_storage=200, storage_type="gp3", storage_encrypted=True,
        db_name=DB_NAME, username=DB_USER, password=password,
        db_subnet_group_name=subnets.name, vpc_security_group_ids=[security_group_id],
        publicly_accessible=False, deletion_protection=protected, skip_final_snapshot=False,
        final_snapshot_identifier=f"{cid}-final", backup_retention_period=7, copy_tags_to_snapshot=True,
        auto_minor_version_upgrade=True, tags=ctx.tags("database", name="db"),
        opts=ctx.res())
