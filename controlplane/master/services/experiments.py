"""Creating experiments: validate everything first, then store it all in one transaction.

Validation is bounded and runs in a worker thread, so a large or hostile request never holds the
event loop: the config's size and depth are capped before it is parsed further, the parse is the
one activate will do (the stored config is parsed again here, and the searcher's first actions
are computed), a grid's size is computed without building it, and the context is checked entry
by entry before a byte of it is decoded. A config accepted here does not fail on activate.
A ``template`` the request names is merged under the config (Determined's rule, ``config/merge.py``)
before any of it is validated; the user's own text is kept as the original config.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import msgspec
import yaml
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import utcnow
from controlplane.config.errors import ConfigError
from controlplane.config.experiment import ExperimentConfig, parse_experiment_config
from controlplane.config.grid_axes import grid_size
from controlplane.config.limits import Limits, check_plain, hyperparameter_count, too_many_hyperparameters
from controlplane.config.merge import merge_template
from controlplane.config.storage_choices import resolve as resolve_storage
from controlplane.config.yaml_io import load_yaml
from controlplane.master.db.models import Experiment, ExperimentContext
from controlplane.master.errors import BadRequest
from controlplane.master.orchestration import lifecycle
from controlplane.master.orchestration.transitions import record_initial
from controlplane.master.principals import AuthedUser
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import checkpoints, experiment_fork, templates, workspaces
from controlplane.master.services.context import build_archive
from controlplane.master.services.environments import check_environment
from controlplane.master.services.experiment_requests import config_value
from controlplane.master.services.launcher_checks import launcher_warnings
from controlplane.master.settings import MasterSettings
from controlplane.searchers.asha import AshaSearcher
from controlplane.searchers.grid import subset_warning
from controlplane.searchers.registry import make_searcher
from controlplane.state import checkpoint as CK
from controlplane.state import experiment as E


@dataclass(frozen=True)
class Prepared:
    cfg: dict[str, Any]  # every default filled: what is stored and parsed again on activate
    text: str  # the config as the user sent it
    archive: bytes
    digest: str
    warnings: tuple[str, ...] = ()  # accepted, but not what the user may think they asked for


@dataclass(frozen=True)
class Created:
    exp: Experiment
    saved: bool  # False for validateOnly
    warnings: tuple[str, ...]


def body_field(body: Any, camel: str, default: Any = None) -> Any:
    """A create request's field, from raw JSON (camelCase or snake_case) or a typed struct."""
    snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
    if isinstance(body, dict):
        return body[camel] if camel in body else body.get(snake, default)
    value = getattr(body, snake, getattr(body, camel, default))
    return default if value is None else value


@dataclass(frozen=True)
class NamedTemplate:
    name: str
    config: dict[str, Any]


def _invalid(e: ConfigError | str, template: NamedTemplate | None) -> BadRequest:
    merged = f" (merged with template {template.name!r})" if template else ""
    return BadRequest(f"invalid experiment config{merged}: {e}")


def _limits(settings: MasterSettings) -> Limits:
    return settings.config_limits()


def _read(settings: MasterSettings, raw_config: Any) -> tuple[dict[str, Any], str]:
    limits = _limits(settings)
    if isinstance(raw_config, str):
        return load_yaml(raw_config, source="config", limits=limits), raw_config
    if isinstance(raw_config, dict):
        check_plain(raw_config, limits)  # bounded before anything recursive or slow touches it
        return raw_config, yaml.dump(raw_config, Dumper=DUMPER, sort_keys=False)
    raise BadRequest("config: required (the experiment configuration as YAML text)")


DUMPER: type[Any] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter, where PyYAML has it


def _check_searcher(settings: MasterSettings, cfg: ExperimentConfig) -> None:
    """What activate would do with it: build the searcher and take its first actions."""
    limit = settings.max_experiment_trials
    if cfg.searcher.name == "grid":
        size = grid_size(cfg.hyperparameters)
        if size > limit:
            shown = f"{size}" if size <= 10**18 else "more than 10**18"
            raise ConfigError("hyperparameters", f"the grid has {shown} points, over the limit of {limit} "
                                                 "trials per experiment (lower the counts)")
    searcher = cfg.searcher
    total = (searcher.max_trials or 1) if searcher.name == "random" else 1
    if searcher.name == "random" and searcher.max_concurrent_trials == 0 and total > limit:
        raise ConfigError("searcher.max_concurrent_trials",
                          f"0 (no limit) would start all {total} trials at once, over the limit of {limit}; "
                          "set a limit")
    try:
        built = make_searcher(cfg)
    except (ArithmeticError, ValueError, IndexError) as e:
        raise ConfigError("searcher", f"the searcher cannot start with these hyperparameters: {e}") from e
    if isinstance(built, AshaSearcher):
        first = sum(b.initial() for b in built.brackets)  # counted, not built
        if first > limit:
            raise ConfigError("searcher.max_concurrent_trials",
                              f"{searcher.max_concurrent_trials} would start {first} trials at once, over the "
                              f"limit of {limit}; set a lower limit")
    try:
        built.initial_actions()
    except (ArithmeticError, ValueError, IndexError) as e:
        raise ConfigError("searcher", f"the searcher cannot start with these hyperparameters: {e}") from e


def with_default_storage(settings: MasterSettings, raw: dict[str, Any]) -> dict[str, Any]:
    """The experiment's ``checkpoint_storage`` as one of the admin's storage places
    (``config/storage_choices.py``): absent or ``save_*`` only (what ``det e create --test`` sends):
    the cluster default; ``{name: ...}`` or a block at a choice's location: that choice, with the
    block's sub-path; anything else is a ConfigError naming the field and listing the choices."""
    return {**raw, "checkpoint_storage": resolve_storage(raw.get("checkpoint_storage"), settings.storage_choices())}


def _check_hyperparameter_count(settings: MasterSettings, raw: dict[str, Any]) -> None:
    """Of the merged config, exactly: each one costs every searcher step, list and trial answer.
    (Reading the text already stopped at the limit, ``config/yaml_events.py``.)"""
    limit = settings.max_hyperparameters
    if hyperparameter_count(raw.get("hyperparameters"), stop_after=limit) > limit:
        raise too_many_hyperparameters(limit)


def _final_config(settings: MasterSettings, raw: dict[str, Any]) -> dict[str, Any]:
    _check_hyperparameter_count(settings, raw)
    cfg = parse_experiment_config(with_default_storage(settings, raw)).to_dict()
    environment = cfg.setdefault("environment", {})
    if settings.default_image is not None and not environment.get("image"):
        environment["image"] = settings.default_image  # Determined's task_container_defaults.image
    resources = cfg.setdefault("resources", {})
    pools = settings.pool_names()
    pool = resources.get("resource_pool") or settings.default_resource_pool
    if pool not in pools:
        raise ConfigError("resources.resource_pool", f"unknown pool {pool!r} (pools: {', '.join(pools)})")
    resources["resource_pool"] = pool
    check_preemption_timeout(settings, cfg, pool)
    max_slots, slots = resources.get("max_slots"), resources.get("slots_per_trial", 1)
    if max_slots is not None and slots > max_slots:
        raise ConfigError("resources.max_slots", f"{max_slots} is fewer than slots_per_trial ({slots}): "
                                                 "no trial could ever be scheduled")
    # Parse what will be stored exactly as activate will, so nothing it checks is left for later.
    _check_searcher(settings, parse_experiment_config(cfg))
    return cfg


def check_preemption_timeout(settings: MasterSettings, cfg: dict[str, Any], pool: str) -> None:
    """An experiment's own ``preemption_timeout`` may shorten its pool's, never lengthen it."""
    if (problem := settings.preemption_timeout_problem(cfg.get("preemption_timeout"), [pool])) is not None:
        raise ConfigError("preemption_timeout", problem)


def _with_template(settings: MasterSettings, raw: dict[str, Any], template: NamedTemplate | None) -> dict[str, Any]:
    if template is None:
        return raw
    merged = merge_template(raw, template.config)
    check_plain(merged, _limits(settings))  # each part was under the caps; together they may not be
    return merged


def prepare(settings: MasterSettings, raw_config: Any, model_definition: Any,
            template: NamedTemplate | None = None) -> Prepared:
    """Everything CPU-heavy about a create, with no I/O: run it off the event loop."""
    try:
        raw, text = _read(settings, raw_config)
        cfg = _final_config(settings, _with_template(settings, raw, template))
    except ConfigError as e:
        raise _invalid(e, template) from e
    except RecursionError as e:  # a guard: depth is bounded before anything recursive runs
        raise _invalid("nested too deeply", template) from e
    archive, digest = build_archive(model_definition)
    return Prepared(cfg, text, archive, digest, create_warnings(parse_experiment_config(cfg)))


def create_warnings(cfg: ExperimentConfig) -> tuple[str, ...]:
    return tuple(w for w in (subset_warning(cfg), *launcher_warnings(cfg)) if w)


def _check_shape(rt: MasterRuntime, cfg: dict[str, Any]) -> None:
    from controlplane.master.services.jobs import shape_problem

    resources = cfg["resources"]
    problem = shape_problem(rt, resources["resource_pool"], int(resources.get("slots_per_trial", 1)))
    if problem:
        raise BadRequest(f"invalid experiment config: resources.slots_per_trial: {problem}")


def _template_name(body: Any) -> str | None:
    """``template`` (Determined's client) or ``templateName``; naming two different ones is an error."""
    given = [n for n in (body_field(body, "template"), body_field(body, "templateName")) if n]
    if len(set(given)) > 1:
        raise BadRequest(f"template: names {given[0]!r} but templateName names {given[1]!r}; give one")
    return given[0] if given else None


async def _check_warm_start(session: AsyncSession, user: AuthedUser, exp: Experiment) -> None:
    """As Determined's experiment start: the warm-start checkpoint must exist (a
    ``searcher.source_trial_id``: that trial has a completed one) and be one its creator may read."""
    searcher = exp.searcher
    if searcher.source_trial_id is None and searcher.source_checkpoint_uuid is None:
        return
    ckpt = await lifecycle.warm_start_checkpoint(session, searcher)
    if ckpt is None:
        if searcher.source_trial_id is not None:
            raise BadRequest(f"searcher.source_trial_id: no checkpoint found for source trial "
                             f"{searcher.source_trial_id}")
        raise BadRequest(f"searcher.source_checkpoint_uuid: no checkpoint found with UUID "
                         f"{searcher.source_checkpoint_uuid}")
    await checkpoints.readable_by(session, user, ckpt)
    if ckpt.state != CK.COMPLETED:
        raise BadRequest(f"cannot warm-start from checkpoint {ckpt.uuid}: it is {ckpt.state.removeprefix('STATE_')}")


async def create_experiment(rt: MasterRuntime, user: AuthedUser, body: Any) -> Created:
    """The experiment, whether it was saved (with validateOnly nothing is stored), and the
    warnings to show its creator."""
    name = _template_name(body)
    template = NamedTemplate(name, await templates.config_for_experiment(rt, name)) if name else None
    raw_config, model_definition = body_field(body, "config"), body_field(body, "modelDefinition", [])
    if isinstance(raw_config, msgspec.Raw):  # the API's body: decoded here, off the event loop
        raw_config = await anyio.to_thread.run_sync(config_value, raw_config, rt.settings.max_config_bytes)
    parent = None
    if body_field(body, "parentId") is not None and not model_definition:  # a fork: the parent's code
        parent = await experiment_fork.parent_of(rt, user, body_field(body, "parentId"))
        if isinstance(raw_config, str):
            try:
                raw_config = (await anyio.to_thread.run_sync(_read, rt.settings, raw_config))[0]
            except ConfigError:
                pass  # prepare reports it, with its path
        if isinstance(raw_config, dict):
            raw_config = experiment_fork.with_parent_secrets(raw_config, parent)
    prepared = await anyio.to_thread.run_sync(prepare, rt.settings, raw_config, model_definition, template)
    if parent is not None:
        prepared = dataclasses.replace(prepared, archive=parent.archive, digest=parent.digest)
    cfg = prepared.cfg
    _check_shape(rt, cfg)  # reads the live agent connections: on the loop
    check_environment(rt, cfg)  # the same: an environment.image no live agent of the pool offers is a 400
    activate = body_field(body, "activate", True)
    if activate is None:
        activate = True
    if not isinstance(activate, bool):
        raise BadRequest(f"activate: must be true or false, got {activate!r}")
    exp = Experiment(
        name=cfg.get("name") or "experiment", description=cfg.get("description") or "",
        labels=list(cfg.get("labels") or []), state=E.ACTIVE if activate else E.PAUSED,
        config=cfg, original_config=prepared.text, owner_id=user.id, searcher_type=cfg["searcher"]["name"],
        searcher_state=None, context_hash=prepared.digest,
        resource_pool=cfg["resources"]["resource_pool"], job_id=str(uuid.uuid4()), progress=0.0,
        priority=cfg["resources"].get("priority"), weight=float(cfg["resources"].get("weight") or 1.0),
        max_slots=cfg["resources"].get("max_slots"), queue_position=time.time(),
        archived=False, notes="", start_time=utcnow(),
    )
    if body_field(body, "validateOnly", False):
        async with rt.sessions() as session:  # a config naming no existing project is refused here too
            exp.project_id = await workspaces.project_for_experiment(session, cfg, body_field(body, "projectId"))
        exp.id = 0
        return Created(exp, False, prepared.warnings)
    async with rt.orchestrator.transaction() as session:
        exp.project_id = await workspaces.project_for_experiment(session, cfg, body_field(body, "projectId"))
        await _check_warm_start(session, user, exp)
        session.add(exp)
        await session.flush()
        session.add(ExperimentContext(experiment_id=exp.id, model_definition=prepared.archive))
        record_initial(session, exp, "created" if activate else "created paused")
        if activate:
            await rt.orchestrator.begin_experiment(session, exp)
    rt.orchestrator.wake()
    return Created(exp, True, prepared.warnings)
