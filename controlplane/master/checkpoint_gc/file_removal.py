"""``POST /api/v1/checkpoints/rm`` (Determined's CheckpointsRemoveFiles, ``det checkpoint rm UUID
--glob PATTERN``): delete the files of checkpoints that match globs, keep the rest.

Globs mean what Determined's checkpoint GC makes of them (``glob.glob(f"{checkpoint}/{glob}",
recursive=True)`` over the checkpoint's files): ``*``, ``?`` and ``[...]`` within one path component,
``**`` any number of components, a name starting with ``.`` matched only by a pattern that does; a
matching directory takes what it holds. They are matched against the files the checkpoint row
lists (its ``resources``), so nothing is listed from storage: the store deletes exactly those keys.
No glob refreshes the row's files from what the store holds, as Determined's does. Every check
(owner or admin, not in the model registry, not the latest checkpoint of a trial that may resume
from it) passes for every named checkpoint before a file is touched. A checkpoint left with no
file becomes STATE_DELETED; one with files left stays usable with its ``resources``, ``digests``
and ``size`` cut to them (Determined marks it PARTIALLY_DELETED, which here means "being deleted
by the GC", so the state is left as it is).
"""

from __future__ import annotations

import asyncio
import logging
from fnmatch import fnmatchcase
from functools import cache
from typing import Annotated, Any

import msgspec
from sqlalchemy import select

from controlplane.common.timeutil import utcnow
from controlplane.master.authz import Action, require_owner
from controlplane.master.checkpoint_gc.collect import COMPLETED, DELETED, registered_checkpoint_uuids, storage_of
from controlplane.master.db.models import Checkpoint, Experiment, StateTransition, Trial
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.principals import AuthedUser
from controlplane.master.runtime_core import RuntimeCore
from controlplane.state import trial as T
from controlplane.storage.errors import CheckpointNotFound

log = logging.getLogger("controlplane.checkpoint_gc")

MAX_UUIDS = 1000
MAX_GLOBS = 100
MAX_GLOB_CHARS = 1024
MAX_GLOB_PARTS = 64

Uuid = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z._-]+$")]
Glob = Annotated[str, msgspec.Meta(max_length=MAX_GLOB_CHARS)]


class CheckpointsRemoveFilesRequest(msgspec.Struct, rename="camel", kw_only=True):
    checkpoint_uuids: Annotated[list[Uuid], msgspec.Meta(min_length=1, max_length=MAX_UUIDS)]
    checkpoint_globs: Annotated[list[Glob], msgspec.Meta(max_length=MAX_GLOBS)] = []


def check_globs(globs: list[str]) -> list[tuple[str, ...]]:
    """Each glob as its components; Determined's refusals (an empty glob would name the whole
    checkpoint, ``..`` could leave it) are 400s naming ``checkpointGlobs``."""
    out = []
    for g in globs:
        if not g:
            raise BadRequest("checkpointGlobs: cannot have empty string glob")
        if ".." in g:
            raise BadRequest(f"checkpointGlobs: glob {g[:80]!r} cannot contain '..'")
        if "\x00" in g:
            raise BadRequest("checkpointGlobs: a glob has no NUL")
        parts = tuple(p for p in g.strip("/").split("/") if p not in ("", "."))
        if not parts:
            raise BadRequest(f"checkpointGlobs: glob {g[:80]!r} names the whole checkpoint (use det checkpoint "
                             "delete)")
        if len(parts) > MAX_GLOB_PARTS:
            raise BadRequest(f"checkpointGlobs: glob {g[:80]!r} has more than {MAX_GLOB_PARTS} components")
        out.append(parts)
    return out


def _component(name: str, pattern: str) -> bool:
    if name.startswith(".") and not pattern.startswith("."):
        return False  # glob's rule for hidden names
    return fnmatchcase(name, pattern)


def glob_matches(path: tuple[str, ...], glob: tuple[str, ...]) -> bool:
    """Whether ``glob`` (components) names ``path`` (components) as glob.glob(recursive=True) would."""

    @cache
    def match(i: int, j: int) -> bool:
        if j == len(glob):
            return i == len(path)
        if glob[j] == "**":
            # zero components, or one more (not hidden) and still in **
            return match(i, j + 1) or (i < len(path) and not path[i].startswith(".") and match(i + 1, j))
        return i < len(path) and _component(path[i], glob[j]) and match(i + 1, j + 1)

    return match(0, 0)


def matching(files: list[str], globs: list[tuple[str, ...]]) -> list[str]:
    """The files a glob names, itself or through one of its directories."""
    out = []
    for rel in files:
        parts = tuple(p for p in rel.split("/") if p)
        if any(glob_matches(parts[:n], g) for g in globs for n in range(1, len(parts) + 1)):
            out.append(rel)
    return out


async def remove_files(rt: RuntimeCore, user: AuthedUser, data: CheckpointsRemoveFilesRequest) -> None:
    globs = check_globs(data.checkpoint_globs)
    uuids = list(dict.fromkeys(data.checkpoint_uuids))
    plan: list[tuple[str, dict[str, Any], list[str] | None]] = []  # uuid, storage, files (None: refresh)
    async with rt.sessions() as session:
        rows = {c.uuid: c for c in (await session.scalars(select(Checkpoint).where(Checkpoint.uuid.in_(uuids)))).all()}
        missing = [u for u in uuids if u not in rows]
        if missing:
            raise NotFound(f"checkpointUuids: no checkpoint {', '.join(missing[:10])}")
        exp_ids = {c.experiment_id for c in rows.values() if c.experiment_id is not None}
        owners = dict((await session.execute(select(Experiment.id, Experiment.owner_id)
                                             .where(Experiment.id.in_(exp_ids)))).all()) if exp_ids else {}
        for uuid in uuids:
            exp_id = rows[uuid].experiment_id
            require_owner(user, Action.EDIT, owners.get(exp_id, -1), f"checkpoint {uuid} (experiment {exp_id})")
        registered = sorted(set(uuids) & await registered_checkpoint_uuids(session))
        if registered:
            raise BadRequest(f"checkpointUuids: {', '.join(registered[:10])} "
                             f"{'is' if len(registered) == 1 else 'are'} in the model registry and cannot be "
                             "changed")
        trial_ids = {c.trial_id for c in rows.values() if c.trial_id is not None}
        live = {tid: latest for tid, latest, state in (await session.execute(
            select(Trial.id, Trial.latest_checkpoint, Trial.state).where(Trial.id.in_(trial_ids)))).all()
            if not T.TRIAL.is_terminal(state)} if trial_ids else {}
        for c in rows.values():
            if c.trial_id in live and live[c.trial_id] == c.uuid:
                raise BadRequest(f"checkpointUuids: {c.uuid} is the latest checkpoint of trial {c.trial_id}, which "
                                 "is still running and may resume from it")
        for uuid in uuids:
            c = rows[uuid]
            if c.state != COMPLETED or not c.owns_files:
                continue  # deleted, being deleted, not uploaded yet, or no files of its own: nothing to take
            files = matching(sorted(c.resources or {}), globs) if globs else None
            if files != []:
                plan.append((uuid, dict(c.storage or {}), files))
    for uuid, storage_config, files in plan:
        storage = storage_of(rt, storage_config)
        if files is None:
            try:
                left: dict[str, int] | None = await asyncio.to_thread(storage.resources, uuid)
            except CheckpointNotFound:
                left = {}
            await _record(rt, uuid, user, kept=left)
        else:
            await asyncio.to_thread(storage.delete_files, uuid, files)
            await _record(rt, uuid, user, removed=set(files))


async def _record(rt: RuntimeCore, uuid: str, user: AuthedUser, *, removed: set[str] | None = None,
                  kept: dict[str, int] | None = None) -> None:
    """The row lists what is left: ``kept`` as the store has it, or its files less ``removed``."""
    async with rt.sessions.begin() as session:
        c = await session.get(Checkpoint, uuid, with_for_update=True)
        if c is None or c.state != COMPLETED:
            return
        if kept is None:
            kept = {k: v for k, v in (c.resources or {}).items() if k not in (removed or set())}
        c.resources = {k: int(v) for k, v in kept.items()}
        c.size = sum(c.resources.values())
        if c.digests is not None:
            c.digests = {k: v for k, v in c.digests.items() if k in kept}
        if not kept:
            session.add(StateTransition(entity="checkpoint", entity_id=uuid, from_state=c.state, to_state=DELETED,
                                        reason=f"every file removed by {user.username} (det checkpoint rm --glob)",
                                        at=utcnow()))
            c.state = DELETED
    log.info("checkpoint %s: %s by %s", uuid, "files refreshed" if removed is None else f"{len(removed)} file(s) "
             "removed", user.username)
