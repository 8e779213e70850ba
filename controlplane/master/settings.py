"""Master settings, read from master.yaml by ``det-master --config`` and passed to create_app.

Nothing here is read at import time; tests build MasterSettings directly.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.config.errors import ConfigError
from controlplane.config.fields import duration as parse_duration
from controlplane.config.limits import Limits
from controlplane.config.storage_choices import StorageChoice, parse_choices
from controlplane.master.pools import PoolConfig, parse_pools, preemption_timeout
from controlplane.master.task_hosts import proxy_url_problem


@dataclass
class MasterSettings:
    data_dir: Path
    db_url: str = ""  # default: SQLite file in data_dir
    host: str = "127.0.0.1"
    port: int = 8080
    join_token: str = ""  # agents must present it; empty only in tests that say so
    cluster_name: str = "controlplane"
    # Determined's security.initial_user_password: admin's and determined's password when first created.
    initial_user_password: str = ""
    checkpoint_storage: dict[str, Any] = field(default_factory=dict)
    # More places an experiment may pick for its checkpoints (``name`` + a storage block each);
    # the cluster's ``checkpoint_storage`` is always the choice named ``default`` (storage_choices.py).
    checkpoint_storage_choices: list[dict[str, Any]] = field(default_factory=list)
    # Determined's task_container_defaults.image: the environment of an experiment that names none
    # (a name, or {cpu:, cuda:, rocm:}); None: the agents' own interpreter, ``default``.
    default_image: str | dict[str, str] | None = None
    # An agent away longer than this loses its allocations (re-queued without spending restarts).
    # Its agents kill their tasks after hearing nothing for this long less a margin, so it outlasts a
    # database failover (about 30-60 s on managed PostgreSQL) and a master restart.
    agent_reconnect_wait_s: float = 70.0
    kill_grace_s: float = 10.0
    # A paused, canceled or preempted trial that has not exited this long after the signal is killed
    # (Determined's default, an hour: its harness looks at the signal only at report, validation or
    # checkpoint boundaries). master.yaml: `preemption_timeout` or Determined's
    # `task_container_defaults.preemption_timeout`; a pool's and an experiment's own win over it.
    preemption_timeout_s: float = 3600.0
    # Pools the master knows; agents of other pools are refused.
    pools: list[PoolConfig] = field(default_factory=lambda: parse_pools(None, None)[0])
    default_resource_pool: str = "default"
    default_aux_pool: str = "default"
    log_level: str = "INFO"
    # The URL instances use to reach the master (boot scripts); default http://127.0.0.1:<port>.
    public_url: str = ""
    # The task proxy's own listener (/proxy/<id>/...: notebooks, TensorBoards), each task on a host
    # of its own (task_hosts.py) so a proxied page never runs with the master's or another task's:
    # its port (0: a free one, recorded in data_dir and taken again at the next start) and, behind
    # a TLS terminator or on a domain of its own, its public origin with a wildcard (https://*.tasks.example.com).
    proxy_port: int = 0
    proxy_url: str = ""
    autoscaler_tick_s: float = 5.0
    # Bounded work per create: a grid with more points, or a searcher that would start more trials
    # at once, is refused (Determined's MaxAllowedTrials);
    # a config over this many bytes (YAML text, or its JSON once aliases are expanded) or nested
    # deeper is refused before it is parsed further.
    max_experiment_trials: int = 2000
    max_config_bytes: int = 1024 * 1024
    max_config_depth: int = 64
    # Values and keys of one config (aliases expanded), counted while its text is read.
    max_config_nodes: int = 50_000
    # Bounded readers: a config with more hyperparameters is refused; long answers (followed logs,
    # whole-log reads, the SDK's metric streams) are capped per user and in all (429 beyond).
    max_hyperparameters: int = 1000
    max_streams_per_user: int = 8
    max_streams: int = 256
    # Tests and simulations: pool name -> a provisioner object used instead of the configured one.
    provisioner_overrides: dict[str, Any] = field(default_factory=dict)

    def pool(self, name: str) -> PoolConfig | None:
        return next((p for p in self.pools if p.name == name), None)

    def preemption_timeout_for(self, pool: str, own_s: float | None = None) -> float:
        """Determined's precedence: the experiment's own `preemption_timeout`, else its pool's
        `task_container_defaults.preemption_timeout`, else the master's. An experiment's own may
        only shorten its pool's (checked at create; capped here too, for one moved to another pool)."""
        config = self.pool(pool)
        cap = self.preemption_timeout_s
        if config is not None and config.preemption_timeout_s is not None:
            cap = config.preemption_timeout_s
        return cap if own_s is None else min(own_s, cap)

    def preemption_timeout_problem(self, own: Any, pools: list[str]) -> str | None:
        """Why an experiment's own ``preemption_timeout`` is refused, or None: it may shorten the
        timeout of its pool (the longest of ``pools``; none: the master's), never lengthen it, or it
        would keep the pool's slots from the work it must make room for. Not a number of seconds:
        None (the experiment's schema check names that)."""
        if not isinstance(own, int) or isinstance(own, bool):
            return None
        cap = max((self.preemption_timeout_for(p) for p in pools), default=self.preemption_timeout_s)
        if own <= cap:
            return None
        where = f"resource pool {pools[0]!r}" if len(pools) == 1 else "any resource pool"
        return f"{own} seconds is over the {cap:g} seconds of {where}, the most an experiment may set"

    def config_limits(self) -> Limits:
        """What an experiment config (or a template, or an override) may hold, checked as it is read."""
        return Limits(self.max_config_bytes, self.max_config_depth, self.max_config_nodes, self.max_hyperparameters)

    def pool_names(self) -> list[str]:
        return [p.name for p in self.pools]

    def resolved_db_url(self) -> str:
        return self.db_url or f"sqlite:///{self.data_dir / 'master.db'}"

    def default_checkpoint_storage(self) -> dict[str, Any]:
        if self.checkpoint_storage:
            return dict(self.checkpoint_storage)
        return {"type": "shared_fs", "host_path": str(self.data_dir / "checkpoints")}

    def storage_choices(self) -> list[StorageChoice]:
        """Where an experiment's checkpoints may go: ``default`` first (ConfigError for a bad block)."""
        return parse_choices(self.default_checkpoint_storage(), self.checkpoint_storage_choices)


def _read_join_token(path: Path) -> str:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError("security.join_token_file", f"{path} must not be readable by others (chmod 600)")
    return path.read_text().strip()


def _default_image(defaults: Any) -> str | dict[str, str] | None:
    if defaults is None:
        return None
    if not isinstance(defaults, dict):
        raise ConfigError("task_container_defaults", "must be a mapping")
    image = defaults.get("image")
    if image is None or (isinstance(image, str) and image):
        return image
    if isinstance(image, dict) and image and all(isinstance(k, str) and k in ("cpu", "cuda", "rocm") and
                                                 isinstance(v, str) and v for k, v in image.items()):
        return dict(image)
    raise ConfigError("task_container_defaults.image", "must be an environment name or a mapping of "
                                                       "cpu/cuda/rocm to names")


def load_settings(path: str | os.PathLike[str]) -> MasterSettings:
    """Read master.yaml; errors name the field."""
    from controlplane.config.yaml_io import load_yaml

    p = Path(path)
    try:
        raw = load_yaml(p.read_text(), source=str(p))
    except OSError as e:
        raise ConfigError("", f"cannot read {p}: {e.strerror}") from e
    data_dir = Path(raw.get("data_dir") or Path.home() / ".local/share/controlplane/master").expanduser()
    db = raw.get("db") or {}
    if not isinstance(db, dict):
        raise ConfigError("db", "must be a mapping with a 'url'")
    security = raw.get("security") or {}
    join_token = security.get("join_token", "") or ""
    if security.get("join_token_file"):
        join_token = _read_join_token(Path(security["join_token_file"]).expanduser())
    port = raw.get("port", 8080)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError("port", f"must be an integer in 1..65535, got {port!r}")
    rm = dict(raw.get("resource_manager") or {})
    for top, key in (("default_compute_pool", "default_compute_resource_pool"),
                     ("default_aux_pool", "default_aux_resource_pool")):
        if raw.get(top) and not rm.get(key):
            rm[key] = raw[top]
    pools, default_compute, default_aux = parse_pools(raw.get("resource_pools"), rm)
    settings = MasterSettings(
        data_dir=data_dir,
        db_url=str(db.get("url", "")),
        host=str(raw.get("host", "127.0.0.1")),
        port=port,
        join_token=join_token,
        initial_user_password=str(security.get("initial_user_password") or ""),
        cluster_name=str(raw.get("cluster_name", "controlplane")),
        checkpoint_storage=dict(raw.get("checkpoint_storage") or {}),
        checkpoint_storage_choices=raw.get("checkpoint_storage_choices") or [],
        pools=pools,
        default_resource_pool=default_compute,
        default_aux_pool=default_aux,
        log_level=str(raw.get("log_level", "INFO")),
        public_url=str(raw.get("public_url", "")),
        proxy_url=str(raw.get("proxy_url", "") or ""),
        default_image=_default_image(raw.get("task_container_defaults")),
    )
    for key, attr in (
        ("agent_reconnect_wait", "agent_reconnect_wait_s"),
        ("kill_grace_period", "kill_grace_s"),
        ("autoscaler_tick", "autoscaler_tick_s"),
    ):
        if key in raw:
            setattr(settings, attr, parse_duration(raw[key], key))
    timeout = _master_preemption_timeout(raw)
    if timeout is not None:
        settings.preemption_timeout_s = timeout
    proxy_port = raw.get("proxy_port", 0)
    if isinstance(proxy_port, bool) or not isinstance(proxy_port, int) or not 0 <= proxy_port < 65536:
        raise ConfigError("proxy_port", f"must be an integer in 0..65535 (0: a free port), got {proxy_port!r}")
    if proxy_port and proxy_port == port:
        raise ConfigError("proxy_port", f"must differ from port ({port}): the task proxy is another origin")
    settings.proxy_port = proxy_port
    if (problem := proxy_url_problem(settings.proxy_url)) is not None:
        raise ConfigError("proxy_url", problem)
    settings.storage_choices()  # every storage block checked at start, each mistake naming its field
    for key in ("max_experiment_trials", "max_config_bytes", "max_config_depth", "max_config_nodes",
                "max_hyperparameters",
                "max_streams_per_user", "max_streams"):
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(key, f"must be a positive integer, got {value!r}")
            setattr(settings, key, value)
    return settings


def _master_preemption_timeout(raw: dict[str, Any]) -> float | None:
    """The top-level `preemption_timeout` or Determined's `task_container_defaults.preemption_timeout`
    (both may be given only if they agree)."""
    tcd = raw.get("task_container_defaults")
    tcd_value = tcd.get("preemption_timeout") if isinstance(tcd, dict) else None
    found = [preemption_timeout(value, name) for name, value in (
        ("preemption_timeout", raw.get("preemption_timeout")),
        ("task_container_defaults.preemption_timeout", tcd_value),
    ) if value is not None]
    if len(found) == 2 and found[0] != found[1]:
        raise ConfigError("preemption_timeout", f"is {found[0]:g}s but task_container_defaults.preemption_timeout "
                                                f"is {found[1]:g}s: give one")
    return found[0] if found else None


