"""The experiment config: Determined's YAML, validated, with every default filled.

One module for the CLI (validate before upload) and the master (validate, store
``to_dict()``, re-parse it later: parsing a ``to_dict()`` gives the same dict back).
Keys this platform does not act on but Determined accepts are kept as they are, so an
existing Determined config still loads.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controlplane.config import fields as f
from controlplane.config.errors import ConfigError, ConfigErrors, raise_all
from controlplane.config.grid_axes import grid_size
from controlplane.config.hyperparameters import Hparam, parse_hyperparameters
from controlplane.config.hyperparameters import to_dict as hparams_to_dict
from controlplane.config.limits import INT32_MAX, check_plain

SEARCHERS = ("single", "grid", "random", "adaptive_asha", "async_halving")
ASHA_SEARCHERS = ("adaptive_asha", "async_halving")
ADAPTIVE_MODES = ("aggressive", "standard", "conservative")
# Determined keys accepted and kept as given (``preemption_timeout``, seconds, is checked and read
# by the master: ``preemption_timeout_s``).
PASSTHROUGH = {"bind_mounts", "data", "debug", "optimizations", "profiling", "records_per_epoch",
               "scheduling_unit", "workspace", "project", "perform_initial_validation", "log_policies",
               "integrations", "preemption_timeout", "internal", "pbs", "slurm",
               "tensorboard_storage", "checkpoint_policy"}
CHECKPOINT_POLICIES = ("best", "all", "none")  # what the Trial API checkpoints after a validation
STORAGE_KEYS = {
    "shared_fs": ({"host_path"}, {"storage_path", "container_path", "propagation"}),
    "s3": ({"bucket"}, {"prefix", "endpoint_url", "access_key", "secret_key", "temp_dir"}),
    "gcs": ({"bucket"}, {"prefix", "temp_dir"}),
    "directory": ({"container_path"}, set()),
}
SAVE_DEFAULTS = {"save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 1}


@dataclass
class SearcherConfig:
    name: str
    metric: str
    smaller_is_better: bool = True
    max_trials: int | None = None
    max_concurrent_trials: int = 16
    max_length: int | None = None  # the count in max_length_raw's unit; None when not set
    max_length_raw: dict[str, Any] | None = None
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None
    # adaptive_asha and async_halving (Determined's names and defaults)
    time_metric: str | None = None
    max_time: int | None = None
    divisor: float = 4.0
    max_rungs: int = 5  # adaptive_asha
    mode: str = "standard"  # adaptive_asha
    bracket_rungs: list[int] = field(default_factory=list)  # adaptive_asha
    num_rungs: int | None = None  # async_halving
    stop_once: bool | None = None  # deprecated in Determined; accepted, every decision is a stop
    extra: dict[str, Any] = field(default_factory=dict)

    def length(self) -> tuple[int, str] | None:
        """The full training length as (units, unit): ``max_time`` in ``time_metric``, else the
        older ``max_length`` (as Determined's ``Length()``)."""
        if self.max_time is not None and self.time_metric is not None:
            return self.max_time, self.time_metric
        if self.max_length_raw is not None:
            unit, units = next(iter(self.max_length_raw.items()))
            return units, unit
        return None

    def to_dict(self) -> dict[str, Any]:
        length = dict(self.max_length_raw) if self.max_length_raw is not None else None
        out = {"name": self.name, "metric": self.metric, "smaller_is_better": self.smaller_is_better,
               "max_concurrent_trials": self.max_concurrent_trials, "max_length": length,
               "source_trial_id": self.source_trial_id, "source_checkpoint_uuid": self.source_checkpoint_uuid,
               **self.extra}
        if self.max_trials is not None:
            out["max_trials"] = self.max_trials
        if self.name in ASHA_SEARCHERS:
            out.update({"time_metric": self.time_metric, "max_time": self.max_time, "divisor": self.divisor,
                        "stop_once": self.stop_once})
            if self.name == "adaptive_asha":
                out.update({"max_rungs": self.max_rungs, "mode": self.mode, "bracket_rungs": list(self.bracket_rungs)})
            else:
                out["num_rungs"] = self.num_rungs
        return out


@dataclass
class ResourcesConfig:
    slots_per_trial: int = 1
    resource_pool: str | None = None
    priority: int | None = None
    max_slots: int | None = None
    weight: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"slots_per_trial": self.slots_per_trial, "resource_pool": self.resource_pool,
                "priority": self.priority, "max_slots": self.max_slots, "weight": self.weight, **self.extra}


@dataclass
class ReproducibilityConfig:
    experiment_seed: int


@dataclass
class EnvironmentConfig:
    environment_variables: list[Any] | dict[str, Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"environment_variables": self.environment_variables, **self.extra}


@dataclass
class ExperimentConfig:
    name: str | None
    description: str
    labels: list[str]
    entrypoint: str | list[str]
    hyperparameters: dict[str, Hparam]
    searcher: SearcherConfig
    resources: ResourcesConfig
    checkpoint_storage: dict[str, Any] | None
    max_restarts: int
    reproducibility: ReproducibilityConfig
    environment: EnvironmentConfig
    min_validation_period: dict[str, Any] | None
    min_checkpoint_period: dict[str, Any] | None
    passthrough: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "labels": list(self.labels),
            "entrypoint": self.entrypoint, "hyperparameters": hparams_to_dict(self.hyperparameters),
            "searcher": self.searcher.to_dict(), "resources": self.resources.to_dict(),
            "checkpoint_storage": dict(self.checkpoint_storage) if self.checkpoint_storage else None,
            "max_restarts": self.max_restarts,
            "reproducibility": {"experiment_seed": self.reproducibility.experiment_seed},
            "environment": self.environment.to_dict(), "min_validation_period": self.min_validation_period,
            "min_checkpoint_period": self.min_checkpoint_period,
            **self.passthrough,
        }


def preemption_timeout_s(config: dict[str, Any]) -> float | None:
    """A stored config's own ``preemption_timeout`` (Determined's: whole seconds a trial gets to
    checkpoint and exit once asked); None: its pool's or the master's applies."""
    value = config.get("preemption_timeout")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _entrypoint(value: Any) -> str | list[str]:
    if value is None:
        raise ConfigError("entrypoint", "required")
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return list(value)
    raise ConfigError("entrypoint", f"must be a non-empty string or list of strings, got {value!r}")


def _searcher(raw: Any) -> SearcherConfig:
    path = "searcher"
    raw = f.mapping(raw, path)
    if not raw:
        raise ConfigError(path, "required")
    name = f.string(f.get(raw, "name", path), "searcher.name")
    if name not in SEARCHERS:
        raise ConfigError("searcher.name", f"unsupported searcher {name!r} (supported: {', '.join(SEARCHERS)})")
    known = {"name", "metric", "smaller_is_better", "max_trials", "max_concurrent_trials", "max_length",
             "source_trial_id", "source_checkpoint_uuid"}
    if name in ASHA_SEARCHERS:
        known |= ASHA_KEYS[name]
    extra = {k: v for k, v in raw.items() if k not in known and k in {"unit"}}
    f.no_unknown(raw, known | {"unit"}, path)
    cfg = SearcherConfig(name=name, metric=f.string(f.get(raw, "metric", path), "searcher.metric"), extra=extra)
    cfg.smaller_is_better = f.boolean(f.get(raw, "smaller_is_better", path, True), "searcher.smaller_is_better")
    if name == "random" or name in ASHA_SEARCHERS:
        cfg.max_trials = f.integer(f.get(raw, "max_trials", path), "searcher.max_trials", minimum=1,
                                   maximum=INT32_MAX)
    elif raw.get("max_trials") is not None:
        cfg.max_trials = f.integer(raw["max_trials"], "searcher.max_trials", minimum=1, maximum=INT32_MAX)
    cfg.max_concurrent_trials = f.integer(f.get(raw, "max_concurrent_trials", path, 16),
                                          "searcher.max_concurrent_trials", minimum=0, maximum=INT32_MAX)
    if raw.get("max_length") is not None:  # unset stays unset: trials then have no searcher operation
        cfg.max_length_raw = f.length(raw["max_length"], "searcher.max_length")
        cfg.max_length = next(iter(cfg.max_length_raw.values()))
    if raw.get("source_trial_id") is not None:
        cfg.source_trial_id = f.integer(raw["source_trial_id"], "searcher.source_trial_id", minimum=1)
    if raw.get("source_checkpoint_uuid") is not None:
        cfg.source_checkpoint_uuid = f.string(raw["source_checkpoint_uuid"], "searcher.source_checkpoint_uuid")
    if name in ASHA_SEARCHERS:
        _asha(raw, cfg)
    return cfg


ASHA_KEYS = {
    "adaptive_asha": {"time_metric", "max_time", "divisor", "max_rungs", "mode", "bracket_rungs", "stop_once"},
    "async_halving": {"time_metric", "max_time", "divisor", "num_rungs", "stop_once"},
}


def _asha(raw: dict[str, Any], cfg: SearcherConfig) -> None:
    """adaptive_asha / async_halving: Determined's fields and defaults (schemas/expconf/v0/searcher-*.json).

    The length is ``time_metric`` + ``max_time`` (Determined >= 0.35; 0.38 requires them), or the
    older ``max_length`` that Determined still parses; one of the two is required."""
    path = "searcher"
    if raw.get("time_metric") is not None:
        cfg.time_metric = f.string(raw["time_metric"], "searcher.time_metric")
        if not cfg.time_metric:
            raise ConfigError("searcher.time_metric", "must be a metric name, got ''")
    if raw.get("max_time") is not None:
        cfg.max_time = f.integer(raw["max_time"], "searcher.max_time", minimum=1)
    if cfg.max_time is not None and cfg.time_metric is None:
        raise ConfigError("searcher.time_metric", f"required with max_time (the validation metric max_time "
                                                  f"counts, e.g. batches), for the {cfg.name} searcher")
    if cfg.time_metric is not None and cfg.max_time is None:
        raise ConfigError("searcher.max_time", f"required with time_metric, for the {cfg.name} searcher")
    if cfg.max_time is None:
        if cfg.max_length_raw is None:
            raise ConfigError("searcher.max_time", f"required (with time_metric; or the older max_length) "
                                                   f"by the {cfg.name} searcher")
        if cfg.max_length == 0:
            raise ConfigError("searcher.max_length", f"must be > 0 for the {cfg.name} searcher")
    divisor = f.number(f.get(raw, "divisor", path, 4.0), "searcher.divisor")
    if divisor <= 1:
        raise ConfigError("searcher.divisor", f"must be > 1, got {divisor}")
    cfg.divisor = float(divisor)
    if raw.get("stop_once") is not None:
        cfg.stop_once = f.boolean(raw["stop_once"], "searcher.stop_once")
    if cfg.name == "async_halving":
        cfg.num_rungs = f.integer(f.get(raw, "num_rungs", path), "searcher.num_rungs", minimum=1, maximum=64)
        return
    cfg.max_rungs = f.integer(f.get(raw, "max_rungs", path, 5), "searcher.max_rungs", minimum=1, maximum=64)
    mode = f.string(f.get(raw, "mode", path, "standard"), "searcher.mode")
    if mode not in ADAPTIVE_MODES:
        raise ConfigError("searcher.mode", f"must be one of {', '.join(ADAPTIVE_MODES)}, got {mode!r}")
    cfg.mode = mode
    rungs = f.get(raw, "bracket_rungs", path, [])
    if not isinstance(rungs, list):
        raise ConfigError("searcher.bracket_rungs", f"must be a list of integers, got {rungs!r}")
    if len(rungs) > 64:
        raise ConfigError("searcher.bracket_rungs", f"at most 64 brackets, got {len(rungs)}")
    cfg.bracket_rungs = [f.integer(r, f"searcher.bracket_rungs[{i}]", minimum=1, maximum=64)
                         for i, r in enumerate(rungs)]


def _resources(raw: Any) -> ResourcesConfig:
    path = "resources"
    raw = f.mapping(raw, path)
    known = {"slots_per_trial", "resource_pool", "priority", "max_slots", "weight"}
    passthrough = {"shm_size", "native_parallel", "agent_label", "devices", "is_single_node"}
    f.no_unknown(raw, known | passthrough, path)
    cfg = ResourcesConfig(extra={k: v for k, v in raw.items() if k in passthrough})
    cfg.slots_per_trial = f.integer(f.get(raw, "slots_per_trial", path, 1), "resources.slots_per_trial", minimum=0,
                                    maximum=INT32_MAX)
    if raw.get("resource_pool") is not None:
        cfg.resource_pool = f.string(raw["resource_pool"], "resources.resource_pool")
    if raw.get("priority") is not None:
        cfg.priority = f.integer(raw["priority"], "resources.priority", minimum=1, maximum=99)
    if raw.get("max_slots") is not None:
        cfg.max_slots = f.integer(raw["max_slots"], "resources.max_slots", minimum=1, maximum=INT32_MAX)
    cfg.weight = float(f.number(f.get(raw, "weight", path, 1.0), "resources.weight", positive=True))
    return cfg


def _checkpoint_storage(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    path = "checkpoint_storage"
    raw = f.mapping(raw, path)
    if raw.get("name") is not None:  # one of the admin's storage choices, which the master resolves
        return _storage_choice_reference(raw, path)
    kind = f.get(raw, "type", path)
    if kind not in STORAGE_KEYS:
        raise ConfigError("checkpoint_storage.type",
                          f"must be one of {', '.join(STORAGE_KEYS)}, got {kind!r}")
    required, optional = STORAGE_KEYS[kind]
    f.no_unknown(raw, {"type"} | required | optional | set(SAVE_DEFAULTS), path)
    out: dict[str, Any] = {"type": kind}
    for key in sorted(required):
        out[key] = f.string(f.get(raw, key, path), f.join(path, key))
    for key in sorted(optional):
        if raw.get(key) is not None:
            out[key] = f.string(raw[key], f.join(path, key))
    for key, default in SAVE_DEFAULTS.items():
        out[key] = f.integer(f.get(raw, key, path, default), f.join(path, key), minimum=0)
    return out


def _storage_choice_reference(raw: dict[str, Any], path: str) -> dict[str, Any]:
    """``{name: scratch[, storage_path|prefix: ...][, save_*]}``: checked here for shape only (the
    CLI checks before upload); the master replaces it by the choice's block (``storage_choices.py``)."""
    every_key = {"name", "type"}.union(*(req | opt for req, opt in STORAGE_KEYS.values()))
    f.no_unknown(raw, every_key | set(SAVE_DEFAULTS), path)
    out: dict[str, Any] = {}
    for key in sorted(every_key):
        if raw.get(key) is not None:
            out[key] = f.string(raw[key], f.join(path, key))
    for key, default in SAVE_DEFAULTS.items():
        out[key] = f.integer(f.get(raw, key, path, default), f.join(path, key), minimum=0)
    return out


def _environment(raw: Any) -> EnvironmentConfig:
    raw = f.mapping(raw, "environment")
    env_vars = raw.get("environment_variables") or []
    path = "environment.environment_variables"
    groups = env_vars.values() if isinstance(env_vars, dict) else [env_vars]
    if isinstance(env_vars, dict):
        f.no_unknown(env_vars, {"cpu", "cuda", "rocm"}, path)
    for group in groups:
        if not isinstance(group, list) or not all(isinstance(e, str) and "=" in e for e in group):
            raise ConfigError(path, f"must be a list of \"NAME=value\" strings, got {group!r}")
    _pip_requirements(raw.get("pip_requirements"))
    return EnvironmentConfig(env_vars, {k: v for k, v in raw.items() if k != "environment_variables"})


def _pip_requirements(value: Any) -> None:
    """``environment.pip_requirements`` (this platform's; Determined installs from startup-hook.sh): lines
    of a pip requirements file the agent installs before the entrypoint (agent_image/agent/task_python.py)."""
    path = "environment.pip_requirements"
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(r, str) and r.strip() for r in value):
        raise ConfigError(path, f"must be a list of requirement strings such as \"torch==2.3.1\", got {value!r}")
    for i, line in enumerate(value):
        if any(c in line for c in "\n\r\0"):
            raise ConfigError(f"{path}[{i}]", "must be one line of a requirements file")


def _period(raw: dict[str, Any], key: str) -> dict[str, Any] | None:
    return f.length(raw[key], key) if raw.get(key) is not None else None


def _top_level_checks(raw: dict[str, Any]) -> None:
    errors: list[ConfigError] = []
    if raw.get("preemption_timeout") is not None:
        try:
            f.integer(raw["preemption_timeout"], "preemption_timeout", minimum=0, maximum=INT32_MAX)
        except ConfigError as e:
            errors.append(e)
    policy = raw.get("checkpoint_policy")
    if policy is not None and policy not in CHECKPOINT_POLICIES:
        errors.append(ConfigError("checkpoint_policy",
                                  f"must be one of {', '.join(CHECKPOINT_POLICIES)}, got {policy!r}"))
    raise_all(errors)


def _labels(labels: Any) -> list[str]:
    labels = labels or []
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise ConfigError("labels", f"must be a list of strings, got {labels!r}")
    return list(labels)


def _reproducibility(value: Any) -> ReproducibilityConfig:
    repro = f.mapping(value, "reproducibility")
    f.no_unknown(repro, {"experiment_seed"}, "reproducibility")
    seed = repro.get("experiment_seed")
    # An unseeded experiment gets a seed now, so the stored config replays it exactly.
    seed = random.SystemRandom().randrange(2**31) if seed is None else \
        f.integer(seed, "reproducibility.experiment_seed", minimum=0)
    return ReproducibilityConfig(seed)


def parse_experiment_config(raw: Any) -> ExperimentConfig:
    """Size and depth are the caller's to bound (``limits.check_plain`` with the master's limits);
    here every value must be plain JSON data: 64-bit integers, finite floats, string keys. Each part
    is read even when another is wrong, so every mistake is reported at once (``ConfigErrors``)."""
    raw = f.mapping(raw, "")
    check_plain(raw)
    errors: list[ConfigError] = []

    def read(parse: Callable[..., Any], *args: Any) -> Any:
        try:
            return parse(*args)
        except ConfigErrors as e:
            errors.extend(e.errors)
        except ConfigError as e:
            errors.append(e)
        return None

    known = {"name", "description", "labels", "entrypoint", "hyperparameters", "searcher", "resources",
             "checkpoint_storage", "max_restarts", "reproducibility", "environment", "min_validation_period",
             "min_checkpoint_period"}
    read(f.no_unknown, raw, known | PASSTHROUGH, "")
    read(_top_level_checks, raw)
    fields = {
        "name": read(lambda: f.string(raw["name"], "name") if raw.get("name") is not None else None),
        "description": read(lambda: f.string(raw.get("description") or "", "description")),
        "labels": read(_labels, raw.get("labels")),
        "entrypoint": read(_entrypoint, raw.get("entrypoint")),
        "hyperparameters": read(parse_hyperparameters, raw.get("hyperparameters")),
        "searcher": read(_searcher, raw.get("searcher")),
        "resources": read(_resources, raw.get("resources")),
        "checkpoint_storage": read(_checkpoint_storage, raw.get("checkpoint_storage")),
        "max_restarts": read(lambda: f.integer(f.get(raw, "max_restarts", "", 5), "max_restarts", minimum=0)),
        "reproducibility": read(_reproducibility, raw.get("reproducibility")),
        "environment": read(_environment, raw.get("environment")),
        "min_validation_period": read(_period, raw, "min_validation_period"),
        "min_checkpoint_period": read(_period, raw, "min_checkpoint_period"),
    }
    raise_all(errors)
    cfg = ExperimentConfig(**fields, passthrough={k: v for k, v in raw.items() if k in PASSTHROUGH})
    if cfg.searcher.name == "grid":
        grid_size(cfg.hyperparameters)  # every numeric range needs a `count`: say so at submit time
    return cfg

