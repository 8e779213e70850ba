"""A pool's `provider:` block (Determined's field names) → the provisioner that serves it.

`type: aws` → EC2 (boto3; `endpoint_url` for moto or another EC2-compatible endpoint),
`type: gcp` → GCE (google-cloud-compute; `endpoint` for a local emulator), `type: local` →
det-agent processes on this machine, `type: fake` → in memory (tests and simulations).
Unknown fields are refused with the field's name, before the master starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from controlplane.config.errors import ConfigError
from controlplane.master.pools import PoolConfig

# Fields the autoscaler reads (PoolScaling), not the provisioner.
SCALING_FIELDS = {"type", "min_instances", "max_instances", "max_idle_agent_period", "max_agent_starting_period",
                  "slots_per_instance", "prices", "spot", "spot_fallback_to_on_demand", "zones", "zone",
                  "instance_type", "machine_type"}


def _typed(cls: type, raw: dict[str, Any], path: str, rename: dict[str, str] | None = None) -> Any:
    fields = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = (rename or {}).get(key, key)
        if name in fields:
            values[name] = value
        elif key not in SCALING_FIELDS:
            raise ConfigError(f"{path}.{key}", "unknown field")
    try:
        return cls(**values)
    except TypeError as e:  # a required field is missing
        raise ConfigError(path, str(e).replace("__init__() ", "")) from e


def provisioner_for(pool: PoolConfig, *, local_command: Callable[[str, str], list[str]] | None = None,
                    overrides: dict[str, Any] | None = None) -> Any:
    if overrides and pool.name in overrides:
        return overrides[pool.name]
    raw, path = dict(pool.provider), f"resource_pools[{pool.name}].provider"
    kind = raw.get("type")
    if kind == "aws":
        from provisioners.ec2 import Ec2Config, Ec2Provisioner

        raw.setdefault("instance_type", "g5.xlarge")
        cfg = _typed(Ec2Config, {**raw, "instance_type": raw["instance_type"], "zones": raw.get("zones") or []},
                     path)
        return Ec2Provisioner(cfg)
    if kind == "gcp":
        from provisioners.gce import GceConfig, GceProvisioner

        zones = raw.get("zones") or ([raw["zone"]] if raw.get("zone") else [])
        cfg = _typed(GceConfig, {**raw, "zones": zones, "machine_type": raw.get("machine_type", "n1-standard-4")},
                     path)
        return GceProvisioner(cfg)
    if kind == "local":
        from provisioners.local import LocalProvisioner

        if local_command is None:
            raise ConfigError(f"{path}.type", "the local provider needs the master's agent command")
        return LocalProvisioner(lambda instance_id, _req: local_command(pool.name, instance_id))
    if kind == "fake":
        from provisioners.fake import FakeProvisioner

        return FakeProvisioner()
    raise ConfigError(f"{path}.type", f"must be one of aws, gcp, local, fake, got {kind!r}")
