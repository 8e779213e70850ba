"""Checkpoint reports: the training code writes the files, then tells the master they exist.

A report is stored once (a repeat with the same uuid is a no-op, so a client may retry), and
the trial's latest checkpoint moves forward only: an older report arriving late does not
roll a resume point back. Reads: one checkpoint, an experiment's or a trial's checkpoints (the
API), and a trial's newest ones with their validation metrics (the trial page).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import utcnow
from controlplane.config.stored import searcher_of
from controlplane.master import checkpoint_files
from controlplane.master.db.models import Allocation, Checkpoint, Experiment, Metric, Trial
from controlplane.master.errors import BadRequest, Forbidden, NotFound
from controlplane.master.principals import Principal, TaskPrincipal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import fencing
from controlplane.master.services.fields import MAX_INT64, NO_NUL, CheckpointUuid, Id, NewCheckpointUuid, plain_json
from controlplane.state import checkpoint as CK

STATES = CK.ALL
RelPath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=NO_NUL)]
Size = (Annotated[str, msgspec.Meta(max_length=20, pattern=r"^[0-9]+$")]
        | Annotated[int, msgspec.Meta(ge=0, le=MAX_INT64)])
Ref = Annotated[str, msgspec.Meta(max_length=160, pattern=NO_NUL)]
Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


class CheckpointTraining(msgspec.Struct, rename="camel", kw_only=True):
    """What the client may say about the checkpoint's trial (the harness sends ``{}``)."""

    trial_id: Id | None = None
    experiment_id: Id | None = None


class ReportCheckpointRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1Checkpoint`` as the harness reports it (reference §4.4 row 9)."""

    uuid: NewCheckpointUuid
    state: Annotated[str, msgspec.Meta(max_length=64)] = CK.COMPLETED
    metadata: dict[str, Any] = {}
    resources: Annotated[dict[RelPath, Size], msgspec.Meta(max_length=1_000_000)] = {}
    task_id: Ref | None = None
    allocation_id: Ref | None = None
    report_time: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    training: CheckpointTraining | None = None
    storage_id: Id | None = None
    # Ours, not Determined's: {relpath: sha256 hex} of each file, as the core API stored it (cloud
    # storage); a shared_fs checkpoint's are computed by the master when it publishes the files.
    digests: Annotated[dict[RelPath, Sha256], msgspec.Meta(max_length=1_000_000)] | None = None


class CheckpointMetadataPatch(msgspec.Struct, rename="camel", kw_only=True):
    """The part of Determined's ``v1Checkpoint`` that ``checkpoint.add_metadata`` changes (the SDK
    sends the whole message with empty other fields; they are ignored)."""

    uuid: CheckpointUuid | None = None
    metadata: dict[str, Any] = {}


class PostCheckpointMetadataRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PostCheckpointMetadataRequest``: the checkpoint's new metadata, whole."""

    checkpoint: CheckpointMetadataPatch


class DeleteCheckpointsRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``det checkpoint rm``: Determined's ``v1DeleteCheckpointsRequest``."""

    checkpoint_uuids: Annotated[list[CheckpointUuid], msgspec.Meta(min_length=1, max_length=1000)]


def _resources(raw: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for path, size in raw.items():
        if path.startswith("/") or ".." in path.split("/"):
            raise BadRequest(f"resources: path {path!r} escapes the checkpoint directory")
        out[path] = int(size)
        if out[path] > MAX_INT64:
            raise BadRequest(f"resources[{path!r}]: integer out of range (must fit in 64 bits)")
    return out


def _steps(metadata: dict[str, Any]) -> int:
    steps = metadata.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise BadRequest(f"metadata.steps_completed: must be an integer, got {steps!r}")
    if not 0 <= steps <= MAX_INT64:
        raise BadRequest(f"metadata.steps_completed: must be from 0 to {MAX_INT64}, got {steps}")
    return steps


def _report_time(value: str | None) -> datetime:
    if not value:
        return utcnow()
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise BadRequest(f"reportTime: must be an RFC3339 timestamp, got {value!r}") from e
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _check_names(principal: Principal, data: ReportCheckpointRequest) -> None:
    """A task names only its own allocation, task and trial."""
    if not isinstance(principal, TaskPrincipal):
        return
    if data.allocation_id and data.allocation_id != principal.allocation_id:
        raise Forbidden(f"allocationId: this allocation token is not valid for allocation {data.allocation_id}")
    if data.task_id and data.task_id != principal.task_id:
        raise Forbidden(f"taskId: this allocation token is not valid for task {data.task_id}")
    trial_id = data.training.trial_id if data.training else None
    if trial_id is not None and trial_id != principal.trial_id:
        raise Forbidden(f"training.trialId: this allocation token is not valid for trial {trial_id}")


async def report_checkpoint(rt: MasterRuntime, principal: Principal, data: ReportCheckpointRequest) -> None:
    if data.state not in STATES:
        raise BadRequest(f"state: must be one of {', '.join(sorted(STATES))}, got {data.state!r}")
    metadata = plain_json(data.metadata, "metadata")
    steps = _steps(metadata)
    resources = _resources(data.resources)
    _check_names(principal, data)
    allocation_id, task_id = data.allocation_id or "", data.task_id or ""
    if isinstance(principal, TaskPrincipal):
        allocation_id, task_id = principal.allocation_id, principal.task_id
    report_time = _report_time(data.report_time)
    digests = dict(data.digests) if data.digests is not None and data.state == CK.COMPLETED else None
    published = None
    if data.state == CK.COMPLETED:
        # The files first, outside the write transaction (hashing takes a while): a shared_fs
        # checkpoint leaves the task's staging directory and becomes read-only (checkpoint_files.py).
        async with rt.sessions() as session:
            found = await _reported_into(session, principal, data, allocation_id)
        if found is not None:
            places = checkpoint_files.shared_fs_places(_storage_of(rt, found[1]), allocation_id, data.uuid)
            if places is not None:
                published = await asyncio.to_thread(checkpoint_files.publish, places)
                digests = published.digests
    try:
        async with rt.sessions.begin() as session:
            await _store_report(session, principal, data, allocation_id, task_id, steps, metadata, resources,
                                report_time, digests, published)
    except BaseException:
        if published is not None:  # back where it was staged, so a retry of the report finds it
            await asyncio.to_thread(published.undo)
        raise
    if published is not None:
        published.close()


def _storage_of(rt: MasterRuntime, exp: Experiment) -> dict[str, Any]:
    return dict(exp.config.get("checkpoint_storage") or rt.settings.default_checkpoint_storage())


async def _store_report(session: AsyncSession, principal: Principal, data: ReportCheckpointRequest,
                        allocation_id: str, task_id: str, steps: int, metadata: dict[str, Any],
                        resources: dict[str, int], report_time: datetime, digests: dict[str, str] | None,
                        published: checkpoint_files.Published | None) -> None:
    found = await _reported_into(session, principal, data, allocation_id)
    if found is None:
        return  # a retry of a report that already landed
    trial, exp, existing = found
    storage = dict(exp.config.get("checkpoint_storage") or {})
    fields = dict(trial_id=trial.id, experiment_id=trial.experiment_id, task_id=task_id,
                  allocation_id=allocation_id, state=data.state, steps_completed=steps, metadata_=metadata,
                  resources=resources, size=sum(resources.values()), storage=storage, report_time=report_time,
                  digests=digests, owns_files=_owns_files(storage, data.state, published))
    if existing is None:
        session.add(Checkpoint(uuid=data.uuid, **fields))
    else:  # the upload it announced (STATE_ACTIVE) has finished
        for name, value in fields.items():
            setattr(existing, name, value)
    if data.state == CK.COMPLETED:
        current = await session.get(Checkpoint, trial.latest_checkpoint) if trial.latest_checkpoint else None
        if current is None or steps >= current.steps_completed:
            trial.latest_checkpoint = data.uuid
        trial.total_batches = max(trial.total_batches, steps)


def _owns_files(storage: dict[str, Any], state: str, published: checkpoint_files.Published | None) -> bool:
    """Whether the files at the checkpoint's place are its own (``Checkpoint.owns_files``): a shared_fs
    checkpoint's only once the master moved them there from the allocation's staging directory; a
    cloud one's always, since its uuid is new (``_reported_into``: no row had it) and its trial wrote them."""
    if storage.get("type") in ("shared_fs", "directory"):
        return published is not None and published.moved and state == CK.COMPLETED
    return True


async def _reported_into(session: AsyncSession, principal: Principal, data: ReportCheckpointRequest,
                         allocation_id: str) -> tuple[Trial, Experiment, Checkpoint | None] | None:
    """(trial, experiment, existing row) the report goes into, if the caller may report there; None
    for a retry of a report that already landed."""
    existing = await session.get(Checkpoint, data.uuid)
    alloc = await session.get(Allocation, allocation_id) if allocation_id else None
    trial_id = alloc.trial_id if alloc is not None else None
    if trial_id is None and data.training is not None:
        trial_id = data.training.trial_id
    if trial_id is None:
        raise BadRequest("allocationId: unknown allocation and no training.trialId to attach the checkpoint to")
    trial = await session.get(Trial, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    # The caller's own trial (a task: its current run; a user: an experiment they own), checked
    # in this transaction so a superseded run cannot report.
    await fencing.hold_trial(session, principal, trial.id)
    if existing is not None and existing.trial_id != trial.id:
        raise Forbidden(f"uuid: checkpoint {data.uuid} belongs to another trial")
    if existing is not None and not (existing.state == CK.ACTIVE and data.state != CK.ACTIVE):
        return None
    exp = await session.get(Experiment, trial.experiment_id)
    assert exp is not None  # a trial's experiment row exists (foreign key)
    return trial, exp, existing


async def set_metadata(rt: MasterRuntime, principal: Principal, ckpt_uuid: str,
                       data: PostCheckpointMetadataRequest
                       ) -> tuple[Checkpoint, dict[str, Any] | None, dict[str, Any] | None]:
    """``checkpoint.add_metadata`` / ``remove_metadata``: the metadata becomes the one sent (as in
    Determined), by the owner of the checkpoint's experiment or an admin; what the answer needs."""
    from controlplane.master.authz import Action, require_owner

    if data.checkpoint.uuid and data.checkpoint.uuid != ckpt_uuid:
        raise BadRequest(f"checkpoint.uuid: {data.checkpoint.uuid!r} is not the checkpoint of the path ({ckpt_uuid})")
    metadata = plain_json(data.checkpoint.metadata, "checkpoint.metadata")
    async with rt.sessions.begin() as session:
        ckpt = await session.get(Checkpoint, ckpt_uuid, with_for_update=True)
        if ckpt is None:
            raise NotFound(f"checkpoint {ckpt_uuid} not found")
        exp = await session.get(Experiment, ckpt.experiment_id) if ckpt.experiment_id is not None else None
        # A checkpoint whose experiment is gone has no owner left: only an admin may change it.
        require_owner(principal, Action.EDIT, exp.owner_id if exp is not None else -1, f"checkpoint {ckpt_uuid}")
        ckpt.metadata_ = metadata
        validation = await _validation_at(session, ckpt.trial_id, ckpt.steps_completed)
        return ckpt, (exp.config if exp is not None else None), validation


async def readable_by(session: AsyncSession, principal: Principal, ckpt: Checkpoint) -> None:
    """A task reads only its own experiment's checkpoints (and the one it warm-starts from);
    users read any (VIEW)."""
    if not isinstance(principal, TaskPrincipal):
        return
    trial = await session.get(Trial, principal.trial_id) if principal.trial_id is not None else None
    if trial is not None:
        if ckpt.experiment_id == trial.experiment_id or ckpt.uuid == trial.warm_start_checkpoint:
            return
        exp = await session.get(Experiment, trial.experiment_id)
        searcher = exp.searcher if exp is not None else searcher_of(None)
        if ckpt.uuid == searcher.source_checkpoint_uuid or (
                ckpt.trial_id is not None and ckpt.trial_id == searcher.source_trial_id):
            return
    raise Forbidden(f"this allocation token is not valid for checkpoint {ckpt.uuid} (another experiment's)")


async def get_checkpoint(rt: MasterRuntime, principal: Principal,
                         ckpt_uuid: str) -> tuple[Checkpoint, dict[str, Any] | None, dict[str, Any] | None]:
    """(checkpoint, its experiment's config, the validation metrics at its step), if the caller may read it."""
    async with rt.sessions() as session:
        ckpt = await session.get(Checkpoint, ckpt_uuid)
        if ckpt is None:
            raise NotFound(f"checkpoint {ckpt_uuid} not found")
        await readable_by(session, principal, ckpt)
        config = validation = None
        if ckpt.experiment_id is not None:
            exp = await session.get(Experiment, ckpt.experiment_id)
            config = exp.config if exp is not None else None
            validation = await _validation_at(session, ckpt.trial_id, ckpt.steps_completed)
        return ckpt, config, validation


async def _validation_at(session: AsyncSession, trial_id: int | None, steps: int) -> dict[str, Any] | None:
    if trial_id is None:
        return None
    return await session.scalar(select(Metric.metrics).where(
        Metric.trial_id == trial_id, Metric.group == "validation", Metric.steps_completed == steps)
        .order_by(Metric.id.desc()).limit(1))


async def list_checkpoints(rt: MasterRuntime, *, experiment_id: int | None = None,
                           trial_id: int | None = None) -> tuple[list[tuple[Checkpoint, dict[str, Any] | None]],
                           dict[str, Any]]:
    """Checkpoints of an experiment or a trial, each with its validation metrics, and the config."""
    async with rt.sessions() as session:
        if experiment_id is not None:
            exp = await session.get(Experiment, experiment_id)
            if exp is None:
                raise NotFound(f"experiment {experiment_id} not found")
            q = select(Checkpoint).where(Checkpoint.experiment_id == experiment_id)
        else:
            trial = await session.get(Trial, trial_id)
            if trial is None:
                raise NotFound(f"trial {trial_id} not found")
            exp = await session.get(Experiment, trial.experiment_id)
            q = select(Checkpoint).where(Checkpoint.trial_id == trial_id)
        ckpts = list((await session.scalars(q.order_by(Checkpoint.report_time, Checkpoint.uuid))).all())
        out = [(c, await _validation_at(session, c.trial_id, c.steps_completed)) for c in ckpts]
        return out, exp.config


async def newest_of_trial(session: AsyncSession, trial_id: int,
                          limit: int) -> list[tuple[Checkpoint, dict[str, Any]]]:
    """The trial's newest ``limit`` checkpoints, newest first, each with the validation metrics
    reported at its batches ({} for none): one read of the checkpoints, one of their metrics."""
    ckpts = list((await session.scalars(select(Checkpoint).where(Checkpoint.trial_id == trial_id)
                                        .order_by(Checkpoint.report_time.desc()).limit(limit))).all())
    steps = {c.steps_completed for c in ckpts}
    found: dict[int, dict[str, Any]] = {}
    if steps:
        rows = (await session.execute(select(Metric.steps_completed, Metric.metrics).where(
            Metric.trial_id == trial_id, Metric.group == "validation", Metric.steps_completed.in_(steps)))).tuples()
        for s, m in rows:
            found.setdefault(s, m)
    return [(c, found.get(c.steps_completed, {})) for c in ckpts]


async def hparams_of(rt: MasterRuntime, trial_ids: set[int | None]) -> dict[int, dict[str, Any]]:
    """Each trial's hyperparameters (a checkpoint's ``training.hparams``): one read for a page."""
    ids = {i for i in trial_ids if i is not None}
    if not ids:
        return {}
    async with rt.sessions() as session:
        return {tid: hp for tid, hp in (await session.execute(
            select(Trial.id, Trial.hparams).where(Trial.id.in_(ids)))).all()}
