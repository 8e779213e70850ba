"""Cloud provisioners: one module per cloud (`ec2`, `gce`, `local`, `fake`) behind one protocol.

Only the provider-neutral types are re-exported here; each cloud module imports its SDK lazily,
so `import provisioners` works without boto3 or google-cloud-compute and keeps the CLI fast.
"""

from provisioners.base import (
    TAG_CLUSTER,
    TAG_POOL,
    TAG_REQUEST,
    Fatal,
    Instance,
    InvalidConfig,
    LaunchRequest,
    NoCapacity,
    Provisioner,
    ProvisionerError,
    QuotaExceeded,
    Transient,
)

__all__ = [
    "TAG_CLUSTER",
    "TAG_POOL",
    "TAG_REQUEST",
    "Fatal",
    "Instance",
    "InvalidConfig",
    "LaunchRequest",
    "NoCapacity",
    "Provisioner",
    "ProvisionerError",
    "QuotaExceeded",
    "Transient",
]
