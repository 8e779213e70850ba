"""Service accounts: the master's may manage only instances named as its pool names them
(`det-gpu...`, an IAM condition on compute.instanceAdmin.v1), act as the agents' service account
and no other, and use the checkpoint bucket; the agents' may use the bucket only."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from infra.gcp.context import GcpContext
from infra.master_config import POOL

INSTANCE_TYPE = "compute.googleapis.com/Instance"


@dataclass(frozen=True)
class ServiceAccounts:
    master: gcp.serviceaccount.Account
    agents: gcp.serviceaccount.Account


def agent_instances_condition(project: str, zone: str, master_name: str) -> str:
    """CEL: any non-instance resource the role covers (disks, images, subnetworks, operations), or an
    instance of this zone named as the provisioner names pool instances, never the master itself."""
    prefix = f"projects/{project}/zones/{zone}/instances/det-{POOL}"
    return (f'resource.type != "{INSTANCE_TYPE}" || '
            f'(resource.name.startsWith("{prefix}") && !resource.name.endsWith("/instances/{master_name}"))')


def build_service_accounts(ctx: GcpContext) -> ServiceAccounts:
    cid = ctx.opts.cluster_id
    master = gcp.serviceaccount.Account(ctx.name("master-sa"), account_id=ctx.short_id("master"),
                                        display_name=f"det master of {cid}", opts=ctx.res())
    agents = gcp.serviceaccount.Account(ctx.name("agent-sa"), account_id=ctx.short_id("agent"),
                                        display_name=f"det agents of {cid}", opts=ctx.res())
    return ServiceAccounts(master, agents)


def grant_roles(ctx: GcpContext, accounts: ServiceAccounts, *, bucket: pulumi.Input[str], master_name: str) -> None:
    opts = ctx.opts
    master_member = accounts.master.email.apply(lambda e: f"serviceAccount:{e}")
    agent_member = accounts.agents.email.apply(lambda e: f"serviceAccount:{e}")
    gcp.projects.IAMMember(
        ctx.name("master-instance-admin"), project=opts.project_id, role="roles/compute.instanceAdmin.v1",
        member=master_member,
        condition=gcp.projects.IAMMemberConditionArgs(
            title=f"det agents of {opts.cluster_id}",
            description="only the instances of this deployment's pools",
            expression=agent_instances_condition(opts.project_id, opts.zone, master_name)),
        opts=ctx.res())
    gcp.serviceaccount.IAMMember(ctx.name("master-acts-as-agents"), service_account_id=accounts.agents.name,
                                 role="roles/iam.serviceAccountUser", member=master_member, opts=ctx.res())
    gcp.storage.BucketIAMMember(ctx.name("master-checkpoints"), bucket=bucket, role="roles/storage.objectAdmin",
                                member=master_member, opts=ctx.res())
    gcp.storage.BucketIAMMember(ctx.name("agent-checkpoints"), bucket=bucket, role="roles/storage.objectUser",
                                member=agent_member, opts=ctx.res())
