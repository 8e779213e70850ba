"""What `det deploy aws|gcp up` is asked for: one frozen value per cloud, validated once.

The Pulumi programs, the preflight checks, the dry run and `down` all read these; nothing else
parses the CLI's flags. Errors name the flag.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal

# Tag/label every resource of a deployment carries; `down` and `list` find them by it, and the
# master's pool puts it on every dynamic agent it launches (provider extra_tags / labels).
TAG_DEPLOYMENT = "det-deployment"
TAG_ROLE = "det-role"  # "master" | "agent" | "builder"
# Without --agent-image / agent_image_id, the programs use the newest image `det agent-image bake` made
# (agent_image/bake/common.py tags it so): on AWS the newest AMI of this account tagged
# AGENT_IMAGE_TAG=true, on GCP the newest image of the family.
AGENT_IMAGE_TAG = "det-agent-image"
AGENT_IMAGE_FAMILY = "det-agent"

_CLUSTER_ID = re.compile(r"^[a-z][a-z0-9-]{1,38}[a-z0-9]$")
_TAG_KEY = re.compile(r"^[A-Za-z0-9_.:/=+@-]{1,63}$")


class OptionError(ValueError):
    """A flag's value is unusable; `flag` names it (e.g. "--inbound-cidr")."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


def check_cluster_id(value: str) -> str:
    # Lower-case letters, digits and dashes: valid in an S3 bucket name, a GCE resource name and a tag.
    if not _CLUSTER_ID.match(value or ""):
        raise OptionError("--cluster-id", "must be 3-40 characters of lower-case letters, digits and dashes, "
                                          f"starting with a letter, got {value!r}")
    return value


def check_cidr(value: str) -> str:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as e:
        raise OptionError("--inbound-cidr", f"{value!r} is not a network in CIDR form ({e})") from e
    return str(net)


def parse_tags(pairs: list[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _TAG_KEY.match(key) or len(value) > 255:
            raise OptionError("--add-tag", f"expected KEY=VALUE (key of letters, digits and _.:/=+@-), got {pair!r}")
        if key in (TAG_DEPLOYMENT, TAG_ROLE):
            raise OptionError("--add-tag", f"{key!r} is set by det deploy itself")
        tags[key] = value
    return tags


@dataclass(frozen=True)
class AwsOptions:
    cluster_id: str
    region: str
    inbound_cidr: str  # the only source allowed to reach the master's port (and SSH, with a keypair)
    keypair: str | None = None
    master_instance_type: str = "m6i.large"
    gpu_agent_instance_types: tuple[str, ...] = ("g4dn.xlarge",)
    max_dynamic_agents: int = 5
    spot: bool = False
    db: Literal["rds", "local"] = "local"
    master_port: int = 8080
    agent_image_id: str | None = None  # from `det agent-image bake aws`; None: looked up by tag
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_cluster_id(self.cluster_id)
        check_cidr(self.inbound_cidr)
        if not 0 <= self.max_dynamic_agents <= 1000:
            raise OptionError("--max-dynamic-agents", f"must be 0..1000, got {self.max_dynamic_agents}")
        if not self.gpu_agent_instance_types:
            raise OptionError("--gpu-agent-instance-type", "name at least one instance type")
        if self.db not in ("rds", "local"):
            raise OptionError("--db", f"must be rds or local, got {self.db!r}")


@dataclass(frozen=True)
class GcpOptions:
    cluster_id: str
    project_id: str
    region: str
    zone: str
    inbound_cidr: str
    master_machine_type: str = "n2-standard-2"
    gpu_agent_machine_types: tuple[str, ...] = ("n1-standard-8",)
    gpu_type: str = "nvidia-tesla-t4"
    gpus_per_agent: int = 1
    max_dynamic_agents: int = 5
    spot: bool = False
    db: Literal["cloudsql", "local"] = "local"
    master_port: int = 8080
    agent_image: str | None = None  # from `det agent-image bake gcp`
    allow_ssh: bool = False  # port 22 of the master from inbound_cidr, as a keypair does on AWS
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_cluster_id(self.cluster_id)
        check_cidr(self.inbound_cidr)
        if not self.zone.startswith(self.region + "-"):
            raise OptionError("--zone", f"{self.zone!r} is not in region {self.region!r}")
        if not 0 <= self.max_dynamic_agents <= 1000:
            raise OptionError("--max-dynamic-agents", f"must be 0..1000, got {self.max_dynamic_agents}")
        if not self.gpu_agent_machine_types:
            raise OptionError("--gpu-agent-machine-type", "name at least one machine type")
        if self.db not in ("cloudsql", "local"):
            raise OptionError("--db", f"must be cloudsql or local, got {self.db!r}")
