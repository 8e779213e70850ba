"""Security groups: the master's admits its port (and SSH, only with a keypair) from
`--inbound-cidr` and the master's port from the agents; the agents' admits only the master and
each other (distributed training); the database's admits 5432 from the master. Rules are separate
resources (`aws.vpc.SecurityGroup*Rule`), so the two groups can refer to each other."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.aws.context import AwsContext
from infra.aws.network import ANYWHERE

SSH_PORT = 22
POSTGRES_PORT = 5432


@dataclass(frozen=True)
class SecurityGroups:
    master: aws.ec2.SecurityGroup
    agents: aws.ec2.SecurityGroup


def _group(ctx: AwsContext, role: str, vpc_id: pulumi.Input[str], description: str) -> aws.ec2.SecurityGroup:
    # Inline ingress/egress left out: the rules below own them (mixing the two makes Pulumi fight itself).
    return aws.ec2.SecurityGroup(ctx.name(f"{role}-sg"), vpc_id=vpc_id, description=description,
                                 tags=ctx.tags(role, name=role), opts=ctx.res())


def _ingress(ctx: AwsContext, name: str, group: aws.ec2.SecurityGroup, description: str, *, port: int | None = None,
             cidr: str | None = None, source: aws.ec2.SecurityGroup | None = None) -> None:
    aws.vpc.SecurityGroupIngressRule(
        ctx.name(name), security_group_id=group.id, description=description,
        ip_protocol="tcp" if port is not None else "-1", from_port=port, to_port=port,
        cidr_ipv4=cidr, referenced_security_group_id=source.id if source is not None else None,
        tags=ctx.tags(), opts=ctx.res())


def _egress_anywhere(ctx: AwsContext, name: str, group: aws.ec2.SecurityGroup) -> None:
    aws.vpc.SecurityGroupEgressRule(ctx.name(name), security_group_id=group.id, ip_protocol="-1",
                                    cidr_ipv4=ANYWHERE, description="outbound", tags=ctx.tags(), opts=ctx.res())


def build_security_groups(ctx: AwsContext, vpc_id: pulumi.Input[str]) -> SecurityGroups:
    opts = ctx.opts
    master = _group(ctx, "master", vpc_id, f"det master of {opts.cluster_id}")
    agents = _group(ctx, "agent", vpc_id, f"det agents of {opts.cluster_id}")
    _ingress(ctx, "master-port-inbound", master, "users: the master's API and web UI", port=opts.master_port,
             cidr=opts.inbound_cidr)
    _ingress(ctx, "master-proxy-inbound", master, "users: the task proxy (notebooks, TensorBoards)",
             port=opts.master_port + 1, cidr=opts.inbound_cidr)
    if opts.keypair:
        _ingress(ctx, "master-ssh-inbound", master, "users: SSH with the keypair", port=SSH_PORT,
                 cidr=opts.inbound_cidr)
    _ingress(ctx, "master-port-agents", master, "agents: the master's API", port=opts.master_port, source=agents)
    _ingress(ctx, "agents-from-master", agents, "master: task proxy and SSH to agents", source=master)
    _ingress(ctx, "agents-from-agents", agents, "agents: distributed training between agents", source=agents)
    _egress_anywhere(ctx, "master-egress", master)
    _egress_anywhere(ctx, "agents-egress", agents)
    return SecurityGroups(master, agents)


def build_database_group(ctx: AwsContext, vpc_id: pulumi.Input[str], master: aws.ec2.SecurityGroup
                         ) -> aws.ec2.SecurityGroup:
    db = _group(ctx, "database", vpc_id, f"det database of {ctx.opts.cluster_id}")
    _ingress(ctx, "database-from-master", db, "master: PostgreSQL", port=POSTGRES_PORT, source=master)
    return db
