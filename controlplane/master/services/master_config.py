"""The master's effective configuration (``det master config``), every secret masked.

What the master runs with after defaults, in master.yaml's own field names, so an operator can
compare it with the file: the join token and the database password are always masked; the
checkpoint storage, its other choices and the pools' provider blocks go through ``redaction`` like any config
(``secret_key``, ``access_key``, credentials...). Test-only settings (provisioner overrides) are
left out.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from controlplane.master.redaction import MASK, redact_storage
from controlplane.master.settings import MasterSettings


def _db_url(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return MASK  # not a URL we can take apart: show none of it
    return parsed.render_as_string(hide_password=True)  # user:***@host


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


def effective_config(settings: MasterSettings) -> dict[str, Any]:
    pools = []
    for pool in settings.pools:
        p = pool.policy
        entry: dict[str, Any] = {
            "pool_name": pool.name, "description": pool.description,
            "scheduler": {"type": p.scheduler, "preemption": p.preemption, "default_priority": p.default_priority,
                          "fitting_policy": p.fitting_policy},
            "max_aux_containers_per_agent": p.max_zero_slot_per_agent,
        }
        if pool.provider:
            entry["provider"] = redact_storage(dict(pool.provider))
        if pool.preemption_timeout_s is not None:
            seconds = pool.preemption_timeout_s
            entry["task_container_defaults"] = {"preemption_timeout": int(seconds) if seconds.is_integer() else seconds}
        pools.append(entry)
    return {
        "cluster_name": settings.cluster_name,
        "data_dir": str(settings.data_dir),
        "host": settings.host,
        "port": settings.port,
        "public_url": settings.public_url,
        "db": {"url": _db_url(settings.resolved_db_url())},
        "security": {"join_token": MASK if settings.join_token else ""},
        "checkpoint_storage": redact_storage(settings.default_checkpoint_storage()),
        "checkpoint_storage_choices": [redact_storage({"name": c.name, **c.storage})
                                       for c in settings.storage_choices()[1:]],
        "resource_manager": {"type": "agent", "default_compute_resource_pool": settings.default_resource_pool,
                             "default_aux_resource_pool": settings.default_aux_pool},
        "resource_pools": pools,
        "log": {"level": settings.log_level.lower(), "color": False},
        "agent_reconnect_wait": _duration(settings.agent_reconnect_wait_s),
        "kill_grace_period": _duration(settings.kill_grace_s),
        "preemption_timeout": _duration(settings.preemption_timeout_s),
        "autoscaler_tick": _duration(settings.autoscaler_tick_s),
        "max_experiment_trials": settings.max_experiment_trials,
        "max_config_bytes": settings.max_config_bytes,
        "max_config_depth": settings.max_config_depth,
        "max_config_nodes": settings.max_config_nodes,
    }
