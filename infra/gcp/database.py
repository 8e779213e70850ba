"""PostgreSQL on Cloud SQL (`--db cloudsql`): a private address in the deployment's VPC through
private services access, no public IPv4, TLS required, backups, and deletion protection, because
it holds every experiment's history. With `--db local` the master's boot script runs PostgreSQL."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from infra.gcp.context import GcpContext
from infra.master_config import DB_NAME, DB_USER


def build_cloudsql(ctx: GcpContext, network: gcp.compute.Network, password: pulumi.Output[str],
                   protected: bool = True) -> gcp.sql.DatabaseInstance:
    opts = ctx.opts
    peering_range = gcp.compute.GlobalAddress(
        ctx.name("sql-range"), name=ctx.name("sql-range"), purpose="VPC_PEERING", address_type="INTERNAL",
        prefix_length=20, network=network.id, opts=ctx.res())
    peering = gcp.servicenetworking.Connection(
        ctx.name("sql-peering"), network=network.id, service="servicenetworking.googleapis.com",
        reserved_peering_ranges=[peering_range.name], opts=ctx.res())
    # No explicit name: Cloud SQL keeps a deleted instance's name for a week; Pulumi adds a suffix.
    instance = gcp.sql.DatabaseInstance(
        ctx.name("db"), database_version="POSTGRES_16", region=opts.region, deletion_protection=protected,
        settings=gcp.sql.DatabaseInstanceSettingsArgs(
            tier="db-custom-1-3840", edition="ENTERPRISE", availability_type="ZONAL", disk_autoresize=True,
            deletion_protection_enabled=protected, user_labels=ctx.labels("database"),
            ip_configuration=gcp.sql.DatabaseInstanceSettingsIpConfigurationArgs(
                ipv4_enabled=False, private_network=network.id, ssl_mode="ENCRYPTED_ONLY"),
            backup_configuration=gcp.sql.DatabaseInstanceSettingsBackupConfigurationArgs(
                enabled=True, point_in_time_recovery_enabled=True)),
        opts=ctx.res(depends_on=[peering]))
    gcp.sql.Database(ctx.name("db-database"), name=DB_NAME, instance=instance.name, opts=ctx.res())
    gcp.sql.User(ctx.name("db-user"), name=DB_USER, instance=instance.name, password=password, opts=ctx.res())
    return instance
