"""Changes to an experiment after it was created (Determined's archive, labels, continue, delete).

Archiving and labels change no state: they are plain row updates, by the owner or an admin.
Continue and delete change states, so their state moves go through the orchestrator
(``orchestration/user_requests.py``); what is here is what surrounds them: the new config of a
continue, parsed and validated off the event loop as a create's is, and the deletion of a deleted
experiment's checkpoint files between its two state moves.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import anyio.to_thread
import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.config.errors import ConfigError
from controlplane.config.merge import merge_template
from controlplane.config.stored import searcher_of
from controlplane.config.yaml_io import load_yaml
from controlplane.master.authz import Action, check_role, require_owner
from controlplane.master.checkpoint_gc import collect as gc
from controlplane.master.db.models import Experiment, Project, Workspace
from controlplane.master.errors import BadRequest, Conflict, NotFound
from controlplane.master.orchestration import user_requests
from controlplane.master.principals import AuthedUser, Principal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import experiment_reads, jobs
from controlplane.master.services.experiment_requests import PatchExperimentRequest
from controlplane.master.services.experiments import prepare
from controlplane.master.services.fields import Id
from controlplane.state import experiment as E

log = logging.getLogger(__name__)

MAX_LABELS = 1000
MAX_OVERRIDE_BYTES = 1024 * 1024


class ContinueExperimentRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1ContinueExperimentRequest``: ``overrideConfig`` is YAML merged over the
    experiment's active config (only a ``single`` experiment may change it)."""

    id: Id
    override_config: Annotated[str, msgspec.Meta(max_length=MAX_OVERRIDE_BYTES)] | None = None


def active_config(exp: Experiment) -> dict[str, Any]:
    """The experiment's config as it runs now: ``det e set priority|weight|max-slots`` (and
    ``det job update``) change the experiment's columns, which Determined shows in its config."""
    resources = dict(exp.config.get("resources") or {})
    resources["priority"] = exp.priority
    resources["weight"] = exp.weight
    resources["max_slots"] = exp.max_slots
    return {**exp.config, "resources": resources}


async def owned_in(session: AsyncSession, principal: Principal, exp_id: int,
                   action: Action = Action.EDIT) -> Experiment:
    """The experiment, if ``principal`` may ``action`` it (its owner or an admin); else NotFound or Forbidden."""
    exp = await experiment_reads.experiment_row(session, exp_id)
    require_owner(principal, action, exp.owner_id, f"experiment {exp_id}")
    return exp


async def owned(rt: MasterRuntime, principal: Principal, exp_id: int, action: Action = Action.EDIT) -> Experiment:
    """``owned_in`` in a session of its own."""
    async with rt.sessions() as session:
        return await owned_in(session, principal, exp_id, action)


async def patch(rt: MasterRuntime, principal: Principal, exp_id: int,
                body: PatchExperimentRequest) -> experiment_reads.ExperimentRead:
    """Determined's PatchExperiment: name, description, notes, labels, the job's priority, weight
    and max slots, the checkpoint GC policy; by the owner or an admin. Returns it as changed."""
    patch = body.patch()
    async with rt.orchestrator.transaction() as session:
        exp = await owned_in(session, principal, exp_id)
        for key in ("name", "description", "notes"):
            if getattr(patch, key) is not None:
                setattr(exp, key, getattr(patch, key))
        if patch.labels is not None:
            exp.labels = list(dict.fromkeys(patch.labels))
        resources = patch.resources
        if resources is not None:
            if resources.priority is not None:
                exp.priority = jobs.check_priority(rt, exp.resource_pool, resources.priority, "resources.priority")
            if resources.weight is not None:  # stored whatever the pool's scheduler, as Determined does
                exp.weight = float(resources.weight)  # (fair share reads it; priority does not)
            if resources.max_slots is not msgspec.UNSET:
                exp.max_slots = jobs.check_max_slots(resources.max_slots, "resources.maxSlots")
        if patch.checkpoint_storage is not None:
            exp.config = jobs.with_gc_policy(exp.config, patch.checkpoint_storage)
        await session.flush()
        read = await experiment_reads.experiment(session, exp_id)
    rt.orchestrator.wake()
    return read


async def set_archived(rt: MasterRuntime, principal: Principal, exp_id: int, archived: bool) -> None:
    """Determined's rules: only an ended experiment is archived; archiving twice (or unarchiving
    what is not archived) is a 409 saying so."""
    async with rt.sessions.begin() as session:
        exp = await owned_in(session, principal, exp_id)
        if exp.archived == archived:
            raise Conflict(f"archived: experiment {exp_id} is {'already' if archived else 'not'} archived")
        if archived and exp.state not in user_requests.ENDED:
            raise Conflict(f"state: experiment {exp_id} is {exp.state}; only an ended experiment can be archived")
        exp.archived = archived


class MoveExperimentRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1MoveExperimentRequest`` (``det e move``): ``experimentId`` repeats the path's."""

    destination_project_id: Id
    experiment_id: Id | None = None


async def _project_open(session: AsyncSession, project_id: int, what: str) -> Project:
    """The project, which with its workspace must not be archived (Determined's rule for both ends)."""
    project = await session.get(Project, project_id)
    if project is None:
        raise NotFound(f"project {project_id} not found")
    ws = await session.get(Workspace, project.workspace_id)
    if project.archived or (ws is not None and ws.archived):
        raise Conflict(f"project {project.name!r} ({project_id}) is archived and cannot {what}")
    return project


async def move(rt: MasterRuntime, principal: Principal, exp_id: int, data: MoveExperimentRequest) -> None:
    """MoveExperiment: by the experiment's owner or an admin, who must be able to create work (a
    project takes anyone's experiments, as at create); neither the experiment nor either project
    (or its workspace) archived; the destination must exist (404)."""
    if data.experiment_id and data.experiment_id != exp_id:
        raise BadRequest(f"experimentId: {data.experiment_id} is not the experiment of the path ({exp_id})")
    check_role(principal, Action.CREATE)
    async with rt.sessions.begin() as session:
        exp = await owned_in(session, principal, exp_id)
        if exp.archived:
            raise Conflict(f"experiment {exp_id} is archived and cannot be moved")
        await _project_open(session, exp.project_id, "have experiments moved from it")
        dest = await _project_open(session, data.destination_project_id, "add new experiments")
        exp.project_id = dest.id
    log.info("experiment %d moved to project %d", exp_id, dest.id)


async def change_label(rt: MasterRuntime, principal: Principal, exp_id: int, label: str, add: bool) -> list[str]:
    """PUT / DELETE of one label; the labels after the change (adding one it has, or removing one it
    has not, changes nothing)."""
    if not label or "\x00" in label or len(label) > 255:
        raise BadRequest("label: must be 1 to 255 characters, without NUL")
    async with rt.sessions.begin() as session:
        exp = await owned_in(session, principal, exp_id)
        labels = list(exp.labels or [])
        if add and label not in labels:
            if len(labels) >= MAX_LABELS:
                raise BadRequest(f"label: experiment {exp_id} already has {MAX_LABELS} labels")
            labels.append(label)
        elif not add and label in labels:
            labels.remove(label)
        exp.labels = labels  # a new list: JSON columns see only whole-value assignments
        return labels


def _continued_config(rt: MasterRuntime, exp: Experiment, override_text: str | None) -> dict[str, Any]:
    """The override (YAML) merged over the active config, validated as a create's config is."""
    searcher = exp.searcher.name
    text = (override_text or "").strip()
    if searcher != "single" and text not in ("", "{}"):
        raise BadRequest(f"overrideConfig: experiment {exp.id} uses the {searcher} searcher; only a "
                         "single-searcher experiment takes an override config")
    try:
        override = load_yaml(text or "{}", source="overrideConfig",
                             limits=rt.settings.config_limits())
    except ConfigError as e:
        raise BadRequest(f"overrideConfig: {e}") from e
    if not isinstance(override, dict):
        raise BadRequest("overrideConfig: must be a YAML mapping")
    for key in ("workspace", "project"):
        if key in override:
            raise BadRequest(f"overrideConfig.{key}: cannot be changed by continuing an experiment")
    merged = merge_template(override, active_config(exp))
    if searcher == "single" and searcher_of(merged).name != "single":
        raise BadRequest("overrideConfig.searcher.name: a continued single-searcher experiment stays single")
    return prepare(rt.settings, merged, []).cfg


async def continue_experiment(rt: MasterRuntime, user: AuthedUser, data: ContinueExperimentRequest) -> None:
    exp = await owned(rt, user, data.id)
    user_requests.check_continuable(exp)
    config = await anyio.to_thread.run_sync(_continued_config, rt, exp, data.override_config)
    await user_requests.continue_experiment(rt.orchestrator, user, data.id, config, user.username)
    rt.checkpoint_gc.reopened(data.id)  # collect it again when it ends again


async def delete_experiment(rt: MasterRuntime, user: AuthedUser, exp_id: int) -> str:
    """DeleteExperiment: DELETING, then its checkpoints' files, then its rows; the final state
    (``STATE_DELETED`` once gone, else ``STATE_DELETE_FAILED``, which a second delete retries)."""
    doomed = await user_requests.begin_delete(rt.orchestrator, user, exp_id, user.username)
    report = await gc.drain(rt, only=set(doomed)) if doomed else gc.DrainReport()
    why = await user_requests.finish_delete(rt.orchestrator, exp_id, report.failed)
    if why is None:
        log.info("experiment %d deleted by %s", exp_id, user.username)
        return "STATE_DELETED"
    rt.checkpoint_gc.deletions_pending()  # what failed stays marked: the GC loop retries it
    log.warning("experiment %d could not be deleted: %s", exp_id, why)
    return f"STATE_{E.DELETE_FAILED}"
