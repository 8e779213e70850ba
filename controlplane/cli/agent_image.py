"""`det agent-image bake aws|gcp`: bake the agent image that autoscaled instances boot.

Progress goes to stderr as it happens (each provisioning step's output under a `[step i/n name]`
prefix); stdout gets only the image id at the end (or, with --json, the id, name and tags), so
`AMI=$(det agent-image bake aws ...)` works. A failure is one `Error:` sentence; the builder and its
temporary resources are removed in every case, Ctrl-C included. The bake itself lives in
`agent_image/bake/` (imported when the command runs: boto3 and the Google clients load slowly).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from controlplane.cli.common import print_json
from controlplane.cli.errors import CliError

CHECKIP_URL = "https://checkip.amazonaws.com"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ssh_cidr(args: argparse.Namespace) -> str:
    """--ssh-cidr, else this machine's public address as a /32 (what the builder's SSH opens to)."""
    if args.ssh_cidr:
        return str(args.ssh_cidr)
    import requests

    try:
        resp = requests.get(CHECKIP_URL, timeout=10)
        resp.raise_for_status()
        address = resp.text.strip()
    except requests.RequestException as e:
        raise CliError(f"could not find this machine's public address at {CHECKIP_URL} ({e}); "
                       "pass --ssh-cidr") from None
    cidr = f"{address}/{128 if ':' in address else 32}"
    _progress(f"the builder's SSH opens to {cidr} only (this machine's public address; --ssh-cidr to change)")
    return cidr


def _report(args: argparse.Namespace, result: object) -> int:
    from agent_image.bake.common import BakeResult

    assert isinstance(result, BakeResult)
    if args.json:
        print_json({"imageId": result.image_id, "name": result.name, "bakeId": result.bake_id, "tags": result.tags})
    else:
        _progress(f"done: image {result.image_id} ({result.name})")
        print(result.image_id)
    return 0


def _interrupted() -> None:
    _progress("interrupted: the builder and the bake's temporary resources were removed (see above)")


def cmd_bake_aws(args: argparse.Namespace) -> int:
    from agent_image.bake import aws

    opts = aws.AwsBakeOptions(
        base_image=args.base_image, region=args.region, ssh_cidr=_ssh_cidr(args), instance_type=args.instance_type,
        subnet_id=args.subnet_id, nvidia_driver=args.nvidia_driver, endpoint_url=args.endpoint_url,
        ssh_user=args.ssh_user, volume_gb=args.volume_gb)
    return _run(args, lambda: aws.bake(opts, emit=_progress))


def cmd_bake_gcp(args: argparse.Namespace) -> int:
    from agent_image.bake import gcp

    opts = gcp.GcpBakeOptions(
        base_image=args.base_image, project=args.project, zone=args.zone, machine_type=args.machine_type,
        network=args.network, subnetwork=args.subnetwork, nvidia_driver=args.nvidia_driver,
        endpoint=args.endpoint, ssh_user=args.ssh_user, disk_gb=args.disk_gb, family=args.family)
    return _run(args, lambda: gcp.bake(opts, emit=_progress))


def _run(args: argparse.Namespace, bake: Callable[[], Any]) -> int:
    """A bake with its errors as one sentence; Ctrl-C says the cleanup ran, then stops."""
    from agent_image.bake.errors import BakeError

    try:
        result = bake()
    except BakeError as e:
        raise CliError(e.message) from None
    except KeyboardInterrupt:
        _interrupted()
        raise
    return _report(args, result)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nvidia-driver", action="store_true",
                   help="also install the NVIDIA driver (checked with nvidia-smi where the builder has a GPU)")
    p.add_argument("--ssh-user", default="ubuntu", help="the base image's SSH user (default ubuntu)")
    p.add_argument("--json", action="store_true", help="print the image's id, name and tags as JSON")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("agent-image", help="the agent image that cloud instances boot")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bake = sub.add_parser("bake", help="build the agent image from a base image and print its id")
    clouds = bake.add_subparsers(dest="cloud", metavar="CLOUD", required=True)

    p = clouds.add_parser("aws", help="an AMI, baked on a temporary EC2 builder instance")
    p.add_argument("--base-image", required=True, metavar="AMI", help="the AMI to start from (Ubuntu 24.04 or newer)")
    p.add_argument("--region", required=True)
    p.add_argument("--instance-type", default="t3.large", help="the builder's type (default t3.large)")
    p.add_argument("--subnet-id", help="the builder's subnet (default: the region's default VPC)")
    p.add_argument("--ssh-cidr", help="the network the builder's SSH opens to (default: this machine's address/32)")
    p.add_argument("--volume-gb", type=_positive, default=30, help="the image's root volume size (default 30)")
    p.add_argument("--endpoint-url", help="an EC2 endpoint other than AWS's (an emulator)")
    _common(p)
    p.set_defaults(func=cmd_bake_aws)

    p = clouds.add_parser("gcp", help="a Compute Engine image, baked on a temporary builder instance")
    p.add_argument("--base-image", required=True, metavar="IMAGE",
                   help="the image to start from, e.g. projects/ubuntu-os-cloud/global/images/family/"
                        "ubuntu-2404-lts-amd64")
    p.add_argument("--project", required=True)
    p.add_argument("--zone", required=True)
    p.add_argument("--machine-type", default="e2-standard-4", help="the builder's machine type (default e2-standard-4)")
    p.add_argument("--network", default="global/networks/default", help="the builder's network")
    p.add_argument("--subnetwork", help="the builder's subnetwork")
    p.add_argument("--disk-gb", type=_positive, default=30, help="the image's disk size (default 30)")
    p.add_argument("--family", default="det-agent", help="the image family (default det-agent)")
    p.add_argument("--endpoint", help="a Compute Engine endpoint other than Google's (an emulator)")
    _common(p)
    p.set_defaults(func=cmd_bake_gcp)
