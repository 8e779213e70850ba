"""Creating experiments: validate everything first, then store it all in one transaction."""

from __future__ import annotations

import time
import uuid

import yaml

from controlplane.common.timeutil import utcnow
from controlplane.config.errors import ConfigError
from controlplane.config.experiment import parse_experiment_config
from controlplane.config.yaml_io import load_yaml
from controlplane.master.api.requests import field
from controlplane.master.db.models import Experiment
from controlplane.master.errors import BadRequest
from controlplane.master.orchestration.transitions import record_initial
from controlplane.master.runtime import MasterRuntime
from controlplane.master.principals import AuthedUser
from controlplane.master.services.context import build_archive
from controlplane.state import experiment as E


def validated_config(rt: MasterRuntime, body: dict) -> tuple[dict, str]:
    """Returns (config with every default filled, the original YAML text)."""
    raw_config = field(body, "config")
    if isinstance(raw_config, dict):
        text = yaml.safe_dump(raw_config, sort_keys=False)
        raw = raw_config
    elif isinstance(raw_config, str):
        text = raw_config
        try:
            raw = load_yaml(text, source="config")
        except ConfigError as e:
            raise BadRequest(f"invalid experiment config: {e}") from e
    else:
        raise BadRequest("config: required (the experiment configuration as YAML text)")
    try:
        cfg = parse_experiment_config(raw).to_dict()
    except ConfigError as e:
        raise BadRequest(f"invalid experiment config: {e}") from e
    if not cfg.get("checkpoint_storage"):
        storage = rt.settings.default_checkpoint_storage()
        for key, default in (("save_experiment_best", 0), ("save_trial_best", 1), ("save_trial_latest", 1)):
            storage.setdefault(key, default)
        cfg["checkpoint_storage"] = storage
    resources = cfg.setdefault("resources", {})
    pools = rt.settings.pool_names()
    pool = resources.get("resource_pool") or rt.settings.default_resource_pool
    if pool not in pools:
        raise BadRequest(f"invalid experiment config: resources.resource_pool: unknown pool {pool!r} "
                         f"(pools: {', '.join(pools)})")
    resources["resource_pool"] = pool
    from controlplane.master.services.jobs import shape_problem

    problem = shape_problem(rt, pool, int(resources.get("slots_per_trial", 1)))
    if problem:
        raise BadRequest(f"invalid experiment config: resources.slots_per_trial: {problem}")
    return cfg, text


async def create_experiment(rt: MasterRuntime, user: AuthedUser, body: dict) -> tuple[Experiment, bool]:
    """Returns (experiment, saved). With validateOnly nothing is stored."""
    cfg, text = validated_config(rt, body)
    archive, digest = build_archive(field(body, "modelDefinition", []))
    activate = field(body, "activate", True)
    if activate is None:
        activate = True
    exp = Experiment(
        name=cfg.get("name") or "experiment", description=cfg.get("description") or "",
        labels=list(cfg.get("labels") or []), state=E.ACTIVE if activate else E.PAUSED,
        config=cfg, original_config=text, owner_id=user.id, searcher_type=cfg["searcher"]["name"],
        searcher_state=None, model_definition=archive, context_hash=digest,
        resource_pool=cfg["resources"]["resource_pool"], job_id=str(uuid.uuid4()), progress=0.0,
        priority=cfg["resources"].get("priority"), weight=float(cfg["resources"].get("weight") or 1.0),
        max_slots=cfg["resources"].get("max_slots"), queue_position=time.time(),
        archived=False, notes="", start_time=utcnow(),
    )
    if field(body, "validateOnly", False):
        exp.id = 0
        return exp, False
    async with rt.orchestrator.transaction() as session:
        session.add(exp)
        await session.flush()
        record_initial(session, exp, "created" if activate else "created paused")
        if activate:
            await rt.orchestrator.begin_experiment(session, exp)
    rt.orchestrator.wake()
    return exp, True
