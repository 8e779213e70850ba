"""The master.yaml a deployed master runs with, as a plain dict (rendered to YAML by `to_yaml`).

The pool's `provider:` block uses the field names `provisioners/ec2.py` (`Ec2Config`) and
`provisioners/gce.py` (`GceConfig`) accept, plus the autoscaler's own (`max_instances`,
`slots_per_instance`, `spot`, `zones`; see `controlplane/master/autoscaling/`). Values that only
the instance knows (`public_url`: its private address) or that a local run replaces (`db.url`,
`security.join_token_file`) are filled in by the boot script (`infra/master_boot/`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import yaml

from infra.options import TAG_DEPLOYMENT, TAG_ROLE, AwsOptions, GcpOptions

CONFIG_DIR = "/etc/controlplane"  # the boot script's default; DET_MASTER_CONFIG_DIR overrides it
DATA_DIR = "/var/lib/controlplane-master"
DB_NAME = DB_USER = "determined"
POOL = "gpu"
# Keys the boot script writes itself (see master_boot/render.py): the rest is written as rendered.
INSTANCE_KEYS = ("host", "public_url", "db", "security")

# GPUs per instance of the usual AWS GPU types (slots_per_instance); an unknown type counts as 1.
_AWS_GPUS = {
    "g4dn.12xlarge": 4, "g4dn.metal": 8, "g5.12xlarge": 4, "g5.24xlarge": 4, "g5.48xlarge": 8,
    "g6.12xlarge": 4, "g6.24xlarge": 4, "g6.48xlarge": 8, "g6e.12xlarge": 4, "g6e.24xlarge": 4,
    "g6e.48xlarge": 8, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8, "p4d.24xlarge": 8,
    "p4de.24xlarge": 8, "p5.48xlarge": 8,
}


def aws_gpus(instance_type: str) -> int:
    return _AWS_GPUS.get(instance_type, 1)


def postgres_url(host: str, password: str, port: int = 5432) -> str:
    """The master's db.url; the password is URL-quoted (it may hold any printable character)."""
    return f"postgresql://{DB_USER}:{quote(password, safe='')}@{host}:{port}/{DB_NAME}"


def aws_pool_provider(opts: AwsOptions, *, image_id: str, zone_subnets: dict[str, str], agent_sg_id: str,
                      agent_instance_profile_arn: str) -> dict[str, Any]:
    """`type: aws` for this account: agents in the deployment's subnets, its agent security group and
    instance profile, tagged with the deployment (the master's IAM policy terminates only those)."""
    types = list(opts.gpu_agent_instance_types)
    zones = list(zone_subnets)
    provider: dict[str, Any] = {
        "type": "aws",
        "region": opts.region,
        "image_id": image_id,
        "instance_type": types[0] if len(types) == 1 else types,
        "spot": opts.spot,
        "zones": zones,
        "zone_subnets": dict(zone_subnets),
        "subnet_id": zone_subnets[zones[0]],
        "security_group_ids": [agent_sg_id],
        "iam_instance_profile": agent_instance_profile_arn,
        "extra_tags": {**opts.tags, TAG_DEPLOYMENT: opts.cluster_id, TAG_ROLE: "agent"},
        "max_instances": opts.max_dynamic_agents,
        # One number per pool: the smallest, so the autoscaler never counts on slots a type lacks.
        "slots_per_instance": min(aws_gpus(t) for t in types),
    }
    if opts.keypair:
        provider["key_name"] = opts.keypair
    return provider


def gcp_pool_name(index: int, machine_type: str) -> str:
    """GCE pools hold one machine type each (GceConfig.machine_type): `gpu`, then `gpu-<type>`."""
    return POOL if index == 0 else f"{POOL}-{re.sub(r'[^a-z0-9-]', '-', machine_type.lower())}"


def gcp_pool_providers(opts: GcpOptions, *, image: str, network: str, subnetwork: str,
                       agent_service_account: str) -> dict[str, dict[str, Any]]:
    """pool name -> `type: gcp` provider, one per machine type."""
    labels = {**opts.labels, TAG_DEPLOYMENT: opts.cluster_id, TAG_ROLE: "agent"}
    out: dict[str, dict[str, Any]] = {}
    for i, machine_type in enumerate(opts.gpu_agent_machine_types):
        out[gcp_pool_name(i, machine_type)] = {
            "type": "gcp",
            "project": opts.project_id,
            "zones": [opts.zone],
            "machine_type": machine_type,
            "image": image,
            "gpu_type": opts.gpu_type if opts.gpus_per_agent else None,
            "gpu_count": opts.gpus_per_agent,
            "provisioning_model": "SPOT" if opts.spot else "STANDARD",
            "service_account": agent_service_account,
            "network": network,
            "subnetwork": subnetwork,
            "external_ip": False,  # egress through the deployment's Cloud NAT
            "labels": labels,
            "max_instances": opts.max_dynamic_agents,
            "slots_per_instance": opts.gpus_per_agent,
        }
    return out


def master_config(*, cluster_id: str, port: int, db_url: str, checkpoint_storage: dict[str, Any],
                  pools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The whole master.yaml; `pools` is pool name -> provider block (the first is the default)."""
    return {
        "cluster_name": cluster_id,
        "host": "0.0.0.0",  # reachable from the agents and, through the security group/firewall, the user
        "port": port,
        # The task proxy (notebooks, TensorBoards): next to the API's port and open to the same users
        # (security group / firewall). It serves each task on a host of its own (<task>.<proxy host>);
        # a master reached by a bare IP address has no such hosts, so notebooks answer 503 until the
        # admin adds proxy_url with a wildcard DNS name for this address (https://*.tasks.example.com).
        "proxy_port": port + 1,
        "data_dir": DATA_DIR,
        "db": {"url": db_url},
        "security": {"join_token_file": f"{CONFIG_DIR}/join-token"},
        "checkpoint_storage": checkpoint_storage,
        "resource_pools": [{"pool_name": name, "provider": provider} for name, provider in pools.items()],
    }


def to_yaml(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
