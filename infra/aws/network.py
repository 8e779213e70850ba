"""A VPC of its own with a public subnet in each of two zones (RDS needs two), an internet gateway,
and an S3 gateway endpoint so checkpoint traffic stays inside AWS. Nothing here opens a port:
that is the security groups' job (security.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.aws.context import AwsContext

VPC_CIDR = "10.0.0.0/16"
SUBNET_CIDRS = ("10.0.0.0/20", "10.0.16.0/20")
ANYWHERE = "0.0.0.0/0"  # a route's destination (egress), never an ingress source


@dataclass(frozen=True)
class Network:
    vpc: aws.ec2.Vpc
    subnets: list[aws.ec2.Subnet]
    zones: list[pulumi.Output[str]]


def _nth(i: int) -> Callable[[list[str]], str]:
    return lambda names: names[i]


def build_network(ctx: AwsContext) -> Network:
    zones_all = aws.get_availability_zones_output(state="available", opts=ctx.invoke()).names
    vpc = aws.ec2.Vpc(ctx.name("vpc"), cidr_block=VPC_CIDR, enable_dns_support=True, enable_dns_hostnames=True,
                      tags=ctx.tags(name="vpc"), opts=ctx.res())
    igw = aws.ec2.InternetGateway(ctx.name("igw"), vpc_id=vpc.id, tags=ctx.tags(name="igw"), opts=ctx.res())
    routes = aws.ec2.RouteTable(
        ctx.name("public"), vpc_id=vpc.id, tags=ctx.tags(name="public"),
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block=ANYWHERE, gateway_id=igw.id)], opts=ctx.res())
    subnets, zones = [], []
    for i, cidr in enumerate(SUBNET_CIDRS):
        zone = zones_all.apply(_nth(i))
        subnet = aws.ec2.Subnet(
            ctx.name(f"public-{i}"), vpc_id=vpc.id, cidr_block=cidr, availability_zone=zone,
            # Agents need outbound access (images, datasets) and have no NAT; their security group
            # admits nothing from outside the deployment.
            map_public_ip_on_launch=True, tags=ctx.tags(name=f"public-{i}"), opts=ctx.res())
        aws.ec2.RouteTableAssociation(ctx.name(f"public-{i}"), subnet_id=subnet.id, route_table_id=routes.id,
                                      opts=ctx.res())
        subnets.append(subnet)
        zones.append(zone)
    aws.ec2.VpcEndpoint(ctx.name("s3"), vpc_id=vpc.id, service_name=f"com.amazonaws.{ctx.opts.region}.s3",
                        vpc_endpoint_type="Gateway", route_table_ids=[routes.id], tags=ctx.tags(name="s3"),
                        opts=ctx.res())
    return Network(vpc, subnets, zones)
