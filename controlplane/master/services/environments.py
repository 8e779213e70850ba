"""Which task environments an experiment may ask for: those the live agents of its pool offer.

``environment.image`` (absent: ``default``, which every agent offers) is judged at create time
against the agent connections: a name no live agent of the experiment's pool offers, for that
agent's slot type (CPU for a trial without slots), is refused with the names that exist, since
its trials could not run anywhere now. Determined's own image names (``determinedai/...``) are no
different: without a Docker engine no agent offers them. The same rule decides placement later
(``scheduler/capacity.py``); a trial whose environment goes away with its agents waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.master.agent_hub import AgentConnection
from controlplane.master.errors import BadRequest
from controlplane.master.runtime import MasterRuntime
from controlplane.scheduler.environment import DEFAULT, DEFAULT_IMAGE, FIELD, Image, image_of_config


def environment_problem(image: Image, pool: str, agents: Sequence[AgentConnection], slots_per_trial: int) -> str | None:
    """Why no live agent of ``pool`` (among ``agents``) can run ``image``, or None."""
    if image == DEFAULT_IMAGE:
        return None
    mine = [c for c in agents if c.pool == pool]
    if any(image.for_slot_type(c.slot_type if slots_per_trial > 0 else "cpu") in c.environments for c in mine):
        return None
    offered = sorted({e for c in mine for e in c.environments} | {DEFAULT})
    where = f"no live agent of resource pool {pool!r}" if mine else f"resource pool {pool!r} has no live agent; none"
    return f"{where} offers the environment {image.describe()} (environments offered: {', '.join(offered)})"


def check_environment(rt: MasterRuntime, cfg: dict[str, Any]) -> None:
    """Raises BadRequest naming ``environment.image`` when the experiment's trials have nowhere to run."""
    try:
        image = image_of_config(cfg)
    except ValueError as e:
        raise BadRequest(f"invalid experiment config: {FIELD}: {e}") from None
    resources = cfg.get("resources") or {}
    problem = environment_problem(image, str(resources.get("resource_pool") or "default"),
                                  list(rt.hub.connections.values()), int(resources.get("slots_per_trial", 1)))
    if problem:
        raise BadRequest(f"invalid experiment config: {FIELD}: {problem}")
