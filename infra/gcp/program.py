"""`det deploy gcp`: the whole cluster as one Pulumi program, `build(opts)`.

Run inside a Pulumi program (the Automation API's inline program, or under Pulumi's mocks for the
dry run and the tests). The join token and the database password come from the stack's secret
config (`joinToken`, `dbPassword`), which the stack wrapper generates once.
"""

from __future__ import annotations

from typing import Any

import pulumi

from infra.gcp.context import GcpContext
from infra.gcp.database import build_cloudsql
from infra.gcp.iam import build_service_accounts, grant_roles
from infra.gcp.master import build_master, master_name
from infra.gcp.network import build_firewall, build_network
from infra.gcp.storage import build_bucket
from infra.master_boot.render import render_master_boot
from infra.master_config import gcp_pool_providers, master_config, postgres_url
from infra.options import AGENT_IMAGE_FAMILY, GcpOptions
from infra.stack_config import DB_PASSWORD, JOIN_TOKEN, db_protected


def agent_image(opts: GcpOptions) -> str:
    """`--agent-image`, else the newest image of the family `det agent-image bake gcp` writes."""
    return opts.agent_image or f"projects/{opts.project_id}/global/images/family/{AGENT_IMAGE_FAMILY}"


def _startup_script(opts: GcpOptions, v: dict[str, Any]) -> str:
    pools = gcp_pool_providers(opts, image=agent_image(opts), network=v["network"], subnetwork=v["subnetwork"],
                               agent_service_account=v["agent_sa"])
    config = master_config(
        cluster_id=opts.cluster_id, port=opts.master_port, db_url=postgres_url(v["db_host"], v["db_password"]),
        checkpoint_storage={"type": "gcs", "bucket": v["bucket"]}, pools=pools)
    return render_master_boot("gcp", config, db="cloudsql" if opts.db == "cloudsql" else "local",
                              db_password=v["db_password"], join_token=v["join_token"])


def build(opts: GcpOptions) -> None:
    config = pulumi.Config()
    join_token = config.require_secret(JOIN_TOKEN)
    db_password = config.require_secret(DB_PASSWORD)
    ctx = GcpContext.create(opts)
    net = build_network(ctx)
    accounts = build_service_accounts(ctx)
    build_firewall(ctx, net.network, master_sa=accounts.master.email, agent_sa=accounts.agents.email)
    bucket = build_bucket(ctx)
    grant_roles(ctx, accounts, bucket=bucket.name, master_name=master_name(ctx))
    db_host: pulumi.Input[str] = "127.0.0.1"
    if opts.db == "cloudsql":
        db_host = build_cloudsql(ctx, net.network, db_password, protected=db_protected(config)).private_ip_address
    startup_script = pulumi.Output.all(
        network=net.network.id, subnetwork=net.subnetwork.id, agent_sa=accounts.agents.email, bucket=bucket.name,
        db_host=db_host, db_password=db_password, join_token=join_token,
    ).apply(lambda v: _startup_script(opts, v))
    master = build_master(ctx, image=agent_image(opts), subnetwork=net.subnetwork.id,
                          service_account=accounts.master.email, startup_script=startup_script)
    pulumi.export("master_url", master.address.address.apply(lambda ip: f"http://{ip}:{opts.master_port}"))
    pulumi.export("master_instance", master.instance.name)
    pulumi.export("bucket", bucket.name)
    pulumi.export("agent_image", agent_image(opts))
