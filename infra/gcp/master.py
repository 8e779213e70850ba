"""The master instance: the baked image (it holds det-master too) as a Shielded VM, the master's
service account with the cloud-platform scope only (its IAM roles are what limit it), OS Login
instead of project-wide SSH keys, its boot script as the startup-script metadata (a secret: it
holds the join token and the database password), and a static external address."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from infra.gcp.context import GcpContext

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
BOOT_DISK_GB = 50


@dataclass(frozen=True)
class Master:
    instance: gcp.compute.Instance
    address: gcp.compute.Address


def master_name(ctx: GcpContext) -> str:
    return ctx.name("master")


def build_master(ctx: GcpContext, *, image: str, subnetwork: pulumi.Input[str], service_account: pulumi.Input[str],
                 startup_script: pulumi.Output[str]) -> Master:
    opts = ctx.opts
    address = gcp.compute.Address(ctx.name("master-ip"), name=ctx.name("master-ip"), region=opts.region,
                                  labels=ctx.labels("master"), opts=ctx.res())
    instance = gcp.compute.Instance(
        master_name(ctx), name=master_name(ctx), zone=opts.zone, machine_type=opts.master_machine_type,
        boot_disk=gcp.compute.InstanceBootDiskArgs(initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
            image=image, size=BOOT_DISK_GB, type="pd-balanced", labels=ctx.labels("master"))),
        network_interfaces=[gcp.compute.InstanceNetworkInterfaceArgs(
            subnetwork=subnetwork,
            access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs(nat_ip=address.address)])],
        service_account=gcp.compute.InstanceServiceAccountArgs(email=service_account, scopes=[CLOUD_PLATFORM]),
        shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True),
        # pulumi types the metadata's values as Never: a secret Output is what it takes at run time
        metadata={"startup-script": pulumi.Output.secret(startup_script),  # type: ignore[arg-type]
                  "enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE"},
        labels=ctx.labels("master"), allow_stopping_for_update=True, opts=ctx.res())
    return Master(instance, address)
