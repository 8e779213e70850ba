"""OpenPAI jobs' outputs: what each task left in ``$PAI_OUTPUT_DIR``, kept under the job in checkpoint storage.

- ``receive``: a task's agent sends the directory as a tar stream when the task ends (its allocation
  token, or the job's owner); it is checked (``controlplane/pai/outputs.read_tar``: regular files, safe
  names, bounded), stored at ``pai-outputs/<job>/<attempt>/<role>-<index>/`` of the cluster's
  ``checkpoint_storage``, and recorded (``pai_output_sets``, ``pai_output_files`` with each file's size
  and sha256) once per task and attempt.
- ``list_outputs``: a page of a job's kept files (attempt, task, path, size), one index range;
- ``fetch_file`` / ``fetch_archive``: one file, or a tar.gz of an attempt's outputs (one task's or all),
  read back from storage and checked against the recorded sha256 before a byte is sent.

Reading outputs is its owner's or an admin's (``Action.READ_OWN``, as a job's config): they are the
job's results, and another user gets a 403.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import utcnow
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import Allocation, PaiJob, PaiOutputFile, PaiOutputSet, User
from controlplane.master.errors import ApiError, BadRequest, Conflict, NotFound, PayloadTooLarge
from controlplane.master.orchestration.pai_jobs import attempt_of, parsed
from controlplane.master.principals import Principal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import allocations
from controlplane.pai import outputs as out
from controlplane.state import allocation as A

SPOOL_WRITE = 1 << 20  # bytes gathered before each write of the received stream


class StorageFailed(ApiError):
    status = 502


class OutputsKept(msgspec.Struct, rename="camel", kw_only=True):
    """What the master kept of one task's ``$PAI_OUTPUT_DIR``."""

    task: str  # <role>-<index>
    attempt: int
    files: int
    size: int
    location: str  # where in checkpoint storage: $PAI_DEFAULT_FS_URI/<attempt>/<role>-<index>


class OutputFile(msgspec.Struct, rename="camel", kw_only=True):
    task: str  # <role>-<index>, as `det pai ssh` names tasks
    task_role: str
    task_index: int
    attempt: int
    path: str  # under the task's $PAI_OUTPUT_DIR
    size: int


class JobOutputs(msgspec.Struct, rename="camel", kw_only=True):
    """A page of a job's kept files, by attempt, task and path."""

    outputs: list[OutputFile]
    total: int  # files matching the filters, over every page
    offset: int
    limit: int
    location: str  # the job's PAI_DEFAULT_FS_URI: where its outputs are kept


# ---- receiving -------------------------------------------------------------------------------
async def receive(rt: MasterRuntime, principal: Principal, alloc_id: str, body: AsyncIterator[bytes],
                  left_out: str = "") -> OutputsKept:
    """Keeps what one task sent: who may is checked before a byte of the body is read."""
    async with rt.sessions() as session:
        alloc = await session.get(Allocation, alloc_id)
        if alloc is None:
            raise NotFound(f"allocation {alloc_id} not found")
        job = await session.get(PaiJob, alloc.pai_job_id) if alloc.pai_job_id is not None else None
    owner = job.owner_id if job is not None else await allocations.owner_of(rt, alloc_id)
    require_owner(principal, Action.TASK_REPORT, owner, f"allocation {alloc_id}")
    if job is None or job.kind != "pai" or alloc.task_role is None or alloc.task_index is None:
        raise BadRequest(f"alloc_id: allocation {alloc_id} is not an OpenPAI job's task: only those keep outputs")
    if alloc.state == A.TERMINATED:
        raise Conflict(f"allocation {alloc_id} has ended: outputs are kept before its task is reported ended")
    attempt, role, index = attempt_of(alloc), alloc.task_role, alloc.task_index
    task = out.task_name(role, index)
    async with rt.sessions() as session:
        if await session.get(PaiOutputSet, (job.id, attempt, role, index)) is not None:
            raise Conflict(f"task {task} of job {job.name} (attempt {attempt}) has already kept its outputs")
    base = rt.settings.default_checkpoint_storage()
    try:
        storage_cfg = out.storage_config(base, job.job_id, attempt)
    except ValueError as e:
        raise StorageFailed(f"the cluster's checkpoint storage cannot keep task {task}'s outputs: {e}") from None
    work = Path(tempfile.mkdtemp(prefix="det-pai-outputs-"))
    try:
        spool = work / "outputs.tar"
        await _spool(body, spool)
        kept = await asyncio.to_thread(_store, rt, storage_cfg, task, spool, work / task)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    try:
        async with rt.sessions.begin() as session:
            session.add(PaiOutputSet(pai_job_id=job.id, attempt=attempt, task_role=role, task_index=index,
                                     storage=storage_cfg, files=len(kept), size=sum(f.size for f in kept),
                                     left_out=left_out[:1000], created_at=utcnow()))
            await session.flush()
            if kept:
                await session.execute(insert(PaiOutputFile), [
                    {"pai_job_id": job.id, "attempt": attempt, "task_role": role, "task_index": index,
                     "path": f.path, "size": f.size, "sha256": f.sha256} for f in kept])
    except IntegrityError:  # the same task twice at once
        raise Conflict(f"task {task} of job {job.name} (attempt {attempt}) has already kept its outputs") from None
    return OutputsKept(task=task, attempt=attempt, files=len(kept), size=sum(f.size for f in kept),
                       location=f"{out.location_uri(base, job.job_id)}/{attempt}/{task}")


async def _spool(body: AsyncIterator[bytes], path: Path) -> None:
    """The request body into ``path``, at most MAX_TAR_BYTES (413 beyond)."""
    seen = 0
    pending: list[bytes] = []
    held = 0
    with open(path, "wb") as f:
        async for chunk in body:
            seen += len(chunk)
            if seen > out.MAX_TAR_BYTES:
                raise PayloadTooLarge(f"request body: a task's outputs are at most {out.MAX_FILES} files and "
                                      f"{out.MAX_BYTES} bytes")
            pending.append(chunk)
            held += len(chunk)
            if held >= SPOOL_WRITE:
                await asyncio.to_thread(f.write, b"".join(pending))
                pending, held = [], 0
        if pending:
            await asyncio.to_thread(f.write, b"".join(pending))


def _store(rt: MasterRuntime, storage_cfg: dict[str, Any], task: str, spool: Path, files: Path) -> list[out.KeptFile]:
    """Blocking: the tar checked into ``files``, then stored as the "checkpoint" ``task`` of storage_cfg."""
    from controlplane.storage import StorageError

    files.mkdir()
    try:
        with open(spool, "rb") as f:
            kept = out.read_tar(f, files)
    except out.OutputsRefused as e:
        raise BadRequest(f"request body: {e}") from None
    spool.unlink()
    if not kept:
        return kept
    try:
        _storage(rt, storage_cfg).upload_dir(files, task)
    except StorageError as e:
        raise StorageFailed(f"keeping the outputs of task {task} in checkpoint storage failed: {e}") from e
    return kept


def _storage(rt: MasterRuntime, cfg: dict[str, Any]) -> Any:
    from controlplane.storage import from_config

    return from_config(cfg, rt.settings.data_dir / "checkpoints")


# ---- reading ---------------------------------------------------------------------------------
async def _job(session: AsyncSession, principal: Principal, username: str, name: str) -> PaiJob:
    row = (await session.execute(select(PaiJob).join(User, User.id == PaiJob.owner_id)
                                 .where(User.username == username, PaiJob.name == name))).first()
    if row is None:
        raise NotFound(f"job {name} of user {username} not found")
    job: PaiJob = row[0]
    require_owner(principal, Action.READ_OWN, job.owner_id, f"job {name}")
    return job


def _task(job: PaiJob, task: str | None) -> tuple[str, int] | None:
    if task is None:
        return None
    found = out.parse_task_name(task)
    roles = {r.name: r.task_number for r in parsed(job).task_roles}
    if found is None or found[0] not in roles or found[1] >= roles[found[0]]:
        known = ", ".join(out.task_name(r, i) for r, n in roles.items() for i in range(min(n, 3)))
        raise BadRequest(f"task: job {job.name} has no task {task!r} (its tasks are <role>-<index>: {known}...)")
    return found


async def list_outputs(rt: MasterRuntime, principal: Principal, username: str, name: str, *,
                       attempt: int | None = None, task: str | None = None, offset: int = 0,
                       limit: int = 1000) -> JobOutputs:
    """A page of the job's kept files (every attempt, or one; every task, or one), by attempt, task, path."""
    async with rt.sessions() as session:
        job = await _job(session, principal, username, name)
        which = _task(job, task)
        where = [PaiOutputFile.pai_job_id == job.id]
        if attempt is not None:
            where.append(PaiOutputFile.attempt == attempt)
        if which is not None:
            where += [PaiOutputFile.task_role == which[0], PaiOutputFile.task_index == which[1]]
        total = await session.scalar(select(func.count()).select_from(PaiOutputFile).where(*where)) or 0
        rows = (await session.execute(
            select(PaiOutputFile.attempt, PaiOutputFile.task_role, PaiOutputFile.task_index, PaiOutputFile.path,
                   PaiOutputFile.size).where(*where)
            .order_by(PaiOutputFile.attempt, PaiOutputFile.task_role, PaiOutputFile.task_index, PaiOutputFile.path)
            .offset(offset).limit(limit))).all()
    files = [OutputFile(task=out.task_name(role, index), task_role=role, task_index=index, attempt=att, path=path,
                        size=size) for att, role, index, path, size in rows]
    return JobOutputs(outputs=files, total=total, offset=offset, limit=limit,
                      location=out.location_uri(rt.settings.default_checkpoint_storage(), job.job_id))


async def _sets(session: AsyncSession, job: PaiJob, attempt: int | None,
                which: tuple[str, int] | None) -> list[PaiOutputSet]:
    """The kept sets of ``attempt`` (None: the newest attempt that kept any, of that task if named)."""
    where = [PaiOutputSet.pai_job_id == job.id]
    if which is not None:
        where += [PaiOutputSet.task_role == which[0], PaiOutputSet.task_index == which[1]]
    if attempt is None:
        attempt = await session.scalar(select(func.max(PaiOutputSet.attempt)).where(*where))
        if attempt is None:
            what = f"task {out.task_name(*which)} of job {job.name}" if which else f"job {job.name}"
            raise NotFound(f"{what} kept no outputs (yet: a task's are kept when it ends)")
    rows = list((await session.scalars(select(PaiOutputSet).where(*where, PaiOutputSet.attempt == attempt)
                                       .order_by(PaiOutputSet.task_role, PaiOutputSet.task_index))).all())
    if not rows:
        what = f"task {out.task_name(*which)} of job {job.name}" if which else f"job {job.name}"
        raise NotFound(f"attempt: {what} kept no outputs in attempt {attempt}")
    return rows


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(out.CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_back(rt: MasterRuntime, cfg: dict[str, Any], task: str, relpaths: list[str] | None,
               expected: dict[str, str], dst: Path) -> None:
    """Blocking: the set's files (all, or ``relpaths``) from storage into ``dst``, each checked against
    the sha256 recorded when it was kept (409 naming the first that differs or is missing)."""
    from controlplane.storage import CheckpointNotFound, StorageError
    from controlplane.storage.base import local_files

    try:
        if relpaths is None:
            _storage(rt, cfg).download(task, dst)
        else:
            _storage(rt, cfg).download_files(task, relpaths, dst)
    except CheckpointNotFound as e:
        raise Conflict(f"task {task}'s outputs are no longer all in checkpoint storage: {e}") from e
    except StorageError as e:
        raise StorageFailed(f"reading task {task}'s outputs from checkpoint storage failed: {e}") from e
    if relpaths is None:
        extra = sorted(set(local_files(dst)) - set(expected))
        if extra:
            raise Conflict(f"task {task}'s outputs in checkpoint storage hold {extra[0]!r}, which it never kept; "
                           "refusing them")
    for rel, digest in expected.items():
        target = dst.joinpath(*rel.split("/"))
        if not target.is_file() or _sha256(target) != digest:
            raise Conflict(f"task {task}'s output {rel!r} was changed or removed in checkpoint storage after it "
                           "was kept (its sha256 differs from the recorded one); refusing it")


async def fetch_file(rt: MasterRuntime, principal: Principal, username: str, name: str, task: str | None,
                     path: str | None, attempt: int | None = None) -> tuple[Path, Path]:
    """One kept file read back into a temporary directory: (the file, the directory to remove after)."""
    async with rt.sessions() as session:
        job = await _job(session, principal, username, name)
        if task is None or path is None:
            raise BadRequest(f"{'task' if task is None else 'path'}: required (the task as <role>-<index> and the "
                             "file's path under its $PAI_OUTPUT_DIR, as det pai output lists them)")
        which = _task(job, task)
        assert which is not None
        kept = (await _sets(session, job, attempt, which))[0]
        row = await session.get(PaiOutputFile, (job.id, kept.attempt, which[0], which[1], path))
    if row is None:
        raise NotFound(f"path: task {task} of job {name} kept no file {path!r} in attempt {kept.attempt} "
                       f"(det pai output {name} lists what it kept)")
    work = Path(tempfile.mkdtemp(prefix="det-pai-output-"))
    try:
        await asyncio.to_thread(_read_back, rt, kept.storage, task, [path], {path: row.sha256}, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return work.joinpath(*path.split("/")), work


async def fetch_archive(rt: MasterRuntime, principal: Principal, username: str, name: str, task: str | None = None,
                        attempt: int | None = None) -> tuple[Path, Path, int]:
    """A tar.gz of an attempt's kept outputs (one task's, or every task's), each task's files under
    ``<role>-<index>/``: (the archive, the directory to remove after, the attempt)."""
    async with rt.sessions() as session:
        job = await _job(session, principal, username, name)
        sets = await _sets(session, job, attempt, _task(job, task))
    work = Path(tempfile.mkdtemp(prefix="det-pai-outputs-"))
    try:
        for kept in sets:
            await _read_set(rt, job, kept, work / out.task_name(kept.task_role, kept.task_index))
        archive = work / "outputs.tar.gz"
        await asyncio.to_thread(_pack, archive, work, [out.task_name(s.task_role, s.task_index) for s in sets])
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return archive, work, sets[0].attempt


async def _read_set(rt: MasterRuntime, job: PaiJob, kept: PaiOutputSet, dst: Path) -> None:
    dst.mkdir()
    if not kept.files:
        return
    async with rt.sessions() as session:  # at most out.MAX_FILES rows
        rows = (await session.execute(select(PaiOutputFile.path, PaiOutputFile.sha256).where(
            PaiOutputFile.pai_job_id == job.id, PaiOutputFile.attempt == kept.attempt,
            PaiOutputFile.task_role == kept.task_role, PaiOutputFile.task_index == kept.task_index))).all()
    expected = {path: digest for path, digest in rows}
    await asyncio.to_thread(_read_back, rt, kept.storage, out.task_name(kept.task_role, kept.task_index), None,
                            expected, dst)


def _pack(archive: Path, work: Path, tasks: list[str]) -> None:
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:  # speed over size: outputs compress poorly
        for task in tasks:
            tar.add(work / task, arcname=task)
            shutil.rmtree(work / task, ignore_errors=True)
    os.chmod(archive, 0o600)
