"""A VPC of its own: one subnetwork with Private Google Access (agents reach GCS without external
addresses), Cloud NAT for the agents' other outbound traffic, and firewall rules by service
account: the master's port (and SSH, with `allow_ssh`) from `--inbound-cidr` only; the master's
port from the agents; everything between agents and from the master to the agents. No rule admits
0.0.0.0/0, and the VPC denies all other ingress."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from infra.gcp.context import GcpContext

SUBNET_CIDR = "10.10.0.0/20"
SSH_PORT = 22


@dataclass(frozen=True)
class Network:
    network: gcp.compute.Network
    subnetwork: gcp.compute.Subnetwork


def build_network(ctx: GcpContext) -> Network:
    opts = ctx.opts
    network = gcp.compute.Network(ctx.name("net"), name=ctx.name("net"), auto_create_subnetworks=False,
                                  opts=ctx.res())
    subnetwork = gcp.compute.Subnetwork(ctx.name("subnet"), name=ctx.name("subnet"), network=network.id,
                                        region=opts.region, ip_cidr_range=SUBNET_CIDR, private_ip_google_access=True,
                                        opts=ctx.res())
    router = gcp.compute.Router(ctx.name("router"), name=ctx.name("router"), network=network.id, region=opts.region,
                                opts=ctx.res())
    gcp.compute.RouterNat(ctx.name("nat"), name=ctx.name("nat"), router=router.name, region=opts.region,
                          nat_ip_allocate_option="AUTO_ONLY",
                          source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES", opts=ctx.res())
    return Network(network, subnetwork)


def _firewall(ctx: GcpContext, suffix: str, network: gcp.compute.Network, description: str, *,
              target: pulumi.Input[str], ports: list[str] | None, source: pulumi.Input[str] | None = None,
              source_cidr: str | None = None) -> None:
    allows = ([gcp.compute.FirewallAllowArgs(protocol="tcp", ports=ports)] if ports is not None
              else [gcp.compute.FirewallAllowArgs(protocol="all")])
    gcp.compute.Firewall(
        ctx.name(suffix), name=ctx.name(suffix), network=network.id, direction="INGRESS", description=description,
        allows=allows, target_service_accounts=[target],
        source_ranges=[source_cidr] if source_cidr else None,
        source_service_accounts=[source] if source is not None else None, opts=ctx.res())


def build_firewall(ctx: GcpContext, network: gcp.compute.Network, *, master_sa: pulumi.Input[str],
                   agent_sa: pulumi.Input[str]) -> None:
    opts = ctx.opts
    port = str(opts.master_port)
    _firewall(ctx, "master-inbound", network, "users: the master's API, web UI and task proxy", target=master_sa,
              ports=[port, str(opts.master_port + 1)], source_cidr=opts.inbound_cidr)
    if opts.allow_ssh:
        _firewall(ctx, "master-ssh", network, "users: SSH to the master", target=master_sa, ports=[str(SSH_PORT)],
                  source_cidr=opts.inbound_cidr)
    _firewall(ctx, "agents-to-master", network, "agents: the master's API", target=master_sa, ports=[port],
              source=agent_sa)
    _firewall(ctx, "master-to-agents", network, "master: task proxy and SSH to agents", target=agent_sa, ports=None,
              source=master_sa)
    _firewall(ctx, "agents-to-agents", network, "agents: distributed training", target=agent_sa, ports=None,
              source=agent_sa)
