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
from controlplane.master.autoscaling.shapes import mixed_key, type_names
from controlplane.master.pools import PoolConfig
from provisioners.base import Provisioner

# Fields the autoscaler reads (PoolScaling), not the provisioner.
SCALING_FIELDS = {"type", "min_instances", "max_instances", "max_idle_agent_period", "max_agent_starting_period",
                  "slots_per_instance", "prices", "spot", "spot_fallback_to_on_demand", "zones", "zone",
                  "instance_type", "machine_type", "instance_types", "machine_types", "consolidation"}


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


AgentCommand = Callable[[str, str, str], list[str]]  # (pool, instance id, type) -> the det-agent command line


def _mixed_types(raw: dict[str, Any], path: str) -> list[str] | None:
    """A mixed pool's types (`instance_types` / `machine_types`), each one the provisioner may
    launch; None for Determined's single `instance_type` / `machine_type`."""
    return type_names(raw, path) if mixed_key(raw) is not None else None


def _ec2(pool: PoolConfig, raw: dict[str, Any], path: str, _command: AgentCommand | None) -> Provisioner:
    from provisioners.ec2 import Ec2Config, Ec2Provisioner

    mixed = _mixed_types(raw, path)
    if mixed is not None:
        raw["instance_type"] = mixed
    raw.setdefault("instance_type", "g5.xlarge")
    return Ec2Provisioner(_typed(Ec2Config, {**raw, "zones": raw.get("zones") or []}, path))


def _gce(pool: PoolConfig, raw: dict[str, Any], path: str, _command: AgentCommand | None) -> Provisioner:
    from provisioners.gce import GceConfig, GceProvisioner

    zones = raw.get("zones") or ([raw["zone"]] if raw.get("zone") else [])
    mixed = _mixed_types(raw, path)
    machine = mixed if mixed is not None else raw.get("machine_type", "n1-standard-4")
    return GceProvisioner(_typed(GceConfig, {**raw, "zones": zones, "machine_type": machine}, path))


def _local(pool: PoolConfig, raw: dict[str, Any], path: str, command: AgentCommand | None) -> Provisioner:
    from provisioners.local import LocalProvisioner

    if command is None:
        raise ConfigError(f"{path}.type", "the local provider needs the master's agent command")
    return LocalProvisioner(lambda instance_id, req: command(pool.name, instance_id, req.instance_type))


def _fake(pool: PoolConfig, raw: dict[str, Any], path: str, _command: AgentCommand | None) -> Provisioner:
    from provisioners.fake import FakeProvisioner

    return FakeProvisioner()


@dataclasses.dataclass(frozen=True)
class Provider:
    make: Callable[[PoolConfig, dict[str, Any], str, AgentCommand | None], Provisioner]
    boot_script: str = "ec2-user-data"  # how its instances get the agent's boot script (boot/render.py)


# The one place a provider's name leads to its modules (each imported only when a pool names it).
PROVIDERS: dict[str, Provider] = {"aws": Provider(_ec2), "gcp": Provider(_gce, "gce-startup-script"),
                                  "local": Provider(_local), "fake": Provider(_fake)}


def provisioner_for(pool: PoolConfig, *, local_command: AgentCommand | None = None,
                    overrides: dict[str, Provisioner] | None = None) -> Provisioner:
    if overrides and pool.name in overrides:
        return overrides[pool.name]
    raw, path = dict(pool.provider), f"resource_pools[{pool.name}].provider"
    kind = raw.get("type")
    provider = PROVIDERS.get(kind) if isinstance(kind, str) else None
    if provider is None:
        raise ConfigError(f"{path}.type", f"must be one of {', '.join(PROVIDERS)}, got {kind!r}")
    return provider.make(pool, raw, path, local_command)
