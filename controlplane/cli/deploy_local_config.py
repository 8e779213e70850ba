"""The configuration of a `det deploy local` cluster: the master's `master.yaml` (defaults, the
user's `--master-config` merged over them, the `local` provider's pool with `--autoscale`), the
join token the agents present, and the task environments the agents offer. Written to the data
dir by `up` (`deploy.py`).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import yaml

from controlplane.cli import deploy_procs as procs
from controlplane.cli.errors import CliError


def ensure_join_token(data_dir: Path) -> Path:
    """`<data-dir>/join-token`, created once (mode 0600) and reused so agents keep working."""
    path = data_dir / "join-token"
    if path.exists() and path.read_text().strip():
        os.chmod(path, 0o600)
        return path
    procs.write_private(path, secrets.token_urlsafe(32) + "\n")
    return path


# ---- configuration --------------------------------------------------------------------------
def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "checkpoint_storage":
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_user_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise CliError(f"cannot read master config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise CliError(f"master config {path} is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CliError(f"master config {path} must be a mapping")
    return data


def master_config(data_dir: Path, port: int, token_file: Path, user_cfg: dict[str, Any]) -> dict[str, Any]:
    defaults = {
        "port": port,
        "data_dir": str(data_dir),
        "db": {"url": f"sqlite:///{data_dir / 'master.db'}"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(data_dir / "checkpoints")},
    }
    cfg = deep_merge(defaults, user_cfg)
    cfg["port"] = port
    raw_security = cfg.get("security")
    security: dict[str, Any] = raw_security if isinstance(raw_security, dict) else {}
    cfg["security"] = {**security, "join_token_file": str(token_file)}
    cfg["security"].pop("join_token", None)
    return cfg


def autoscale_config(max_agents: int, slots: int, idle_period: str) -> dict[str, Any]:
    """The default pool served by the `local` provider: agents start on demand and go when idle."""
    return {"autoscaler_tick": "1s", "resource_pools": [{"pool_name": "default", "provider": {
        "type": "local", "instance_type": "local", "min_instances": 0, "max_instances": max_agents,
        "slots_per_instance": slots, "max_idle_agent_period": idle_period, "max_agent_starting_period": "2m"}}]}


def agent_environments(specs: list[str]) -> list[str]:
    """`--agent-environment NAME=PATH` options with absolute paths (a restarted agent may start
    from another directory); the agent itself checks the rest when it starts."""
    out: list[str] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CliError(f"--agent-environment {spec!r}: expected NAME=PATH")
        out.append(f"{name}={Path(path).expanduser().absolute()}")
    return out
