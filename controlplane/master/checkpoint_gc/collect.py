"""Checkpoint garbage collection: decide (the pure `save_*` policy), mark, delete, record.

Deleting is two-phase so that no failure leaves a usable-looking row over missing files, nor files
that no row knows about:
1. mark: in one transaction the checkpoint becomes STATE_PARTIALLY_DELETED ("its files are being
   deleted", never restored from again) with the reason;
2. delete its files from the storage it was written to (idempotent; every store raises unless
   all of them are gone), and only then make the row STATE_DELETED with no resources. A row whose
   files are not its own (``Checkpoint.owns_files``: a shared_fs checkpoint the master never
   published, whose files, if any, are still staged) touches no storage: what sits at its place
   is someone else's.
A failure in 2 leaves the row marked with the error and the attempt count; `drain()` retries
every marked row, so a GC that failed half-way converges when it runs again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.checkpoint_gc import CheckpointView, SavePolicy, doomed
from controlplane.common.floats import decode_nonfinite
from controlplane.common.timeutil import utcnow
from controlplane.master import checkpoint_files
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import (
    Allocation,
    Checkpoint,
    Experiment,
    Metric,
    ModelVersion,
    StateTransition,
    Trial,
)
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.principals import AuthedUser
from controlplane.master.runtime_core import RuntimeCore
from controlplane.state import checkpoint as CK
from controlplane.state import experiment as E
from controlplane.state import trial as T
from controlplane.storage.base import StorageManager

log = logging.getLogger("controlplane.checkpoint_gc")
COMPLETED, DELETING, DELETED, ACTIVE = CK.COMPLETED, CK.PARTIALLY_DELETED, CK.DELETED, CK.ACTIVE
TERMINAL_EXPERIMENT = (E.COMPLETED, E.CANCELED, E.ERROR)


@dataclass
class DrainReport:
    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # uuid -> error


def storage_of(rt: RuntimeCore, config: dict[str, Any]) -> StorageManager:
    from controlplane.storage import from_config

    return from_config(config or rt.settings.default_checkpoint_storage(), rt.settings.data_dir / "checkpoints")


def _mark(session: AsyncSession, ckpt: Checkpoint, reason: str) -> None:
    session.add(StateTransition(entity="checkpoint", entity_id=ckpt.uuid, from_state=ckpt.state,
                                to_state=DELETING, reason=reason, at=utcnow()))
    ckpt.state, ckpt.delete_reason, ckpt.delete_error = DELETING, reason, ""


async def collect_experiment(rt: RuntimeCore, exp_id: int) -> list[str]:
    """Mark the checkpoints of a finished experiment that its `save_*` policy does not keep, and
    remove what its tasks left in their shared_fs staging directories."""
    marked = await _mark_experiment(rt, exp_id)
    async with rt.sessions() as session:
        exp = await session.get(Experiment, exp_id)
        if exp is None or exp.state not in TERMINAL_EXPERIMENT:
            return marked
        storage = dict(exp.config.get("checkpoint_storage") or rt.settings.default_checkpoint_storage())
        allocations = list((await session.scalars(select(Allocation.id).join(Trial, Trial.id == Allocation.trial_id)
                                                  .where(Trial.experiment_id == exp_id))).all())
    try:
        await asyncio.to_thread(checkpoint_files.remove_staging, storage, allocations)
    except OSError as e:  # the next collection of this experiment tries again
        log.warning("experiment %d: removing its tasks' staging directories failed: %s", exp_id, e)
    return marked


async def _mark_experiment(rt: RuntimeCore, exp_id: int) -> list[str]:
    async with rt.sessions.begin() as session:
        exp = await session.get(Experiment, exp_id)
        if exp is None or exp.state not in TERMINAL_EXPERIMENT:
            return []
        # FOR UPDATE: a model registration of one of these (which locks its checkpoint row) either
        # lands before the registry is read below or waits until these are marked.
        ckpts = list((await session.scalars(select(Checkpoint).where(
            Checkpoint.experiment_id == exp_id, Checkpoint.state.in_((COMPLETED, ACTIVE))).with_for_update())).all())
        marked = []
        for c in [c for c in ckpts if c.state == ACTIVE]:  # the trial stopped between upload and report
            _mark(session, c, f"its upload never completed (experiment {exp_id} ended first); removing what "
                              "it left in storage")
            marked.append(c.uuid)
        ckpts = [c for c in ckpts if c.state == COMPLETED]
        if not ckpts:
            return marked
        metric = exp.searcher.metric
        values = {}
        for trial_id, steps, metrics in (await session.execute(select(
                Metric.trial_id, Metric.steps_completed, Metric.metrics).where(
                Metric.trial_id.in_({c.trial_id for c in ckpts}), Metric.group == "validation")
                .order_by(Metric.id))).all():  # a step validated again after a restart: the last report wins
            value = decode_nonfinite((metrics or {}).get(metric))
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values[(trial_id, steps)] = float(value)
        views = [CheckpointView(c.uuid, c.trial_id or 0, c.steps_completed, values.get((c.trial_id, c.steps_completed)))
                 for c in ckpts]
        protected = await registered_checkpoint_uuids(session)
        by_uuid = {c.uuid: c for c in ckpts}
        for d in doomed(views, SavePolicy.of(exp.config), protected):
            _mark(session, by_uuid[d.uuid], f"garbage collection when experiment {exp_id} ended: {d.reason}")
            marked.append(d.uuid)
    if marked:
        log.info("experiment %d: %d checkpoint(s) to delete by its save_* policy", exp_id, len(marked))
    return marked


async def request_deletion(rt: RuntimeCore, uuids: list[str], user: AuthedUser) -> list[str]:
    """`det checkpoint rm`: mark the named checkpoints, or refuse them all with the reason.

    Refused: unknown uuids, checkpoints of experiments the user does not own (unless an admin),
    checkpoints in the model registry, and the latest checkpoint of a trial that may still resume
    from it. Every check passes before anything is marked. Already deleted ones are left as they are."""
    async with rt.sessions.begin() as session:
        rows = {c.uuid: c for c in (await session.scalars(
            select(Checkpoint).where(Checkpoint.uuid.in_(uuids)).with_for_update())).all()}
        missing = [u for u in uuids if u not in rows]
        if missing:
            raise NotFound(f"checkpointUuids: no checkpoint {', '.join(missing)}")
        exp_ids = {c.experiment_id for c in rows.values() if c.experiment_id is not None}
        owners = dict((await session.execute(select(Experiment.id, Experiment.owner_id)
                                             .where(Experiment.id.in_(exp_ids)))).all()) if exp_ids else {}
        for uuid in uuids:
            exp_id = rows[uuid].experiment_id
            # A checkpoint whose experiment is gone has no owner left: only an admin may delete it.
            require_owner(user, Action.EDIT, owners.get(exp_id, -1),
                          f"checkpoint {uuid} (experiment {exp_id})")
        registered = sorted(set(uuids) & await registered_checkpoint_uuids(session))
        if registered:
            raise BadRequest(f"checkpointUuids: {', '.join(registered)} "
                             f"{'is' if len(registered) == 1 else 'are'} in the model registry; "
                             "delete the model version first")
        for c in rows.values():
            trial = await session.get(Trial, c.trial_id) if c.trial_id is not None else None
            if trial is not None and trial.latest_checkpoint == c.uuid and not T.TRIAL.is_terminal(trial.state):
                raise BadRequest(f"checkpointUuids: {c.uuid} is the latest checkpoint of trial {trial.id}, which "
                                 f"is {trial.state.lower()} and would resume from it")
        marked = []
        for uuid in uuids:
            c = rows[uuid]
            if c.state not in (DELETED, DELETING):
                _mark(session, c, f"deleted by {user.username} (det checkpoint rm)")
                marked.append(uuid)
    return marked


async def mark_experiment(session: AsyncSession, exp_id: int, reason: str) -> list[str]:
    """Inside a caller's transaction (deleting the experiment): mark every checkpoint of it whose
    files may still exist and return all that are not deleted yet (marked now or before).
    Refused while any of them is in the model registry: a model version would lose its files."""
    from controlplane.master.errors import Conflict

    rows = list((await session.scalars(select(Checkpoint).where(
        Checkpoint.experiment_id == exp_id, Checkpoint.state != DELETED).with_for_update())).all())
    registered = sorted({c.uuid for c in rows} & await registered_checkpoint_uuids(session))
    if registered:
        raise Conflict(f"checkpoints: {', '.join(registered[:5])} of experiment {exp_id} "
                       f"{'is' if len(registered) == 1 else 'are'} in the model registry; delete the model "
                       "version first")
    for c in rows:
        if c.state != DELETING:
            _mark(session, c, reason)
    return [c.uuid for c in rows]


async def drain(rt: RuntimeCore, only: set[str] | None = None) -> DrainReport:
    """Delete the files of every marked checkpoint (or of `only`), then record each as deleted."""
    report = DrainReport()
    async with rt.sessions() as session:
        q = select(Checkpoint.uuid, Checkpoint.storage, Checkpoint.owns_files).where(Checkpoint.state == DELETING)
        if only is not None:
            q = q.where(Checkpoint.uuid.in_(only))
        todo = (await session.execute(q.order_by(Checkpoint.uuid))).all()
    for uuid, storage_config, owns_files in todo:
        try:
            if owns_files:  # else the files at its place are not its own (never published): left alone
                await asyncio.to_thread(_delete_files, rt, storage_config, uuid)
        except Exception as e:  # noqa: BLE001 - any failure is kept on the row and retried
            error = f"{type(e).__name__}: {e}"
            report.failed[uuid] = error
            async with rt.sessions.begin() as session:
                row = await session.get(Checkpoint, uuid)
                if row is not None:
                    row.delete_attempts += 1
                    row.delete_error = error
            log.warning("deleting checkpoint %s failed (will retry): %s", uuid, error)
            continue
        async with rt.sessions.begin() as session:
            row = await session.get(Checkpoint, uuid)
            if row is not None and row.state == DELETING:
                session.add(StateTransition(entity="checkpoint", entity_id=uuid, from_state=DELETING, to_state=DELETED,
                                            reason=f"files deleted from storage ({row.delete_reason})", at=utcnow()))
                row.state, row.resources, row.delete_error = DELETED, {}, ""
                row.delete_attempts += 1
        report.deleted.append(uuid)
    return report


def _delete_files(rt: RuntimeCore, storage_config: dict[str, Any], uuid: str) -> None:
    storage_of(rt, storage_config).delete(uuid)  # every store raises unless all its files are gone


async def registered_checkpoint_uuids(session: AsyncSession) -> set[str]:
    """Every checkpoint uuid that some model version refers to: these are never collected.

    Call it inside the GC's own write transaction, after reading the candidate checkpoint rows
    ``FOR UPDATE`` (``register_version`` locks its checkpoint row the same way, so on PostgreSQL
    a registration racing the GC either lands first and is seen here, or waits and then finds
    the checkpoint no longer STATE_COMPLETED; on SQLite write transactions are serial anyway).
    The foreign key model_versions.checkpoint_uuid -> checkpoints.uuid (no ON DELETE) also
    refuses to delete such a checkpoint's row.
    """
    return set((await session.scalars(select(ModelVersion.checkpoint_uuid).distinct())).all())
